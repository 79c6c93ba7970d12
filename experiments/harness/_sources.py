"""What an answer rests on (``extra.sources``): the one definition of "cited", applied by the
harness to every defender's answer alike.

A defender only declares the attributed passages its final answer call was given
(``DefenderContext.answered_from``); which of them the answer rests on is decided here, by
:func:`medmis.graphs.answer_sources`, never by the defender. A poisoned run's exposure
(``poison.cited``) reads these sources and nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from medmis.experiments.benchmark import Answer, TraceStep
from medmis.graphs import answer_sources

__all__ = ["with_sources"]


def with_sources(answer: Answer, options: Mapping[str, str], evidence: Sequence[Mapping[str, Any]]) -> Answer:
    """``answer`` with ``extra["sources"]`` and a ``sources`` step in its trace.

    The step holds the declared evidence beside the sources found in it, so that "cited" can
    be recomputed from the trace alone.

    Args:
        answer: The defender's answer (not an error).
        options: The question's options (key -> text).
        evidence: What the defender declared its final answer call was given.

    Returns:
        A copy of ``answer``; the defender's own ``extra`` keys are kept.
    """
    sources = answer_sources(answer.raw, answer.choice, options, evidence)
    step = TraceStep(kind="node", name="sources", input={"evidence": [dict(p) for p in evidence]}, output=sources)
    return answer.model_copy(update={"extra": {**answer.extra, "sources": sources}, "trace": [*answer.trace, step]})
