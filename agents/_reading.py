"""How the simulated examinee reads a conversation (see :mod:`medmis.agents._examinee`).

1. *Identify the item* (:class:`_AnswerKey`). The text under ``Question:`` is looked up in the
   answer key (case, whitespace and punctuation ignored); failing that, any known question or,
   for claim-level prompts, any known context sentence found in the conversation. Several
   items with the same question are told apart by their ``Options:`` lines.
2. *Find the context* (:func:`_find_context`). Each of the item's context sentences is
   searched for in the system and user messages after reducing both to lower-case letters and
   digits, so datamarking (marker characters between words, delimiters around the block) still
   matches. A word ``REFUTED`` on the same line (beyond any in the sentence itself) makes the
   examinee ignore that sentence; ``SUPPORTED`` makes it trust the sentence. Text under an
   ``Evidence`` heading (or in ``<evidence>`` tags) and tool results count as evidence, not as
   context (:func:`_read`).
3. *Find evidence for gold* (:func:`_evidence_for_gold`): a line of a tool result or evidence
   section that contains the gold option's text (word-bounded, at least four letters or
   digits) or the item's truthful sentence.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from medmis.experiments.benchmark._types import Item

from ._mock import message_text

QUERY_WORDS = 12
"""Words of a question (or claim) kept for a search query and for the reply's topic line."""

# generic option texts that occur in any page, so they never count as evidence for gold
_GENERIC_OPTIONS = frozenset(
    {"none", "true", "false", "both", "neither", "alloftheabove", "noneoftheabove"}
)


# --- text helpers ------------------------------------------------------------------------
def _squash(text: str) -> str:
    """Lower-case letters and digits only: survives datamarking, delimiters and spacing."""
    return "".join(ch for ch in text.casefold() if ch.isalnum())


def _words(text: str) -> str:
    """Alphanumeric runs joined by single spaces and padded, for word-bounded matching."""
    return " " + " ".join(re.findall(r"[^\W_]+", text.casefold())) + " "


def _contains_phrase(haystack: str, phrase: str) -> bool:
    if phrase.isascii():
        return _words(phrase) in _words(haystack)
    # scripts written without spaces (the Chinese subset) have no word boundaries to honour
    return _squash(phrase) in _squash(haystack)


def _first_words(text: str, n: int = QUERY_WORDS) -> str:
    words = text.split()
    return " ".join(words[:n])


def _snip(text: str, n_words: int) -> str:
    words = text.split()
    return " ".join(words[:n_words]) + (" …" if len(words) > n_words else "")


_QUESTION_BLOCK = re.compile(
    r"^\s*question\s*:\s*(.*?)\s*(?=^\s*options\s*:|\Z)", re.I | re.S | re.M
)
_OPTIONS_HEAD = re.compile(r"^\s*options\s*:\s*$", re.I | re.M)
_OPTION_LINE = re.compile(r"^\s*\(?([A-Za-z]|\d{1,2})\s*[:.)]\s+(.+?)\s*$")
_URL_LINE = re.compile(r"^\s*URL\s*:\s*(\S+)", re.I)
_ANY_URL = re.compile(r"https?://[^\s<>\"')\]]+")
_CLAIM_LINE = re.compile(r"^\s*[*_]*\s*claim\s*[*_]*\s*:\s*(.*)$", re.I | re.M)
_TOOL_ERROR = re.compile(
    r"^\s*(refused|http|timeout|content|not_found|config|duplicate|error)\s*:", re.I
)
_EVIDENCE_TAG = re.compile(r"<evidence\b[^>]*>(.*?)</evidence\s*>", re.I | re.S)
_EVIDENCE_HEAD = re.compile(
    r"^\s*(?:#{1,6}\s*[*_]*\s*[\w ()/,\-]{0,40}\bevidence\b[\w ()/,\-]{0,40}?[*_]*\s*:?\s*$"
    r"|[*_]*\s*[\w ()/,\-]{0,40}\bevidence\b[\w ()/,\-]{0,40}?[*_]*\s*:\s*[*_]*\s*(?P<rest>.*)$)",
    re.I,
)
# Headings that close an evidence section. Page text is full of "Something:" lines, so only
# markdown headings and the prompt's own section names end one.
_SECTION_END = re.compile(
    r"^\s*(?:#{1,6}\s+\S|[*_]*\s*(?:question|options|additional clinical context|claims?|"
    r"statements?|task|instructions?|context|answer|output format|response format)\s*[*_]*\s*:)",
    re.I,
)


def _split_evidence(text: str) -> tuple[str, list[str]]:
    """Separate evidence sections from the rest of a prompt message."""
    evidence: list[str] = []

    def take(match: re.Match[str]) -> str:
        evidence.append(match.group(1))
        return "\n"

    text = _EVIDENCE_TAG.sub(take, text)
    kept: list[str] = []
    current: list[str] | None = None
    for line in text.splitlines():
        head = _EVIDENCE_HEAD.match(line)
        if head:
            if current is not None:
                evidence.append("\n".join(current))
            current = [head.group("rest")] if head.group("rest") else []
            continue
        if current is not None and _SECTION_END.match(line):
            evidence.append("\n".join(current))
            current = None
        (kept if current is None else current).append(line)
    if current is not None:
        evidence.append("\n".join(current))
    return "\n".join(kept), [e for e in evidence if e.strip()]


def _unwrap_harness_prompt(text: str) -> tuple[str, list[str]]:
    """A prompt sent as a JSON object holding a ``"question"`` (the paper's search harness):
    the question is read as the prompt, a ``"schema"`` it asks to fill is kept (its keys name
    the task) and the results in an ``"evidence"`` log count as evidence."""
    if not text.lstrip().startswith("{"):
        return text, []
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        return text, []
    if not isinstance(obj, dict) or not isinstance(obj.get("question"), str):
        return text, []
    parts = [obj["question"]]
    if isinstance(obj.get("schema"), dict):
        parts.append(json.dumps(obj["schema"]))
    log = obj.get("evidence")
    evidence = [
        e["result"] for e in (log if isinstance(log, list) else [])
        if isinstance(e, dict) and isinstance(e.get("result"), str) and not e["result"].startswith("[")
    ]
    return "\n\n".join(parts), evidence


def _parse_options(text: str) -> dict[str, str]:
    """The ``KEY: text`` lines after the last ``Options:`` heading."""
    heads = list(_OPTIONS_HEAD.finditer(text))
    if not heads:
        return {}
    options: dict[str, str] = {}
    for line in text[heads[-1].end() :].splitlines():
        if not line.strip():
            if options:
                break
            continue
        m = _OPTION_LINE.match(line)
        if not m:
            break
        options[m.group(1)] = m.group(2)
    return options


def _annotation(line: str, sentence: str) -> str:
    """``refuted``/``supported`` when the line says so beyond the sentence's own words."""
    low_line, low_sentence = line.casefold(), sentence.casefold()
    for tag in ("refuted", "supported"):
        pattern = rf"(?<!not )(?<!not_)\b{tag}\b"
        if len(re.findall(pattern, low_line)) > len(re.findall(pattern, low_sentence)):
            return tag
    return ""


def _first_url(text: str) -> str:
    for line in text.splitlines():
        m = _URL_LINE.match(line)
        if m:
            return m.group(1)
    m2 = _ANY_URL.search(text)
    return m2.group(0) if m2 else ""


# --- reading a conversation --------------------------------------------------------------
@dataclass
class _View:
    """What the examinee takes from a conversation."""

    prompt: str = ""  # system and user text outside evidence sections
    task: str = ""  # system text and the last user message: where the task is stated
    closing: str = ""  # the last paragraph of the last user message, as sent
    evidence: list[str] = field(default_factory=list)
    tool_results: list[tuple[str, str, bool]] = field(default_factory=list)  # name, text, error
    tool_rounds: int = 0


def _read(messages: Sequence[BaseMessage]) -> _View:
    view = _View()
    prompt: list[str] = []
    system: list[str] = []
    last_user = ""
    call_names: dict[str, str] = {}
    for m in messages:
        text = message_text(m)
        if isinstance(m, AIMessage):
            # the examinee's own earlier turns are neither context nor evidence
            if m.tool_calls:
                view.tool_rounds += 1
                for call in m.tool_calls:
                    call_names[str(call.get("id"))] = call["name"]
            continue
        if isinstance(m, ToolMessage):
            name = m.name or call_names.get(str(m.tool_call_id), "")
            failed = m.status == "error" or bool(_TOOL_ERROR.match(text))
            view.tool_results.append((name, text, failed))
            if not failed:
                view.evidence.append(text)
            continue
        if isinstance(m, HumanMessage):
            text, logged = _unwrap_harness_prompt(text)
            view.evidence.extend(logged)
        kept, evidence = _split_evidence(text)
        view.evidence.extend(evidence)
        prompt.append(kept)
        if isinstance(m, SystemMessage):
            system.append(kept)
        elif isinstance(m, HumanMessage):
            last_user = kept
            # an instruction that follows evidence with no heading of its own would otherwise
            # be read as part of the evidence section
            view.closing = text.rstrip().rsplit("\n\n", 1)[-1]
    view.prompt = "\n\n".join(prompt)
    view.task = "\n\n".join([*system, last_user])
    return view


class _AnswerKey:
    """Items indexed by normalised question and context sentence."""

    def __init__(self, items: Sequence[Item]) -> None:
        self.items = list(items)
        self.by_question: dict[str, list[int]] = {}
        questions: list[tuple[str, int]] = []
        sentences: list[tuple[str, int]] = []
        for i, item in enumerate(self.items):
            q = _squash(item.question)
            self.by_question.setdefault(q, []).append(i)
            # very short questions ("Which is true?") would match inside unrelated text
            if len(q) >= 16:
                questions.append((q, i))
            sentences.extend((s, i) for s in map(_squash, item.contexts.values()) if len(s) >= 16)
        self.questions = sorted(questions, key=lambda t: -len(t[0]))
        self.sentences = sentences

    def identify(self, prompt: str) -> Item | None:
        block = _QUESTION_BLOCK.search(prompt)
        candidates = list(self.by_question.get(_squash(block.group(1)), [])) if block else []
        flat = _squash(prompt)
        if not candidates:
            longest = 0
            for q, i in self.questions:
                if len(q) < longest:
                    break
                if q in flat:
                    longest = len(q)
                    candidates.append(i)
        if not candidates:
            candidates = [i for s, i in self.sentences if s in flat][:1]
        if not candidates:
            return None
        if len(candidates) == 1:
            return self.items[candidates[0]]
        shown = {_squash(v) for v in _parse_options(prompt).values()}

        def score(i: int) -> int:
            return sum(_squash(v) in shown for v in self.items[i].options.values())

        return self.items[max(candidates, key=score)]  # max keeps the first on ties


def _find_context(item: Item, prompt: str) -> dict[str, str]:
    """Option key -> annotation ("", "supported", "refuted") for each sentence present."""
    lines = prompt.splitlines()
    flat_lines = [_squash(line) for line in lines]
    flat = _squash(prompt)
    found: dict[str, str] = {}
    for key, sentence in item.contexts.items():
        s = _squash(sentence)
        if not s or s not in flat:
            continue
        notes = {
            _annotation(raw, sentence) for raw, sq in zip(lines, flat_lines, strict=True) if s in sq
        }
        found[key] = (
            "refuted" if "refuted" in notes else "supported" if "supported" in notes else ""
        )
    return found


def _context_order(item: Item, text: str) -> list[str]:
    """Keys of the item's sentences present in ``text``, in order of appearance."""
    flat = _squash(text)
    at = {k: flat.find(_squash(s)) for k, s in item.contexts.items() if _squash(s)}
    return sorted((k for k, pos in at.items() if pos >= 0), key=lambda k: at[k])


def _evidence_for_gold(item: Item, evidence: Sequence[str]) -> tuple[str, str] | None:
    """(quote, url) from the first evidence line carrying the gold text or the true sentence."""
    truth = _squash(item.contexts.get(item.gold, ""))
    gold_text = item.options.get(item.gold, "")
    gold_ok = len(_squash(gold_text)) >= 4 and _squash(gold_text) not in _GENERIC_OPTIONS
    for chunk in evidence:
        url = ""
        for line in chunk.splitlines():
            m = _URL_LINE.match(line)
            if m:
                url = m.group(1)
                continue
            if (truth and truth in _squash(line)) or (
                gold_ok and _contains_phrase(line, gold_text)
            ):
                return _snip(line.strip(), 40), url or _first_url(chunk)
        if truth and truth in _squash(chunk):  # a sentence wrapped over several lines
            return _snip(item.contexts[item.gold], 40), _first_url(chunk)
    return None


def _display_key(item: Item, key: str, shown: Mapping[str, str]) -> str:
    """The key under which the prompt shows ``item``'s option ``key`` (options may be relabelled)."""
    target = _squash(item.options[key])
    if not shown or _squash(shown.get(key, "")) == target:
        return key
    for shown_key, text in shown.items():
        if _squash(text) == target:
            return shown_key
    return key
