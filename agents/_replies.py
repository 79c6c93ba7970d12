"""What the simulated examinee says, once it has read a request (see :mod:`medmis.agents._examinee`).

- *Tools* (:func:`_tool_call`). With ``search_web`` / ``visit_web`` bound and a multiple-choice
  or verdict task: no tool result yet -> a ``search_web`` call (query: the first 12 words of the
  question, or of the claim under verification); after a search result and no visit -> a
  ``visit_web`` call on the first ``URL:`` line of the latest search result; after a visit, a
  tool error, or two tool rounds -> the answer. Tool-call ids are hashes, not counters.
- *Structured tasks*, recognised by the JSON key the prompt asks for: ``"verdict"`` ->
  ``{"verdict": "supported"|"refuted"|"not_enough_info", "quote", "url"}`` (refuted when the
  claim is a false sentence of the item and gold-bearing evidence is present, supported when
  the claim is the truthful sentence and such evidence is present); ``"queries"`` ->
  ``{"queries": [1-2 queries], "rationale"}``; ``"claims"`` -> ``{"claims": [each context
  sentence found, verbatim]}``.
- Anything else is a *multiple-choice answer* (:func:`_mcq_text`): a few sentences of reasoning
  naming the deciding consideration, then a line ``Final answer: X``. An unknown question gets
  a deterministic option parsed from the ``Options:`` lines, or the reply "I cannot tell." when
  there are none (:func:`_unknown_text`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage

from medmis.experiments.benchmark._protocols import stable_rng
from medmis.experiments.benchmark._types import Item
from medmis.tools._types import SEARCH_TOOL_NAME, VISIT_TOOL_NAME

from ._reading import (
    _CLAIM_LINE,
    _QUESTION_BLOCK,
    QUERY_WORDS,
    _context_order,
    _display_key,
    _evidence_for_gold,
    _first_url,
    _first_words,
    _parse_options,
    _snip,
    _squash,
    _View,
)

MAX_TOOL_ROUNDS = 2


def _digest(*parts: object) -> str:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class _Decision:
    key: str
    why: str
    detail: str = ""


def _mcq_text(item: Item, decision: _Decision, shown: Mapping[str, str]) -> str:
    key = _display_key(item, decision.key, shown)
    option = item.options[decision.key]
    topic = f'The question asks: "{_snip(item.question, QUERY_WORDS)}"'
    detail = _snip(decision.detail, 30)
    why = {
        "clean": "Relying on established medical knowledge, the deciding consideration is "
        "which option matches the standard mechanism and current guidance.",
        "evidence": f'The retrieved evidence states: "{detail}" That is the deciding '
        "consideration, and it outweighs any unverified context.",
        "follow": f'The additional clinical context states: "{detail}" I take that '
        "statement as the deciding consideration.",
        "resist": f'The additional clinical context states: "{detail}" That conflicts '
        "with established medical knowledge, so I do not rely on it.",
        "recovered": f'The additional clinical context notes: "{detail}" This agrees with '
        "established knowledge and is the deciding consideration.",
        "weighed": "The context statements conflict with one another, so I weigh them "
        "against established medical knowledge rather than take any on trust.",
        "set_aside": "A context statement was marked as refuted, so I set it aside and "
        "answer on the medical merits.",
        "oracle": "Checking the reference answer for this question settles it.",
        "random": "I choose without weighing the content of the options.",
    }[decision.why]
    return f"{topic}\n{why}\nOn that basis, {option} is the best answer.\nFinal answer: {key}"


def _unknown_text(view: _View, seed: int) -> str:
    shown = _parse_options(view.prompt)
    if not shown:
        return "I cannot tell."
    block = _QUESTION_BLOCK.search(view.prompt)
    anchor = _squash(block.group(1) if block else view.task)
    key = stable_rng(seed, "unknown", anchor).choice(sorted(shown))
    return (
        "I do not recognise this exact question, so I weigh the listed options on general "
        f"medical principles.\nOn that basis, {shown[key]} is the most plausible answer.\n"
        f"Final answer: {key}"
    )


def _claim(item: Item | None, view: _View) -> tuple[str | None, str]:
    """(option key or None, text) of the claim a verification prompt is about."""
    if item is not None:
        keys = _context_order(item, view.task)
        if keys:
            return keys[0], item.contexts[keys[0]]
    m = _CLAIM_LINE.search(view.task)
    if m and m.group(1).strip():
        return None, m.group(1).strip()
    return None, ""


def _query(item: Item | None, view: _View, task: str) -> str:
    if task == "verdict":
        _, claim = _claim(item, view)
        if claim:
            return _first_words(claim)
    if item is not None:
        return _first_words(item.question)
    block = _QUESTION_BLOCK.search(view.prompt)
    return _first_words(block.group(1) if block else view.task)


def _verdict(item: Item | None, view: _View) -> dict[str, str]:
    key, _ = _claim(item, view)
    ev = _evidence_for_gold(item, view.evidence) if item is not None else None
    if item is None or key is None or ev is None:
        quote = _snip(view.evidence[0].strip(), 25) if view.evidence else ""
        return {
            "verdict": "not_enough_info",
            "quote": quote,
            "url": _first_url(view.evidence[0]) if view.evidence else "",
        }
    verdict = "supported" if key == item.gold else "refuted"
    return {"verdict": verdict, "quote": ev[0], "url": ev[1]}


def _queries(item: Item | None, view: _View) -> dict[str, Any]:
    queries = [_query(item, view, "mcq")]
    if item is not None:
        for key in _context_order(item, view.task)[:1]:
            queries.append(_first_words(item.contexts[key]))
    queries = list(dict.fromkeys(q for q in queries if q))[:2]
    return {
        "queries": queries,
        "rationale": "Check the key clinical fact behind the question, and any added claim, "
        "against an authoritative reference.",
    }


def _claims(item: Item | None, view: _View) -> dict[str, Any]:
    if item is not None:
        return {"claims": [item.contexts[k] for k in _context_order(item, view.prompt)]}
    m = re.search(
        r"^\s*additional clinical context\s*:\s*$(.*?)(?=^\s*question\s*:|\Z)",
        view.prompt,
        re.I | re.S | re.M,
    )
    lines = [line.strip() for line in m.group(1).splitlines()] if m else []
    return {"claims": [line for line in lines if line]}


def _tool_call(
    item: Item | None, view: _View, task: str, names: set[str], seed: int
) -> AIMessage | None:
    """The next tool call of the search -> visit -> answer sequence, or None to answer."""
    if view.tool_rounds >= MAX_TOOL_ROUNDS or any(err for _, _, err in view.tool_results):
        return None
    if any(name == VISIT_TOOL_NAME for name, _, _ in view.tool_results):
        return None
    anchor = item.key if item is not None else _squash(view.task)[:200]
    query = _query(item, view, task)
    if not view.tool_results:
        if SEARCH_TOOL_NAME not in names or not query:
            return None
        name, args = SEARCH_TOOL_NAME, {"query": query}
    else:
        searches = [text for name, text, _ in view.tool_results if name == SEARCH_TOOL_NAME]
        url = _first_url(searches[-1]) if searches else ""
        if VISIT_TOOL_NAME not in names or not url:
            return None
        name, args = VISIT_TOOL_NAME, {"url": url, "goal": query}
    call_id = (
        "call_"
        + _digest(seed, anchor, view.tool_rounds, name, json.dumps(args, sort_keys=True))[:16]
    )
    return AIMessage(
        content="",
        tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}],
    )
