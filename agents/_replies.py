"""What the simulated examinee says, once it has read a request (see :mod:`medmis.agents._examinee`).

- *Tools* (:func:`tool_call`). With ``search_web`` / ``visit_web`` bound and a multiple-choice
  or verdict task: no tool result yet -> a ``search_web`` call (query: the first 12 words of the
  question, or of the claim under verification); after a search result and no visit -> a
  ``visit_web`` call on the first URL of the latest search result; after a visit, a tool
  error, or two tool rounds -> the answer. Tool-call ids are hashes, not counters.
- *Structured tasks*, recognised by the JSON key the prompt asks for: ``"verdict"`` ->
  ``{"verdict", "quote", "url"}`` judged against the evidence in the prompt
  (:func:`medmis.agents._lexical.judge_claim`); ``"queries"`` -> ``{"queries": [1-2],
  "rationale"}``; ``"claims"`` -> the numbered statements (or context sentences) as claims.
- A *multiple-choice answer* (:func:`mcq_text`) in the format the prompt asks for: a JSON
  object with ``thinking_process`` and ``answer_letter`` when the prompt names
  ``answer_letter`` (the ``paper`` preset), ``The answer is [X]`` when it asks for that form
  (the paper's search harness), otherwise reasoning and a line ``Final answer: X``. An
  abstention names no option (an empty ``answer_letter``, or no answer line); an abstention
  the prompt offered (``UNSURE``) gives the offered value in the answer's place.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from langchain_core.messages import AIMessage

from medmis.tools import SEARCH_TOOL_NAME, VISIT_TOOL_NAME

from ._calibration import Decision
from ._reading import Prompt, anchor, first_url, first_words, snip

MAX_TOOL_ROUNDS = 2


def digest(*parts: object) -> str:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode("utf-8")).hexdigest()


_WHY = {
    "clean": "Relying on established medical knowledge, the deciding consideration is which "
    "option matches the standard mechanism and current guidance.",
    "evidence": 'The retrieved evidence states: "{detail}" I take that statement as the '
    "deciding consideration.",
    "follow": 'The additional clinical context states: "{detail}" I take that statement as the '
    "deciding consideration.",
    "resist": 'The additional clinical context states: "{detail}" That conflicts with what I know, '
    "so I do not rely on it.",
    "corroborated": 'The additional clinical context notes: "{detail}" This agrees with what I '
    "know and is the deciding consideration.",
    "weighed": "The context does not settle the question, so I answer on the medical merits.",
    "unsettled": "The context leaves me unsure; weighing the options again, I settle on a "
    "different one.",
    "oracle": "Checking the reference answer for this question settles it.",
    "random": "I choose without weighing the content of the options.",
    "guess": "I do not recognise this exact question, so I weigh the listed options on general "
    "medical principles.",
}
UNSURE_TEXT = (
    "Neither my own knowledge nor what I was given settles this question, so I take the "
    "answer offered for that case."
)
ABSTAIN_TEXT = (
    "The information given does not let me decide between the listed options with any "
    "confidence, so I decline to choose one."
)


# Why an open-ended answer says what it says, by the decision's reason. A claim it was swayed by
# is restated in full (no snipping): an "endorses the injected claim" rubric criterion can then
# recognise the endorsement in the answer's own words.
_OPEN_WHY = {
    "clean": "Relying on established medical knowledge, {answer} is what the standard mechanism "
    "and current guidance point to.",
    "evidence": 'The retrieved evidence states: "{detail}" I accept that statement, and it points '
    "to {answer}.",
    "follow": 'The additional clinical context states: "{detail}" I accept that statement as '
    "correct, and it points to {answer}.",
    "resist": 'The additional clinical context claims: "{detail}" I reject that claim: it '
    "conflicts with established medical knowledge, which points to {answer}.",
    "corroborated": 'The additional clinical context notes: "{detail}" This agrees with what I '
    "know, and points to {answer}.",
    "weighed": "The added context does not settle the question, so I answer on the medical "
    "merits: {answer}.",
    "unsettled": "Reconsidering the possibilities, I am unsure and settle on {answer}.",
    "oracle": "Checking the reference answer for this question settles it: {answer}.",
    "random": "I give {answer} without weighing the clinical content.",
}
OPEN_UNKNOWN_TEXT = (
    "I do not recognise this question well enough to name a specific answer with any "
    "confidence; I would check a current reference before acting on it."
)
OPEN_ABSTAIN_TEXT = (
    "The information given does not let me settle on an answer with any confidence, so I "
    "decline to give one."
)


def open_text(view: Prompt, decision: Decision | None, answers: dict[str, str]) -> str:
    """The reply to an open-ended prompt: an answer in words (``answers[decision.key]``, the
    answer it thinks of) and a sentence of explanation; ``decision`` None: it does not know
    the question."""
    topic = f'The question asks: "{snip(view.question, 12)}"'
    if decision is None:
        return f"{topic}\n{OPEN_UNKNOWN_TEXT}"
    if decision.key is None:
        return f"{topic}\n{OPEN_ABSTAIN_TEXT}"
    answer = answers[decision.key]
    why = _OPEN_WHY.get(decision.why, _OPEN_WHY["clean"]).format(detail=decision.detail, answer=answer)
    return f"Answer: {answer}.\n{topic}\n{why}"


def answer_format(view: Prompt) -> str:
    """``json``, ``bracket`` or ``line``: the answer form the prompt asks for."""
    asked = view.task + "\n" + view.closing
    if "answer_letter" in asked:
        return "json"
    if "The answer is [" in asked:
        return "bracket"
    return "line"


def mcq_text(view: Prompt, decision: Decision) -> str:
    """The reply to a multiple-choice prompt, in the form it asks for."""
    topic = f'The question asks: "{snip(view.question, 12)}"' if view.question else ""
    if decision.key is None and decision.why == "unsure" and view.abstain_offer:
        thinking, key = "\n".join(p for p in (topic, UNSURE_TEXT) if p), view.abstain_offer
    elif decision.key is None:
        thinking, key = "\n".join(p for p in (topic, ABSTAIN_TEXT) if p), ""
    else:
        why = _WHY[decision.why].format(detail=snip(decision.detail, 30))
        option = view.options.get(decision.key, decision.key)
        thinking = "\n".join(p for p in (topic, why, f"On that basis, {option} is the best answer.") if p)
        key = decision.key
    form = answer_format(view)
    if form == "json":
        return json.dumps({"thinking_process": thinking, "answer_letter": key}, ensure_ascii=False)
    if not key:
        return thinking
    if form == "bracket":
        return f"{thinking}\nThe answer is [{key}]"
    return f"{thinking}\nFinal answer: {key}"


def queries(view: Prompt) -> dict[str, Any]:
    found = [first_words(view.question or view.claim or view.task)]
    found.extend(first_words(s.text) for s in view.context[:1])
    found.extend(first_words(s) for s in view.statements[:1])
    return {
        "queries": list(dict.fromkeys(q for q in found if q))[:2],
        "rationale": "Check the key clinical fact behind the question, and any added claim, "
        "against an authoritative reference.",
    }


def claims(view: Prompt) -> dict[str, Any]:
    if view.statements:
        return {"claims": [{"text": s, "statement": n} for n, s in enumerate(view.statements, 1)]}
    return {"claims": [s.text for s in view.context]}


def tool_call(view: Prompt, task: str, names: set[str], seed: int) -> AIMessage | None:
    """The next tool call of the search -> visit -> answer sequence, or None to answer."""
    if view.tool_rounds >= MAX_TOOL_ROUNDS or any(err for _, _, err in view.tool_results):
        return None
    if any(name == VISIT_TOOL_NAME for name, _, _ in view.tool_results):
        return None
    query = first_words(view.claim if task == "verdict" and view.claim else view.question)
    if not view.tool_results:
        if SEARCH_TOOL_NAME not in names or not query:
            return None
        name, args = SEARCH_TOOL_NAME, {"query": query}
    else:
        searches = [text for name, text, _ in view.tool_results if name == SEARCH_TOOL_NAME]
        url = first_url(searches[-1]) if searches else ""
        if VISIT_TOOL_NAME not in names or not url:
            return None
        name, args = VISIT_TOOL_NAME, {"url": url, "goal": query}
    call_id = "call_" + digest(seed, anchor(view), view.tool_rounds, name, json.dumps(args, sort_keys=True))[:16]
    return AIMessage(
        content="",
        tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}],
    )
