"""Answer extraction: find the option key a model committed to, or None.

A reply is normalised with NFKC (full-width ``Ｂ``, ``：`` and ``（）`` read as ASCII) and then
read by an ordered list of strategies; the first one that finds a key wins:

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
import unicodedata
from collections.abc import Callable, Iterator, Mapping
from typing import NamedTuple

from pydantic import BaseModel


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


class _Rule(NamedTuple):
    """A statement read forwards: a head phrase, then the key.

    The pattern runs only when ``needle`` occurs in the lowered reply.
    """

    method: str
    final: bool
    needle: str
    pattern: re.Pattern[str]


class _Verdict(NamedTuple):
    """A statement read backwards: find the verdict ("is correct", "正确"), then the key
    just before it (within 40 characters)."""

    needles: tuple[str, ...]
    verdict: re.Pattern[str]
    key_before: re.Pattern[str]


# --- patterns ----------------------------------------------------------------------------------
# Patterns run on the ASCII-lowered reply without re.IGNORECASE and each starts with a literal:
# both let the regex engine skip ahead to candidate positions (a case-insensitive alternation
# at the start costs ~20x on a 2 KB reply). The key's case is read back from the original text.

# A key is one letter or a one/two-digit number standing alone (not inside "B12", "Vit").
_KEY = r"(?P<key>[a-z]|\d{1,2})(?![a-z0-9])"
_MARKUP = r"[\s*_`\"'“”‘’]*"
# Between a statement and its key: markdown, quotes, \boxed{ / \text{, "option", a bracket.
_OPEN = (
    _MARKUP
    + r"(?:\$?\\(?:boxed|fbox)\s*\{\s*)?"
    + r"(?:\\(?:text|textbf|mathrm|mathbf)\s*\{\s*)?"
    + r"(?:(?:option|choice|letter|选项)\s*)?"
    + _MARKUP
    + r"[(\[【{]?\s*"
)
# Words models put before the key that do not hedge it ("is clearly B", "…: I think B").
_FILLER = (
    r"(?:(?:clearly|definitely|probably|likely|most\s+likely|therefore|thus|actually|indeed|"
    r"still|i\s+(?:think|believe)|it\s+is|it['’]s|that\s+is)[\s,:]+)*"
)
_SEP = r"[\s*_:=\-–—\"'“”]*"
_SEP_ZH = r"[\s*_:：]*(?:应该是|应该选|应是|应为|应选|就是|是|为|选)?[\s*_:：]*"
_VERB = r"(?:is|would\s+be|should\s+be|will\s+be)\b"


def _word(w: str) -> str:
    """``w`` not preceded by a letter (a look-behind after the literal keeps the fast scan)."""
    return f"{w}(?<![a-z]{w})"


def _rules(method: str, final: bool, tail: str, *heads: tuple[str, str]) -> tuple[_Rule, ...]:
    return tuple(_Rule(method, final, needle, re.compile(head + tail)) for needle, head in heads)


_RULES: tuple[_Rule, ...] = (
    *_rules(
        "final_answer", True, _OPEN + _KEY,
        ("final", _word("final") + r"\s+(?:answer|choice|option|selection)s?\b"
                  + _SEP + r"(?:" + _VERB + _SEP + r")?" + _FILLER),
        ("最", r"最(?:终|后)的?(?:答案|选择|结论|回答)" + _SEP_ZH),
    ),
    *_rules(
        "boxed", True, r"[(\[]?\s*" + _KEY,
        ("box", r"\\(?:boxed|fbox)\s*\{[\s*]*(?:\\(?:text|textbf|mathrm|mathbf)\s*\{\s*)?"),
    ),
    *_rules(
        "answer_is", False, r"[\s*_:：\"'“”]*" + _FILLER + _OPEN + _KEY,
        ("answer", _word("answer") + r"\s*(?:" + _VERB + r"|=)"),
        ("option", _word("option") + r"\s+" + _VERB),
        ("choice", _word("choice") + r"\s+" + _VERB),
        ("choose", _word("choose") + r"\b"),
        ("select", _word("select") + r"\b"),
        ("pick", _word("pick") + r"\b"),
        ("go with", _word("go") + r"\s+with\b"),
        ("opt for", _word("opt") + r"\s+for\b"),
        ("答案", r"答案\s*(?:应该|应当|应)?\s*(?:是|为|选)"),
        ("选", r"(?:正确|最佳|最合适的?|最恰当的?)(?:选项|选择)\s*(?:应该|应)?\s*(?:是|为)"),
        # 选B / 故选B, but not 选项 (option), 首选 (first-line) or 可选 (optional)
        ("选", r"选(?<![首可]选)择?(?!项)"),
    ),
    *_rules(
        "answer_label", False, _OPEN + _KEY,
        ("answer", _word("answer") + r"[*_]*\s*:"),
        ("ans", _word("ans") + r"\b[*_]*\s*:"),
        ("答", r"答案?\s*[:：]"),
    ),
)  # fmt: skip

_VERDICTS: tuple[_Verdict, ...] = (
    # The key must follow "option", a bracket, or start a line/sentence: "Vitamin C is correct"
    # names vitamin C, not option C.
    _Verdict(
        ("correct", "right", "best"),
        re.compile(
            r"is\s+(?:the\s+)?(?:most\s+|only\s+|single\s+)?(?:correct|right|best)(?![-\w])"
            r"(?!\s+(?:only|if|when|in|for)\b)"
        ),
        re.compile(
            r"(?:\b(?:option|choice|answer)\s+[(\[]?|^[ \t]*(?:[-*>#]+[ \t]*)?[*_]*[(\[]?|"
            r"(?<=[.!?;:])[ \t]*[*_]*[(\[]?|[(\[])" + _KEY + r"[)\]]?[*_]*\s+\Z",
            re.MULTILINE,
        ),
    ),
    # "B项正确", "选项B正确" — but not "维生素C正确" (vitamin C) nor "A项不正确".
    _Verdict(
        ("正确", "对的", "最佳", "最合适", "最恰当"),
        re.compile(r"(?:正确|对的|最佳|最合适|最恰当)(?!与否)"),
        re.compile(
            r"(?:选项\s*[(\[【]?|(?<![a-z0-9\u4e00-\u9fff])[(\[【]?)"
            + _KEY
            + r"[)\]】]?\s*(?:项|选项)?\s*(?:是|为)?\s*\Z"
        ),
    ),
)

_JSON_FIELDS = tuple(
    re.compile(
        q + r"(?:final[_\s-]?answer|answer|choice|option|selected[_\s-]?(?:answer|option|choice)|"
        r"correct[_\s-]?(?:answer|option|choice)|最终答案|答案)" + q + r"\s*:\s*"
        r"(?:\"(?P<dq>[^\"\n]{0,200})\"|'(?P<sq>[^'\n]{0,200})'|(?P<num>\d{1,2})(?![\d.]))"
    )
    for q in ('"', "'")
)
_JSON_VALUE = re.compile(r"\s*[(\[【]?\s*" + _KEY)

# --- candidate checks --------------------------------------------------------------------------

_CONNECTORS = (
    "because", "since", "as", "is", "was", "which", "here", "for", "given", "due", "over",
    "rather", "instead", "with", "and", "or", "but", "seems", "appears", "fits", "matches",
    "would", "should", "remains", "best",
)  # fmt: skip
# "A 45-year-old", "A rare cause", "I think": an article / pronoun, not a key (case-sensitive).
_ARTICLE_USE = re.compile(r"[ \t]+(?!(?:" + "|".join(_CONNECTORS) + r")\b)[a-z0-9]")
_CLOSED = re.compile(r"\s*[)\]】}]")
_LINE_END = re.compile(r"[ \t]*[.:。]?[ \t*_]*(?:\n|$)")
_GLUED = re.compile(r"[-'’][A-Za-z]|[.,]\d|[%°]|/\d|[ \t*_)\]]*\?")
_CONDITIONAL_AFTER = re.compile(r"\W{0,3}\s+(?:only\s+)?(?:if|unless)\b", re.IGNORECASE)
_ALTERNATIVE = re.compile(
    r"[ \t]*[)\]】}]?[*_]*[ \t]*,?[ \t]*(?:(?i:or|and)|/|、|或|和|与|及)[ \t]*"
    r"(?:(?i:possibly|maybe|perhaps|option)[ \t]+)?[(\[]?(?P<other>[A-Z]|\d{1,2})(?![A-Za-z0-9])"
)
# A statement that is conditional, negated or attributed to someone else, judged on the words
# just before it ("if the answer is A", "I don't think the answer is A", "the context suggests
# that the answer is A"). A clause break (",", ":", ".") or "but" ends the look-back.
_HEDGED_BEFORE = re.compile(
    r"(?:\b(?:if|whether|unless|suppose|supposing|assume|assuming|not|never|nor|cannot|"
    r"suggests?|suggesting|suggested|claims?|claimed|claiming|implies|implied|argues|argued|"
    r"asserts?|asserted|thinks|believes|says|said|states|stated)|n['’]t)"
    r"\s+(?:that\s+)?(?:(?!(?:but|however|though|although|yet|so)\b)[\w'’]+\s+){0,3}\Z"
    r"|(?:如果|假如|假设|倘若|若是|若|并非|不认为|不觉得|并不是|不是|声称|是否)[^\n。！？，,]{0,4}\Z",
    re.IGNORECASE,
)


def _accept(text: str, m: re.Match[str], keymap: Mapping[str, str]) -> str | None:
    """The option key named by ``m``'s ``key`` group, or None when it is not a real answer.

    ``m`` comes from the lowered copy of ``text``; the key's case is read from ``text``.
    """
    start, end = m.span("key")
    raw = text[start:end]
    key = keymap.get(raw.upper())
    if key is None:
        return None
    after = text[end : end + 80]
    bracketed = start > 0 and text[start - 1] in "([【{"
    closed = _CLOSED.match(after) is not None
    # A bare lowercase "a" is far more often the article than an option.
    if raw.islower() and not (bracketed or closed or _LINE_END.match(after)):
        return None
    if (
        not (bracketed or closed)
        and (raw in ("A", "I") or raw.isdigit())
        and _ARTICLE_USE.match(after)
    ):
        return None
    if _GLUED.match(after) or _CONDITIONAL_AFTER.match(after):
        return None
    alternative = _ALTERNATIVE.match(after)
    if alternative and keymap.get(alternative.group("other")) not in (None, key):
        return None
    if _HEDGED_BEFORE.search(text, max(0, m.start() - 60), m.start()):
        return None
    return key


# --- strategies --------------------------------------------------------------------------------


def _json_candidates(reply: _Reply) -> Iterator[_Candidate]:
    """Answer fields of JSON objects, inline or fenced; tolerant of invalid JSON around them."""
    for pattern in _JSON_FIELDS:
        for m in pattern.finditer(reply.low):
            # Slice the value from the original text so that its key keeps its case.
            value = reply.text[m.start(m.lastgroup or 0) : m.end(m.lastgroup or 0)]
            found = _JSON_VALUE.match(_ascii_lower(value))
            key = _accept(value, found, reply.keymap) if found else None
            if key is None:  # {"answer": "Vitamin C"}
                folded = _fold(value)
                key = next((k for k, v in reply.options.items() if folded and folded == _fold(v)), None)
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


_STRATEGIES: tuple[Callable[[_Reply], Extraction | None], ...] = (
    _explicit_statement,
    _last_line,
    _option_text,
)


def extract_answer(text: str, options: Mapping[str, str]) -> Extraction:
    """Find the option key a model's reply commits to.

    Args:
        text: The raw reply (English or Chinese; markdown, LaTeX or JSON allowed).
        options: Option key -> option text in display order; keys are letters ("A", "B", …)
            or digits ("1", "2", …).

    Returns:
        The exact key from ``options`` — or None when the reply commits to none of them
        (refusal, hedge, out-of-range key) — and the strategy that found it: ``"json"``,
        ``"final_answer"``, ``"boxed"``, ``"answer_is"``, ``"answer_label"``,
        ``"option_correct"``, ``"last_line"``, ``"option_text"`` or ``"none"``.
    """
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


# --- helpers -----------------------------------------------------------------------------------

# Full-width ASCII forms (Ｂ, ：, （）) and the ideographic space, mapped directly: Chinese
# replies almost always contain them, and full NFKC of CJK text is ~30x slower than this.
_FULL_WIDTH = {c: c - 0xFEE0 for c in range(0xFF01, 0xFF5F)} | {0x3000: 0x20}
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _normalise(text: str) -> str:
    """NFKC, with the common full-width forms taken care of on the fast path."""
    text = text.translate(_FULL_WIDTH)
    return text if unicodedata.is_normalized("NFKC", text) else unicodedata.normalize("NFKC", text)


def _ascii_lower(s: str) -> str:
    low = s.lower()
    # str.lower() lowers more than ASCII (harmless: keys are read from the original) but can
    # change the length ("İ" -> "i̇"); positions must stay aligned.
    return low if len(low) == len(s) else s.translate(_ASCII_LOWER)


def _fold(s: str) -> str:
    """Casefolded, whitespace-collapsed text without a trailing full stop, for comparisons."""
    return " ".join(unicodedata.normalize("NFKC", s).casefold().split()).rstrip(".。 ")


def _strip_markup(line: str) -> str:
    line = line.strip().strip("*_#>`$ \t")
    return line[2:].strip() if line.startswith("- ") else line


def _content_lines(text: str) -> list[str]:
    return [s for s in (_strip_markup(ln) for ln in text.splitlines()) if s]


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


def _unique_mention(region: str, options: Mapping[str, str]) -> str | None:
    """The single option whose text occurs in ``region`` as a whole phrase, else None."""
    hay = _fold(region)
    spans: list[tuple[int, int, str]] = []
    for key, option in options.items():
        needle = _fold(option)
        if len(needle) < 2:
            continue
        i = hay.find(needle)
        while i >= 0:
            j = i + len(needle)
            if not (_is_alnum_at(hay, i - 1) or _is_alnum_at(hay, j)):
                spans.append((i, j, key))
            i = hay.find(needle, i + 1)
    # "vitamin a" inside "vitamin a and d" is a mention of the longer option only.
    keys = {
        k
        for i, j, k in spans
        if not any(i2 <= i and j <= j2 and j2 - i2 > j - i for i2, j2, _ in spans)
    }
    return keys.pop() if len(keys) == 1 else None


def _is_alnum_at(s: str, i: int) -> bool:
    return 0 <= i < len(s) and s[i].isascii() and s[i].isalnum()
