"""Answer extraction, part 3: JSON replies, as the ``paper`` preset asks for them.

The reference evaluation (AI-in-Health/MedMisBench, ``medmisbench_no_harness_eval.ipynb``:
``strip_code_fences``, ``extract_json_object``, ``parse_structured_response`` and the
clean-up before scoring) accepts a JSON object returned bare, inside a code fence, or with
prose around it (first ``{`` to last ``}``), reads its ``answer_letter``, upper-cases it,
drops ``.`` and ``)`` and a leading ``OPTION``, and keeps it when it is an option key.
Gemini's parsed structured reply is read first when the SDK gives one. This module accepts
the same shapes, any case of the field name, the other usual answer fields (``answer``,
``final_answer``, ``choice``, ``option`` ...) and values such as ``"B"``, ``"(B)"``,
``"Option B"``, ``"2"``, ``2``, ``"B. Naloxone"`` or the option's own text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from ._extract_text import _fold, _normalise

# Normalised field names (casefolded, no spaces, underscores or hyphens), in priority order.
ANSWER_FIELDS: tuple[str, ...] = (
    "answerletter",
    "finalanswer",
    "answer",
    "answerkey",
    "answeroption",
    "answerchoice",
    "finalchoice",
    "choice",
    "option",
    "selectedanswer",
    "selectedoption",
    "selectedchoice",
    "correctanswer",
    "correctoption",
    "correctchoice",
    "最终答案",
    "答案",
)
_FIELD_NOISE = re.compile(r"[\s_\-]")

# "B", "(B)", "[B]", "Option B", "answer: B", "B.", "B) Naloxone", "B. Naloxone", "**B**".
_VALUE = re.compile(
    r"[\s*_`\"'“”]*"
    r"(?:(?:the\s+)?(?:final\s+)?(?:answer|option|choice|letter|选项)(?:\s+is)?\s*[:：]?\s*)?"
    r"[(\[【{]?\s*(?P<key>[A-Za-z]|\d{1,2})\s*[)\]】}]?"
    r"(?:(?P<sep>\s*[.:：)\-–—]\s*|\s+)(?P<rest>.+?))?"
    r"[\s.。*_`\"'”]*",
    re.IGNORECASE | re.DOTALL,
)


def strip_fence(text: str) -> str:
    """The text inside a leading code fence (``json`` or any tag), else the text."""
    text = text.strip()
    if not text.startswith("```"):
        return text
    lines = text.splitlines()[1:]
    if lines and lines[-1].strip() == "```":
        lines = lines[:-1]
    return "\n".join(lines).strip()


def json_object(text: str) -> dict[str, Any] | None:
    """The JSON object a reply consists of: bare, fenced, or from the first ``{`` to the
    last ``}`` (prose around it); None when there is none."""
    body = strip_fence(text)
    if "{" not in body:
        return None
    for candidate in (body, body[body.find("{") : body.rfind("}") + 1]):
        try:
            obj = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(obj, dict):
            return obj
    return None


def answer_value(obj: Mapping[str, Any]) -> Any:
    """The value of the highest-priority answer field of ``obj`` (any case), else None."""
    fields = {_FIELD_NOISE.sub("", str(k).casefold()): v for k, v in obj.items()}
    for name in ANSWER_FIELDS:
        value = fields.get(name)
        if value is not None and value != "":
            return value
    return None


def key_shaped(value: str) -> bool:
    """Whether ``value`` reads as a key (with optional prefix and text), named option or not."""
    return _VALUE.fullmatch(_normalise(value).strip()) is not None


def value_key(value: Any, options: Mapping[str, str]) -> str | None:
    """The option key an answer field's value names, or None.

    A key may be followed by its own option text ("B. Naloxone"); a value whose trailing
    text is another option's text, or that is not a key and not an option's text, names
    none.
    """
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    text = _normalise(str(value)).strip()
    keymap = {k.upper(): k for k in options}
    m = _VALUE.fullmatch(text)
    if m is not None:
        key = keymap.get(m.group("key").upper())
        rest = _fold(m.group("rest") or "")
        if key is not None:
            if not rest:
                return key
            named = [k for k, v in options.items() if _fold(v) == rest]
            if named == [key]:
                return key
            # "B. Naloxone" with a different option B, or "A or B": not this key
            if not named and m.group("sep").strip():
                return key
    folded = _fold(text)
    by_text = [k for k, v in options.items() if folded and _fold(v) == folded]
    return by_text[0] if len(by_text) == 1 else None


def structured_key(parsed: Any, options: Mapping[str, str]) -> str | None:
    """The option key named by a structured reply (a mapping, or a JSON object string)."""
    if isinstance(parsed, str):
        parsed = json_object(parsed)
    if not isinstance(parsed, Mapping):
        return None
    return value_key(answer_value(parsed), options)
