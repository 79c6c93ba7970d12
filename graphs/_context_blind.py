"""``context_blind``: a control that withholds all added context (one call).

Near-zero ASR while learning nothing from the context: it shows why ASR alone misleads, and
it is the reference a candidate's identical-answer share is measured against.
"""

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

COST_HINT = {"clean": (1, 0, 1), "type1": (1, 0, 1), "type2": (1, 0, 1)}


@defender(
    "context_blind",
    answer_formats=("mcq", "open"),  # renders the case and reads the reply: no option needed
    control=True,
    single_call=True,
    description="Control: withholds all added context. Near-zero ASR while learning nothing; shows why ASR alone misleads.",
    cost=COST_HINT,
)
def context_blind_defender(opts: DefenderOptions) -> SolveFn:
    async def solve(case: CaseView, ctx: DefenderContext) -> Answer:
        reply = await ctx.generate(render_prompt(case, context=[]), name="answer")
        return answer_from_reply(reply, case, ctx)

    return solve
