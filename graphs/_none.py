"""``none``: the baseline, the run's prompt with the context shown as given (one call)."""

from __future__ import annotations

from medmis.defenses import (
    Answer,
    CaseView,
    DefenderContext,
    DefenderOptions,
    SolveFn,
    answer_from_reply,
    defender,
    render_prompt,
)

SOURCE = "MedMisBench, arXiv 2606.12291 (the evaluation's prompt)"
COST_HINT = {"clean": (1, 0, 1), "type1": (1, 0, 1), "type2": (1, 0, 1)}


@defender(
    "none",
    answer_formats=("mcq", "open"),  # renders the case and reads the reply: no option needed
    single_call=True,
    description="Baseline: the paper's prompt, context shown as given.",
    source=SOURCE,
    cost=COST_HINT,
)
def none_defender(opts: DefenderOptions) -> SolveFn:
    async def solve(case: CaseView, ctx: DefenderContext) -> Answer:
        reply = await ctx.generate(render_prompt(case), name="answer")
        return answer_from_reply(reply, case, ctx)

    return solve
