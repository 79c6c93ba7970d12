"""A cost-aware ladder: cheap defensive prompt first, claim verification only on conflict.

Shape: ``warned`` (the ``warning`` defender) and ``prior`` (a context-free answer) run in
parallel → ``decide``; when they agree the warned answer stands, otherwise ``verify`` runs the
claim-verification graph on the conflicting sentences only (those that argue for the
in-context answer) and answers from the annotated context. Both first steps are the
``warning`` and ``context_blind`` defenders' own solve functions, so this module never
duplicates a prompt-level defender. A case without
context is the warned call alone.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from langchain_core.runnables import RunnableConfig
from pydantic import Field

from medmis.defenses import (
    Answer,
    CaseView,
    DefenderContext,
    DefenderOptions,
    SolveFn,
    answer_from_text,
    defender,
)

from ._claim_verify import RECURSION_LIMIT as VERIFY_LIMIT
from ._claim_verify import (
    ClaimVerifyOptions,
    ClaimVerifyState,
    build_claim_verify_graph,
    claim_verify_prompts,
    public_verdicts,
)
from ._common import deps, graph_solver, run_config, sentences_supporting
from ._context_blind import context_blind_defender
from ._warning import DEFAULT_WARNING, WarningOptions, warning_defender

if TYPE_CHECKING:  # LangGraph itself is imported when a graph is built
    from langgraph.graph.state import CompiledStateGraph

COST_HINT = {"clean": (1, 0, 1), "type1": (3, 1, 4), "type2": (4, 2, 6)}

StepFn = Callable[[CaseView, DefenderContext], Awaitable[Answer]]


class EscalateState(TypedDict, total=False):
    warned_text: str
    warned: str | None
    prior: str | None
    escalated: bool
    targets: list[int]
    verdicts: list[dict[str, Any]]
    final: str


def build_escalate_graph(
    warned_step: StepFn, prior_step: StepFn, verify: ClaimVerifyOptions
) -> CompiledStateGraph:
    """Compile the escalation ladder.

    Args:
        warned_step: The first rung (the ``warning`` defender's solve function).
        prior_step: A context-free answer (the ``context_blind`` defender's solve function).
        verify: Options of the claim-verification rung.
    """
    from langgraph.graph import END, START, StateGraph

    verifier = build_claim_verify_graph(verify)

    async def warned(state: EscalateState, config: RunnableConfig) -> dict[str, Any]:
        d = deps(config)
        answer = await warned_step(d.case, d.ctx)
        return {"warned_text": answer.raw, "warned": answer.choice}

    async def prior(state: EscalateState, config: RunnableConfig) -> dict[str, Any]:
        d = deps(config)
        answer = await prior_step(d.case, d.ctx)
        return {"prior": answer.choice}

    async def decide(state: EscalateState, config: RunnableConfig) -> dict[str, Any]:
        d = deps(config)
        if not d.case.context:
            return {"escalated": False, "final": state.get("warned_text", "")}
        # an unparsed warned answer is no evidence of resisting the context, so it escalates
        agree = state.get("warned") is not None and state.get("warned") == state.get("prior")
        targets = [] if agree else sentences_supporting(d.case, state.get("warned"))
        d.ctx.note(
            "escalate",
            {
                "warned": state.get("warned"),
                "prior": state.get("prior"),
                "escalated": not agree,
                "targets": targets,
            },
        )
        return {
            "escalated": not agree,
            "targets": targets,
            "final": state.get("warned_text", "") if agree else "",
        }

    async def verify_conflict(state: EscalateState, config: RunnableConfig) -> dict[str, Any]:
        d = deps(config)
        # a fresh config: the nested graph gets its own step budget, not what is left of ours
        result: ClaimVerifyState = await verifier.ainvoke(  # type: ignore[assignment]
            {"targets": state.get("targets", [])},
            run_config(d.ctx, d.case, recursion_limit=VERIFY_LIMIT),
        )
        return {"final": result.get("final", ""), "verdicts": public_verdicts(result)}

    def route_start(state: EscalateState, config: RunnableConfig) -> list[str]:
        return ["warned", "prior"] if deps(config).case.context else ["warned"]

    def route_decide(state: EscalateState) -> str:
        return "verify" if state.get("escalated") else END

    graph = StateGraph(EscalateState)
    graph.add_node("warned", warned)
    graph.add_node("prior", prior)
    graph.add_node("decide", decide)
    graph.add_node("verify", verify_conflict)
    graph.add_conditional_edges(START, route_start, ["warned", "prior"])
    graph.add_edge("warned", "decide")
    graph.add_edge("prior", "decide")
    graph.add_conditional_edges("decide", route_decide, ["verify", END])
    graph.add_edge("verify", END)
    return graph.compile(name="escalate")


RECURSION_LIMIT = 8


def escalate_solver(warned_step: StepFn, prior_step: StepFn, verify: ClaimVerifyOptions) -> SolveFn:
    """The ``escalate`` defender: one compiled graph reused for every case."""

    def finish(state: EscalateState, case: CaseView, ctx: DefenderContext) -> Answer:
        return answer_from_text(
            state.get("final", ""),
            case,
            ctx,
            escalated=bool(state.get("escalated")),
            warned=state.get("warned"),
            prior=state.get("prior"),
            verified_sentences=state.get("targets", []),
            verdicts=state.get("verdicts", []),
        )

    graph = build_escalate_graph(warned_step, prior_step, verify)
    return graph_solver(graph, recursion_limit=RECURSION_LIMIT, finish=finish)


class EscalateOptions(DefenderOptions):
    """Options of ``escalate``: the ``warning`` rung, then the claim-verification rung.

    Attributes:
        warning: Text of the defensive prompt (as for ``warning``).
        placement: Where the warning goes: ``system`` or ``user``.
        split: How conflicting sentences become claims: ``sentences`` (checked whole; no
            extra call) or ``model`` (atomic claims).
        max_claims, max_results, visit_top, max_page_chars, strict_quotes: As for ``claim_verify``.
        splitter_model: Model spec for the split step (default: the base model).
        verifier_model: Model spec for verdicts (default: the base model).
    """

    warning: str = DEFAULT_WARNING
    placement: Literal["system", "user"] = "system"
    split: Literal["model", "sentences"] = "sentences"
    max_claims: int = Field(default=8, ge=1, le=40)
    max_results: int = Field(default=3, ge=1, le=10)
    visit_top: int = Field(default=1, ge=0, le=5)
    max_page_chars: int = Field(default=4000, ge=500, le=50_000)
    strict_quotes: bool = False
    splitter_model: str | None = None
    verifier_model: str | None = None


@defender(
    "escalate",
    deterministic=True,  # same case, options and replies: same requests (--batch rounds)
    options=EscalateOptions,
    description="Cost-aware ladder: warning prompt vs. a context-free answer; verifies the conflicting claims only when they disagree.",
    uses_tools=True,
    prompts=lambda opts: {"warning": opts.warning, **claim_verify_prompts(ClaimVerifyOptions(split=opts.split))},
    cost=COST_HINT,
)
def escalate(opts: EscalateOptions) -> SolveFn:
    warned = warning_defender(WarningOptions(warning=opts.warning, placement=opts.placement))
    prior = context_blind_defender(DefenderOptions())
    verify = ClaimVerifyOptions(
        split=opts.split,
        max_claims=opts.max_claims,
        max_results=opts.max_results,
        visit_top=opts.visit_top,
        max_page_chars=opts.max_page_chars,
        strict_quotes=opts.strict_quotes,
        splitter_model=opts.splitter_model,
        verifier_model=opts.verifier_model,
    )
    return escalate_solver(warned, prior, verify)
