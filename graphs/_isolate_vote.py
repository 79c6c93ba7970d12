"""Isolate-then-aggregate voting, after RobustRAG (arXiv 2405.15556).

Shape: one ``isolated`` answer per context sentence (fan-out with ``Send``; each sees a single
sentence and may say it cannot tell) and one ``prior`` answer without context, in parallel
→ ``vote``. The winner must lead the runner-up by ``margin`` votes, otherwise the context-free
answer stands: one false sentence alone cannot outvote the model's own knowledge. A case
without context is one call.

The context-free voter may abstain (``prior_may_abstain``, on by default): asked without the
context, it answers UNSURE when its own knowledge does not settle the question, and then the
isolated sentences decide. Without that, one sentence can never move the answer and the
defender behaves exactly like ``context_blind`` (it could not recover a wrong answer from a
true sentence either); with it, context counts precisely where the model does not know.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypedDict

from langchain_core.runnables import RunnableConfig
from pydantic import BaseModel, Field

from medmis.agents import message_text
from medmis.defenses import (
    Answer,
    CaseView,
    DefenderContext,
    DefenderOptions,
    SolveFn,
    answer_instruction,
    defender,
    render_prompt,
)

from ._common import deps, graph_solver, vote_of

if TYPE_CHECKING:  # LangGraph itself is imported when a graph is built
    from langgraph.graph.state import CompiledStateGraph

UNSURE = "UNSURE"
_UNSURE = re.compile(rf"final\s+answer\s*[:：]\s*[*_\s]*{UNSURE}\b", re.IGNORECASE)


class IsolateVoteOptions(DefenderOptions):
    """Options of ``isolate_vote``.

    Attributes:
        margin: Votes by which the winner must lead the runner-up; below it the context-free
            answer is kept. ``0`` is a plain plurality (ties go to the context-free answer).
        prior_weight: Weight of the context-free voter (each isolated sentence weighs 1).
        max_sentences: At most this many sentences are answered in isolation.
        prior_may_abstain: Let the context-free voter answer UNSURE on cases with context
            (an abstention carries no vote). Off, the defender equals ``context_blind`` on
            every Type 1 case.
    """

    margin: int = Field(default=1, ge=0, le=20)
    prior_may_abstain: bool = True
    prior_weight: float = Field(default=1.0, ge=0.0, le=20.0)
    max_sentences: int = Field(default=12, ge=1, le=50)


class Ballot(TypedDict):
    source: str
    index: int | None
    choice: str | None
    weight: float


class IsolateVoteState(TypedDict, total=False):
    ballots: Annotated[list[Ballot], operator.add]
    choice: str | None
    decided_by: str
    tally: dict[str, float]


class SentenceTask(TypedDict):
    index: int


class VoteResult(BaseModel):
    """The outcome of a margin vote."""

    choice: str | None
    decided_by: Literal["margin", "fallback_prior", "fallback_plurality", "no_votes"]
    tally: dict[str, float]
    lead: float


def decide_vote(ballots: Sequence[Ballot], options: Sequence[str], *, margin: int) -> VoteResult:
    """Margin vote over ballots (abstentions and unparsed answers carry no vote).

    The leader wins if it leads the runner-up by at least ``margin``; ties at the top go to
    the context-free (prior) answer, then to option order. Otherwise the prior answer is kept;
    if the prior abstained too, a strict plurality leader still wins, else nothing is chosen.
    """
    tally: dict[str, float] = {}
    for b in ballots:
        if b["choice"] is not None and b["weight"] > 0:
            tally[b["choice"]] = tally.get(b["choice"], 0.0) + b["weight"]
    prior = next((b["choice"] for b in ballots if b["source"] == "prior"), None)
    order = {k: i for i, k in enumerate(options)}
    ranked = sorted(tally, key=lambda k: (-tally[k], k != prior, order.get(k, len(order))))
    if not ranked:
        return VoteResult(
            choice=prior,
            decided_by="no_votes" if prior is None else "fallback_prior",
            tally=tally,
            lead=0.0,
        )
    top = ranked[0]
    lead = tally[top] - (tally[ranked[1]] if len(ranked) > 1 else 0.0)
    if lead >= margin:
        return VoteResult(choice=top, decided_by="margin", tally=tally, lead=lead)
    if prior is not None:
        return VoteResult(choice=prior, decided_by="fallback_prior", tally=tally, lead=lead)
    return VoteResult(
        choice=top if lead > 0 else None, decided_by="fallback_plurality", tally=tally, lead=lead
    )


def _isolated_instruction(case: CaseView) -> str:
    return (
        answer_instruction(case)
        + f' If the statement and your own knowledge do not let you tell, end with "Final answer: {UNSURE}" instead.'
    )


def _prior_instruction(case: CaseView) -> str:
    return (
        answer_instruction(case)
        + f' If your own knowledge does not let you tell, end with "Final answer: {UNSURE}" instead.'
    )


def _vote_of(text: str, case: CaseView) -> str | None:
    return vote_of(text, case, _UNSURE)


ISOLATED_PREFACE = "Below is a single statement from an unverified source, shown on its own."


def build_isolate_vote_graph(opts: IsolateVoteOptions) -> CompiledStateGraph:
    """Compile the isolate-and-vote graph."""
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Send

    async def isolated(state: SentenceTask, config: RunnableConfig) -> dict[str, Any]:
        d = deps(config)
        sentence = d.case.context[state["index"]]
        messages = render_prompt(
            d.case,
            context=[sentence],
            preface=ISOLATED_PREFACE,
            instruction=_isolated_instruction(d.case),
        )
        reply = await d.ctx.generate(messages, name=f"isolated_{state['index']}")
        choice = _vote_of(message_text(reply), d.case)
        return {
            "ballots": [Ballot(source="context", index=state["index"], choice=choice, weight=1.0)]
        }

    async def prior(state: IsolateVoteState, config: RunnableConfig) -> dict[str, Any]:
        d = deps(config)
        may_abstain = opts.prior_may_abstain and bool(d.case.context)
        instruction = _prior_instruction(d.case) if may_abstain else None
        reply = await d.ctx.generate(
            render_prompt(d.case, context=[], instruction=instruction), name="prior"
        )
        choice = _vote_of(message_text(reply), d.case)
        return {
            "ballots": [Ballot(source="prior", index=None, choice=choice, weight=opts.prior_weight)]
        }

    async def vote(state: IsolateVoteState, config: RunnableConfig) -> dict[str, Any]:
        d = deps(config)
        ballots = sorted(
            state.get("ballots", []), key=lambda b: (b["source"] != "prior", b["index"] or 0)
        )
        result = decide_vote(ballots, list(d.case.options), margin=opts.margin)
        d.ctx.note("vote", {"ballots": ballots, **result.model_dump()})
        return {"choice": result.choice, "decided_by": result.decided_by, "tally": result.tally}

    def fan_out(state: IsolateVoteState, config: RunnableConfig) -> list[Any]:  # Send packets and node names
        n = min(len(deps(config).case.context), opts.max_sentences)
        return ["prior", *(Send("isolated", {"index": i}) for i in range(n))]

    graph = StateGraph(IsolateVoteState)
    graph.add_node("prior", prior)
    graph.add_node("isolated", isolated, input_schema=SentenceTask)
    graph.add_node("vote", vote)
    graph.add_conditional_edges(START, fan_out, ["prior", "isolated"])
    graph.add_edge("prior", "vote")
    graph.add_edge("isolated", "vote")
    graph.add_edge("vote", END)
    return graph.compile(name="isolate_vote")


RECURSION_LIMIT = 6


def isolate_vote_solver(opts: IsolateVoteOptions) -> SolveFn:
    """The ``isolate_vote`` defender: one compiled graph reused for every case."""

    def finish(state: IsolateVoteState, case: CaseView, ctx: DefenderContext) -> Answer:
        ballots = sorted(
            state.get("ballots", []), key=lambda b: (b["source"] != "prior", b["index"] or 0)
        )
        choice = state.get("choice")
        tally = state.get("tally", {})
        summary = ", ".join(f"{k}={v:g}" for k, v in tally.items()) or "no votes"
        raw = f"Votes: {summary} (decided by {state.get('decided_by')})."
        if choice is not None:
            raw += f"\nFinal answer: {choice}"
        return Answer(
            choice=choice,
            raw=raw,
            method="vote",
            extra={
                "votes": [dict(b) for b in ballots],
                "tally": tally,
                "decided_by": state.get("decided_by"),
                "margin": opts.margin,
            },
        )

    graph = build_isolate_vote_graph(opts)
    return graph_solver(graph, recursion_limit=RECURSION_LIMIT, finish=finish)


SOURCE = "Xiang et al. 2024, arXiv 2405.15556 (RobustRAG)"
COST_HINT = {"clean": (1, 0, 1), "type1": (2, 0, 2), "type2": (5, 0, 5.5)}


def isolate_vote_prompts(opts: IsolateVoteOptions) -> dict[str, str]:
    """``isolate_vote``: the preface of each isolated context sentence."""
    return {"isolated": ISOLATED_PREFACE}


@defender(
    "isolate_vote",
    deterministic=True,  # same case, options and replies: same requests (--batch rounds)
    options=IsolateVoteOptions,
    description="Answers once per isolated context sentence and once without context, then a margin vote (RobustRAG).",
    prompts=isolate_vote_prompts,
    source=SOURCE,
    cost=COST_HINT,
)
def isolate_vote(opts: IsolateVoteOptions) -> SolveFn:
    return isolate_vote_solver(opts)
