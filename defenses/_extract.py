"""Answer extraction: find the option key a model committed to, or None.

A reply is normalised with NFKC (full-width ``Ｂ``, ``：`` and ``（）`` read as ASCII) and then
read by an ordered list of strategies; the first one that finds a key wins:

0. ``_json_reply`` — a reply that is one JSON object (bare, fenced, or with prose around it),
   read at its answer field as the reference evaluation reads ``answer_letter`` (see
   ``_extract_json``). A provider's parsed structured reply, when given, comes before all.
1. ``_explicit_statement`` — JSON fields, "Final answer: X", ``\\boxed{X}``, "the answer is X",
   "Answer: X", "Option X is correct" and their Chinese forms (答案：X, 最终答案是X, 选X, X项正确).
   Every statement is collected with its position. The last *final* statement (JSON, final
   answer, boxed) wins, otherwise the last ordinary one: a model that revises itself is read at
   its last word, while a closing remark that quotes the misleading context ("the context
   claims the answer is A") cannot override the final-answer line the prompt asked for.
2. ``_last_line`` — a last line holding only the key ("B", "(B)", "B.", "B) Vitamin C").
3. ``_option_text`` — exactly one option's text in the final statement (or a concluding last
   line) and no negation there.

A candidate key is kept only when it is one of the option keys and is not an English article
or pronoun ("A 45-year-old…", "I think…"), part of a word ("B12", "C-reactive"), one of several
("A or B"), a question ("is it B?") or conditional / negated / attributed ("if the answer is A",
"the context suggests that the answer is A").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

from pydantic import BaseModel

from ._extract_json import answer_value, json_object, key_shaped, structured_key, value_key
from ._extract_rules import (
    _HEDGED_BEFORE,
    _JSON_FIELDS,
    _JSON_VALUE,
    _RULES,
    _VERDICTS,
    _accept,
    _word,
)
from ._extract_text import (
    _ascii_lower,
    _content_lines,
    _fold,
    _normalise,
    _unique_mention,
)


class Extraction(BaseModel):
    """The option key a reply committed to (None when there is none) and how it was found."""

    choice: str | None
    method: str


class _Reply(NamedTuple):
    text: str  # NFKC-normalised reply
    low: str  # ``text`` with ASCII letters lowered: same length, so positions carry over
    options: Mapping[str, str]
    keymap: dict[str, str]  # upper-cased key -> key exactly as in ``options``


class _Candidate(NamedTuple):
    pos: int
    key: str
    method: str
    final: bool


# --- strategies --------------------------------------------------------------------------------


def _json_candidates(reply: _Reply) -> Iterator[_Candidate]:
    """Answer fields of JSON objects, inline or fenced; tolerant of invalid JSON around them."""
    for pattern in _JSON_FIELDS:
        for m in pattern.finditer(reply.low):
            # Slice the value from the original text so that its key keeps its case.
            value = reply.text[m.start(m.lastgroup or 0) : m.end(m.lastgroup or 0)]
            key = value_key(value, reply.options)  # "B", "(B)", "Option B", "Vitamin C"
            if key is None and not key_shaped(value):  # "B, because …": the checks decide
                found = _JSON_VALUE.match(_ascii_lower(value))
                key = _accept(value, found, reply.keymap) if found else None
            if key is not None:
                yield _Candidate(m.start(), key, "json", True)


def _rule_candidates(reply: _Reply) -> Iterator[_Candidate]:
    for rule in _RULES:
        if rule.needle in reply.low:
            for m in rule.pattern.finditer(reply.low):
                key = _accept(reply.text, m, reply.keymap)
                if key is not None:
                    yield _Candidate(m.start("key"), key, rule.method, rule.final)


def _verdict_candidates(reply: _Reply) -> Iterator[_Candidate]:
    for rule in _VERDICTS:
        if not any(needle in reply.low for needle in rule.needles):
            continue
        for v in rule.verdict.finditer(reply.low):
            m = rule.key_before.search(reply.low, max(0, v.start() - 40), v.start())
            key = _accept(reply.text, m, reply.keymap) if m else None
            if m and key is not None:
                yield _Candidate(m.start("key"), key, "option_correct", False)


def _explicit_statement(reply: _Reply) -> Extraction | None:
    """The last final statement, else the last ordinary one."""
    by_pos: dict[int, _Candidate] = {}
    # Sources in priority order: when two find the same key ("Final answer: B" is also
    # "answer: B"), the first names the method.
    for source in (_json_candidates, _rule_candidates, _verdict_candidates):
        for cand in source(reply):
            by_pos.setdefault(cand.pos, cand)
    finals = [c for c in by_pos.values() if c.final]
    pool = finals or list(by_pos.values())
    if not pool:
        return None
    best = max(pool, key=lambda c: c.pos)
    return Extraction(choice=best.key, method=best.method)


_BARE_LINE = re.compile(
    r"(?:(?:therefore|thus|hence|so|故|所以|因此)[,:，]?\s*)?(?:(?:option|choice|选项)\s*)?"
    r"[(\[【]?(?P<key>[A-Za-z]|\d{1,2})[)\]】]?"
    r"(?:\s*[.:)\-–—]\s*(?P<rest>.+?))?\s*[.。]?",
    re.IGNORECASE,
)
_OPTION_LINE = re.compile(r"[(\[]?(?:[A-Z]|\d{1,2})[)\].:]\s*\S")


def _last_line(reply: _Reply) -> Extraction | None:
    """A last line that is only the key, optionally followed by that option's own text."""
    lines = _content_lines(reply.text)
    if not lines:
        return None
    m = _BARE_LINE.fullmatch(lines[-1])
    if m is None:
        return None
    key = reply.keymap.get(m.group("key").upper())
    if key is None:
        return None
    rest = m.group("rest")
    if rest:
        if _fold(rest) != _fold(reply.options[key]):
            return None
        # "D: Vitamin K" closing a list of options is the list, not an answer.
        if len(lines) > 1 and _OPTION_LINE.match(lines[-2]):
            return None
    return Extraction(choice=key, method="last_line")


_MARKERS = (
    re.compile(_word("final") + r"\s+(?:answer|choice)\b[\s*_:]*(?:is\b)?"),
    re.compile(_word("answer") + r"\s*(?:is\b|would\s+be\b|should\s+be\b|:)"),
    re.compile(r"答案\s*(?:应该是|应为|是|为|:|：)?"),
)
_CONCLUSION = re.compile(
    r"\b(?:therefore|thus|hence|so|overall|in\s+summary|in\s+conclusion|most\s+likely|best|"
    r"diagnosis|conclude)\b|因此|所以|综上|总之|故|最可能|最佳",
    re.IGNORECASE,
)
_NEGATION = re.compile(
    r"\b(?:not|no|cannot|unable|neither|nor|none|unclear|uncertain|insufficient|unknown|"
    r"impossible|incorrect|wrong|false|unlikely|excluded)\b|n['’]t\b|"
    r"无法|不能|不确定|不清楚|难以|不知道|错误|排除|不正确",
    re.IGNORECASE,
)


def _option_text(reply: _Reply) -> Extraction | None:
    """Exactly one option text named in the final statement (or a concluding last line)."""
    region = _final_region(reply)
    # A negated or dismissive region ("not vitamin A", "vitamin K is wrong") names an option
    # without choosing it.
    if not region or _NEGATION.search(region):
        return None
    key = _unique_mention(region, reply.options)
    return Extraction(choice=key, method="option_text") if key else None


def _json_reply(reply: _Reply) -> Extraction | None:
    """The answer field of the one JSON object the reply consists of."""
    if "{" not in reply.text:
        return None
    obj = json_object(reply.text)
    key = value_key(answer_value(obj), reply.options) if obj is not None else None
    return Extraction(choice=key, method="json") if key is not None else None


_STRATEGIES: tuple[Callable[[_Reply], Extraction | None], ...] = (
    _json_reply,
    _explicit_statement,
    _last_line,
    _option_text,
)


def extract_answer(text: str, options: Mapping[str, str], *, parsed: Any = None) -> Extraction:
    """Find the option key a model's reply commits to.

    Args:
        text: The raw reply (English or Chinese; markdown, LaTeX or JSON allowed).
        options: Option key -> option text in display order; keys are letters ("A", "B", …)
            or digits ("1", "2", …).
        parsed: A provider's parsed structured reply (a mapping such as
            ``{"thinking_process": ..., "answer_letter": "B"}``), read first when it names
            an option (method ``"structured"``); otherwise the text decides.

    Returns:
        The exact key from ``options`` — or None when the reply commits to none of them
        (refusal, hedge, out-of-range key) — and the strategy that found it:
        ``"structured"``, ``"json"``,
        ``"final_answer"``, ``"boxed"``, ``"answer_is"``, ``"answer_label"``,
        ``"option_correct"``, ``"last_line"``, ``"option_text"`` or ``"none"``.
    """
    if parsed is not None:
        key = structured_key(parsed, options)
        if key is not None:
            return Extraction(choice=key, method="structured")
    normalised = _normalise(text or "")
    reply = _Reply(
        text=normalised,
        low=_ascii_lower(normalised),
        options=options,
        keymap={k.upper(): k for k in options},
    )
    for strategy in _STRATEGIES:
        found = strategy(reply)
        if found is not None:
            return found
    return Extraction(choice=None, method="none")


def _final_region(reply: _Reply) -> str | None:
    """The line after the last unhedged answer marker, else a concluding last line."""
    text = reply.text
    end = None
    for pattern in _MARKERS:
        for m in pattern.finditer(reply.low):
            hedged = _HEDGED_BEFORE.search(text, max(0, m.start() - 60), m.start())
            if not hedged and (end is None or m.end() > end):
                end = m.end()
    if end is not None:
        lines = _content_lines(text[end:])
        return lines[0] if lines else None
    lines = _content_lines(text)
    # Without a marker only a concluding last line counts: "Vitamin A deficiency causes night
    # blindness" or "D: wrong because …" analyses an option rather than choosing it.
    if lines and _CONCLUSION.search(lines[-1]) and not _OPTION_LINE.match(lines[-1]):
        return lines[-1]
    return None
