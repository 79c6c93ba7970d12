"""Helpers shared by defenders: turning a model reply into a graded-ready Answer."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage

from agents._mock import message_text
from experiments._extract import extract_answer
from experiments._types import Answer, Case, TraceStep

from ._base import DefenderContext


def answer_from_text(text: str, case: Case, ctx: DefenderContext, **extra: Any) -> Answer:
    """Extract the chosen option from ``text`` and note how it was found in the trace."""
    found = extract_answer(text, case.item.options)
    ctx.trace.append(
        TraceStep(kind="extract", name="extract_answer", input=None, output={"choice": found.choice, "method": found.method})
    )
    return Answer(choice=found.choice, raw=text, method=found.method, extra=dict(extra))


def answer_from_reply(reply: AIMessage, case: Case, ctx: DefenderContext, **extra: Any) -> Answer:
    return answer_from_text(message_text(reply), case, ctx, **extra)
