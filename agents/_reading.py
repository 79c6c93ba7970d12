"""How the simulated examinee reads a conversation (see :mod:`medmis.agents._examinee`).

Everything here works on the text of the messages, whatever the prompt preset (``paper``,
``toolkit``) or the defender that wrote them; nothing is looked up in the answer key.

* *Question and options*: the text under the last ``Question:`` heading up to ``Options:``,
  and the ``KEY: text`` lines after it. A prompt sent as a JSON object holding a
  ``"question"`` (the paper's search harness) is unwrapped first. Without a ``Question:``
  heading, the question is the text just before the ``Options:`` heading, back to a blank line
  or to an opening ``[`` (a question quoted inline, as TrustRAG's prompts quote it). A question
  asked without options (open-ended) ends at its first blank line, where the instruction starts.
* *Context*: the block just before the (last) question whose first line is a heading alone on its
  line (``Additional Clinical Context:``, or any heading a defender chose), one sentence per
  line, in delivery order. Lines wholly in parentheses are notes, bullet lists are not
  context. A leading ``[LABEL]`` on a sentence's line is read as a verdict label in the
  examinee's own verdict vocabulary (``SUPPORTED``, ``REFUTED``; any other label marks the
  sentence as unverified).
* *Marking* (read for the opt-in ``marked_factor`` knob only, see
  :mod:`medmis.agents._calibration`): the context counts as **marked** when it is set apart
  structurally *and* the rest of the prompt refers to that marking: either every sentence is
  datamarked (its words joined by one repeated non-space symbol instead of spaces) and that
  symbol occurs in the prompt outside the context, or the block is fenced by a first and a
  last line made of a delimiter (lines that begin and end with punctuation, e.g.
  ``<<BEGIN>>`` / ``<<END>>``) and the opening fence line occurs outside the context too. The
  words around the marking are never read. Ordinary punctuation (``,`` ``;`` ``，`` ``、`` …)
  joining the words of a line without spaces (Chinese text) is not a datamark.
* *Offered abstention*: the task text quotes an answer line whose value names no option
  (``"Final answer: UNSURE"``, ``"The answer is [UNSURE]"``) or quotes "I don't know" as an
  answer; the examinee may then reply with that value (:mod:`medmis.agents._calibration`).
* *Evidence*: tool results and text under an ``Evidence`` heading (or in ``<evidence>`` tags,
  or a harness prompt's ``"evidence"`` log). Lines that annotate a claim with a verdict label
  (``REFUTED: <claim> — "<quote>"``) keep only their quoted part, so a checked claim's own words
  never count as evidence for it.
* *Call index*: how many assistant turns the conversation already holds.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from ._knowledge import squash
from ._lexical import Passage, passage
from ._mock import message_text

QUERY_WORDS = 12
"""Words of a question (or claim) kept for a search query and for the reply's topic line."""

VERDICT_LABELS = {"supported": "supported", "refuted": "refuted"}
"""Line labels in the examinee's own verdict vocabulary; any other label means unverified."""

_QUESTION_HEAD = re.compile(r"^[ \t]*question[ \t]*:[ \t]*$", re.I | re.M)
_QUESTION_BLOCK = re.compile(
    r"^\s*question\s*:\s*(.*?)\s*(?=^\s*options\s*:|\Z)", re.I | re.S | re.M
)
_OPTIONS_HEAD = re.compile(r"^\s*options\s*:\s*$", re.I | re.M)
_OPTION_LINE = re.compile(r"^\s*\(?([A-Za-z]|\d{1,2})\s*[:.)]\s+(.+?)\s*$")
_HEADING = re.compile(r"^\s*([^\n:]{1,80}):\s*$")
_LABEL = re.compile(r"^\s*\[([A-Za-z][A-Za-z _-]{1,30})\]\s*(.*)$")
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")
_CLAIM_HEAD = re.compile(r"^\s*[*_]*\s*claim\b[^:\n]{0,30}:\s*(.*)$", re.I | re.M)
_ANNOTATED = re.compile(r"^\s*(SUPPORTED|REFUTED|NOT ENOUGH INFO|NOT CHECKED)\s*:", re.M)
_FENCE_CHARS = "<>-=#*~`|"
# punctuation that joins words in ordinary text (Chinese has no spaces), never a datamark
_PLAIN_PUNCT = set(",.;:!?'\"()[]{}/-，。、；：！？“”‘’（）《》「」")
_OFFERED_LINE = re.compile(
    r"[\"“]\s*(?:final\s+answer\s*[:：]\s*|the\s+answer\s+is\s*\[)([^\"”\]\n]{1,40}?)\s*\]?\s*[\"”]", re.I
)
_OFFERED_PHRASE = re.compile(r"[\"“](I\s+(?:don['’]t|do\s+not)\s+know)[\"”]", re.I)
_PLACEHOLDER = re.compile(r"^(?:x|<[^>]*>|\{[^}]*\}|[a-z]|\d{1,2}|\.\.\.|…)$", re.I)
_QUOTED = re.compile(r"\"([^\"]+)\"|“([^”]+)”")
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




def _is_fence(line: str) -> bool:
    """A delimiter line: begins and ends with fence punctuation (``<<BEGIN>>``, ``---``)."""
    s = line.strip()
    return len(s) >= 3 and s[0] in _FENCE_CHARS and s[-1] in _FENCE_CHARS


def _datamark(line: str) -> str | None:
    """The symbol joining a datamarked line's words, or None for ordinary text."""
    s = line.strip()
    if " " in s or len(s) < 12:
        return None
    runs = Counter(re.findall(r"(?<=\w)[^\w\s]+(?=\w)", s))
    if not runs:
        return None
    symbol, n = runs.most_common(1)[0]
    if any(ch in _PLAIN_PUNCT for ch in symbol):
        return None
    return symbol if n >= 2 else None


def abstain_offer(task: str, options: dict[str, str]) -> str:
    """The answer value a prompt offers that names no option ("" when it offers none)."""
    keys = {k.casefold() for k in options}
    for m in _OFFERED_LINE.finditer(task):
        value = m.group(1).strip()
        if value.casefold() not in keys and not _PLACEHOLDER.match(value):
            return value
    found = _OFFERED_PHRASE.search(task)
    return found.group(1) if found else ""


@dataclass
class Sentence:
    """One context sentence as delivered: its text (unmarked), position and line label."""

    text: str
    position: int
    label: str = ""  # "", "supported", "refuted" or "unverified"


@dataclass
class Prompt:
    """What the examinee takes from a conversation."""

    text: str = ""  # system and user text outside evidence sections
    task: str = ""  # system text and the last user message: where the task is stated
    closing: str = ""  # the last paragraph of the last user message, as sent
    question: str = ""
    options: dict[str, str] = field(default_factory=dict)
    context: list[Sentence] = field(default_factory=list)
    marked: bool = False
    abstain_offer: str = ""  # an offered answer that names no option, e.g. "UNSURE"
    statements: list[str] = field(default_factory=list)  # "[n] text" lines of a splitting task
    claim: str = ""  # the claim a verification task is about
    evidence: list[Passage] = field(default_factory=list)
    tool_results: list[tuple[str, str, bool]] = field(default_factory=list)  # name, text, error
    tool_rounds: int = 0
    call_index: int = 0


def _clean_evidence(text: str) -> str:
    lines: list[str] = []
    for line in text.splitlines():
        if _ANNOTATED.match(line):
            lines.extend(a or b for a, b in _QUOTED.findall(line))
        else:
            lines.append(line)
    return "\n".join(lines)


def _context_block(text: str) -> tuple[list[str], str] | None:
    """(lines of the context block, the prompt without it) or None when there is none."""
    # the block before the last question that has one: a prompt that restates its task after
    # the context (the ``sandwich`` defender) asks the question twice, the second time bare
    for head in reversed(list(_QUESTION_HEAD.finditer(text))):
        before = text[: head.start()]
        paragraphs = re.split(r"\n[ \t]*\n", before.rstrip())
        lines = paragraphs[-1].strip("\n").splitlines() if paragraphs else []
        if len(lines) < 2 or not _HEADING.match(lines[0]):
            continue
        body = [ln for ln in lines[1:] if ln.strip()]
        if not body or all(_BULLET.match(ln) for ln in body):
            continue
        start = before.rstrip().rfind(paragraphs[-1].strip("\n"))
        rest = before[:start] + text[head.start() :]
        return body, rest
    return None


def _read_context(view: Prompt) -> None:
    found = _context_block(view.text)
    if found is None:
        return
    body, rest = found
    fenced = len(body) >= 3 and _is_fence(body[0]) and _is_fence(body[-1])
    if fenced:
        body = body[1:-1]
    marks: list[str | None] = []
    for line in body:
        s = line.strip()
        if s.startswith("(") and s.endswith(")"):
            continue  # a note about the context, not a sentence of it
        label = ""
        m = _LABEL.match(s)
        if m:
            label = VERDICT_LABELS.get(m.group(1).strip().casefold(), "unverified")
            s = m.group(2).strip()
        mark = _datamark(s)
        marks.append(mark)
        if mark:
            s = " ".join(s.replace(mark, " ").split())
        if s:
            view.context.append(Sentence(s, len(view.context), label))
    symbols = set(marks)
    if fenced:
        view.marked = body != [] and found[0][0].strip() in rest
    elif len(symbols) == 1 and None not in symbols and view.context:
        symbol = next(iter(symbols))
        view.marked = symbol is not None and symbol in rest


def _read_statements(text: str) -> list[str]:
    out = []
    for line in text.splitlines():
        m = re.match(r"^\s*\[(\d+)\]\s+(.+?)\s*$", line)
        if m:
            out.append(m.group(2))
    return out


def _read_claim(text: str) -> str:
    m = _CLAIM_HEAD.search(text)
    if not m:
        return ""
    if m.group(1).strip():
        return m.group(1).strip()
    tail = text[m.end() :].lstrip("\n")
    return tail.split("\n\n", 1)[0].strip()


def _inline_question(text: str) -> str:
    """A question without a ``Question:`` heading: the text just before ``Options:``, back to a
    blank line or an opening bracket (``... the given question [<question>``)."""
    head = _OPTIONS_HEAD.search(text)
    if head is None:
        return ""
    before = text[: head.start()].rstrip().rsplit("\n\n", 1)[-1]
    return before.rsplit("[", 1)[-1].strip()


def read(messages: Sequence[BaseMessage]) -> Prompt:
    """Read a conversation into a :class:`Prompt` (see the module docstring)."""
    view = Prompt()
    prompt: list[str] = []
    system: list[str] = []
    last_user = ""
    call_names: dict[str, str] = {}
    evidence: list[str] = []
    for m in messages:
        text = message_text(m)
        if isinstance(m, AIMessage):
            # the examinee's own earlier turns are neither context nor evidence
            view.call_index += 1
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
                evidence.append(text)
            continue
        if isinstance(m, HumanMessage):
            text, logged = _unwrap_harness_prompt(text)
            evidence.extend(logged)
        kept, found = _split_evidence(text)
        evidence.extend(found)
        prompt.append(kept)
        if isinstance(m, SystemMessage):
            system.append(kept)
        elif isinstance(m, HumanMessage):
            last_user = kept
            # an instruction that follows evidence with no heading of its own would otherwise
            # be read as part of the evidence section
            view.closing = text.rstrip().rsplit("\n\n", 1)[-1]
    view.text = "\n\n".join(prompt)
    view.task = "\n\n".join([*system, last_user])
    view.evidence = [passage(_clean_evidence(e)) for e in evidence]
    block = _QUESTION_BLOCK.search(last_user) or _QUESTION_BLOCK.search(view.text)
    view.question = block.group(1).strip() if block else _inline_question(last_user)
    view.options = _parse_options(last_user) or _parse_options(view.text)
    if block and not view.options:
        # a question asked without options (open-ended): its block ends at the first blank
        # line, where the prompt's instruction begins
        view.question = re.split(r"\n[ \t]*\n", view.question, maxsplit=1)[0].strip()
    _read_context(view)
    view.abstain_offer = abstain_offer(view.task + "\n" + view.closing, view.options) if view.options else ""
    view.statements = _read_statements(last_user)
    view.claim = _read_claim(last_user)
    return view


def first_words(text: str, n: int = QUERY_WORDS) -> str:
    return " ".join(text.split()[:n])


def snip(text: str, n_words: int) -> str:
    parts = text.split()
    return " ".join(parts[:n_words]) + (" …" if len(parts) > n_words else "")


def first_url(text: str) -> str:
    return passage(text).url


def anchor(view: Prompt) -> str:
    """A stable name for what a conversation is about (its question, claim or task)."""
    return squash(view.question or view.claim or view.task)[:300]
