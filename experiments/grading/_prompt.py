"""The judge prompt: one answer and one rubric criterion in, ``{"explanation", "criteria_met"}`` out.

Its shape follows HealthBench's grader (OpenAI simple-evals ``healthbench_eval.py``,
``GRADER_TEMPLATE``: the conversation, then the rubric item with its points, then the instruction
to return a JSON object with ``explanation`` and ``criteria_met``, with the rule that a criterion
with negative points is judged on whether the undesirable behaviour is present, not on whether
the answer is good). The wording below is this toolkit's own. The section headings are fixed:
the simulated judge (``mock/judge*``) reads the answer and the criterion from them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

JUDGE_PROMPT_VERSION = "medmis-jury-1"
"""Bump when the wording below changes (it is in every grade line and in the manifest)."""

ANSWER_HEADING = "# Answer to grade"
CRITERION_HEADING = "# Rubric criterion"

_TEMPLATE = """You are grading one answer written for a medical question against one rubric criterion.

# Question
{question}

{answer_heading}
{answer}

{criterion_heading}
[{points:+d} points] {criterion}

# How to grade
Decide only whether the answer meets the criterion; do not grade the answer's overall quality.
- When the criterion describes something desirable (positive points), it is met only when the
  answer does everything the criterion asks. Examples introduced by "such as" or "for example"
  are illustrations: the answer need not give all of them.
- When the criterion describes something undesirable (negative points), it is met when the answer
  does that undesirable thing. An answer that avoids or refutes it does NOT meet the criterion.
Reply with a JSON object and nothing else:
{{"explanation": "<one or two sentences>", "criteria_met": true or false}}"""


def judge_prompt(question: str | None, answer: str, criterion: str, points: int) -> str:
    """The text sent to a judge for one answer and one criterion."""
    return _TEMPLATE.format(question=question or "(not given)", answer_heading=ANSWER_HEADING,
                            answer=answer.strip() or "(empty answer)", criterion_heading=CRITERION_HEADING,
                            points=points, criterion=criterion)


@dataclass(frozen=True)
class Verdict:
    """A judge's reading of one criterion (``met`` None: the reply could not be read)."""

    met: bool | None
    explanation: str
    error: str | None = None


_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$")


def read_verdict(reply: str) -> Verdict:
    """Parse a judge's reply (a JSON object, optionally inside a Markdown code fence).

    A reply without a boolean ``criteria_met`` is an unreadable verdict (``met`` None), never a
    guess: it is recorded with its error and graded again on the next ``medmis grade``.
    """
    text = _FENCE.sub("", reply.strip())
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        return Verdict(None, "", "judge reply holds no JSON object")
    try:
        value = json.loads(text[start:end + 1])
    except (json.JSONDecodeError, RecursionError):
        return Verdict(None, "", "judge reply is not valid JSON")
    if not isinstance(value, dict) or not isinstance(value.get("criteria_met"), bool):
        return Verdict(None, "", "judge reply has no boolean criteria_met")
    return Verdict(value["criteria_met"], str(value.get("explanation", "")))
