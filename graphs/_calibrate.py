"""``calibrate``: prior-versus-context arbitration by token probabilities, after ClashEval
(Wu, Wu and Zou 2024, arXiv 2404.10198).

ClashEval asks the model each question twice, without context (its *prior* response) and with
the context (its *contextual* response), and scores each response by its **mean token
probability** (the mean over the response's tokens of ``exp(logprob)``). Two corrections
decide which response to keep (the paper's correction results, Table 3):

* ``tpc`` — *Token Probability Correction*: keep the response whose mean token probability is
  higher.
* ``ctpc`` — *Calibrated Token Probability Correction*: compare *percentiles* instead, each
  response's mean token probability placed in the distribution of that kind of response
  (prior confidences among prior responses, contextual among contextual), because the two
  distributions differ (contextual responses' probabilities are right-skewed, prior ones
  spread out). The paper's best method (GPT-4o accuracy 61.5% → 75.4%, context bias 30.4% →
  10.7%, at a prior bias of 2.1% → 8.5%; plain TPC reaches 69.3%).

ClashEval asks with its own short-answer RAG prompt; here both calls are the case's prompt
preset (with the context withheld for the prior), so the two responses differ only in the
context, and the mean runs over the whole reply the preset asks for.

ClashEval computes the percentiles over the evaluated set's own responses. A defender sees one
case at a time, so ``ctpc`` takes the two reference distributions as options
(``prior_reference``, ``context_reference``: mean token probabilities from a calibration run;
every record of this defender carries ``prior_confidence`` and ``context_confidence`` to build
them). ``tpc`` needs none and is the default. A percentile is the share of the reference at or
below the value (the empirical CDF). A tie keeps the contextual response: the context is
overruled only when the model's confidence says so.

Requirements: token log-probabilities (OpenAI and OpenAI-compatible servers, Gemini, the
simulated examinee). A run that pairs it with a model that returns none (Anthropic) is refused
before it starts. A case without context is one call (the prior response is the answer).
"""

from __future__ import annotations

import bisect
import math
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from medmis.agents import ModelConfigError, message_text, reply_logprobs
from medmis.defenses import (
    Answer,
    CaseView,
    DefenderContext,
    DefenderOptions,
    SolveFn,
    answer_from_text,
    defender,
    extract_answer,
    render_prompt,
)

SOURCE = "Wu et al. 2024, arXiv 2404.10198"
COST_HINT: dict[str, tuple[float, float, float]] = {
    "clean": (1, 0, 1),  # the prior response is the answer
    "type1": (2, 0, 2),  # prior and contextual responses
    "type2": (2, 0, 2),
}


class CalibrateOptions(DefenderOptions):
    """Options of ``calibrate``.

    Attributes:
        method: ``tpc`` (Token Probability Correction: higher mean token probability wins) or
            ``ctpc`` (Calibrated Token Probability Correction: higher percentile wins, which
            needs both references).
        prior_reference: Mean token probabilities of prior (no-context) responses, the
            distribution a prior response's percentile is read in (``ctpc``).
        context_reference: The same for contextual responses (``ctpc``).
    """

    needs_logprobs: ClassVar[bool] = True  # read by the run's preflight

    method: Literal["tpc", "ctpc"] = "tpc"
    prior_reference: tuple[float, ...] = Field(default=(), max_length=1_000_000)
    context_reference: tuple[float, ...] = Field(default=(), max_length=1_000_000)

    @model_validator(mode="after")
    def _references(self) -> CalibrateOptions:
        for name in ("prior_reference", "context_reference"):
            values = getattr(self, name)
            if any(not (0.0 <= v <= 1.0) for v in values):
                raise ValueError(f"{name}: mean token probabilities lie in [0, 1]")
        if self.method == "ctpc" and not (self.prior_reference and self.context_reference):
            raise ValueError("method='ctpc' needs prior_reference and context_reference "
                             "(mean token probabilities from a calibration run)")
        return self


def calibrate_prompts(opts: CalibrateOptions) -> dict[str, str]:
    """What ``calibrate`` does, for an adaptive attacker: it adds no instruction (both calls are
    the preset's prompt, with and without the context), so the part describes the arbitration."""
    rule = ("the one with the higher mean token probability" if opts.method == "tpc" else
            "the one whose mean token probability ranks higher among responses of its kind")
    return {"arbitration": (
        "The model answers the question twice, without the additional clinical context and with "
        f"it; of the two answers the one kept is {rule} (the contextual answer on a tie)."
    )}


def mean_token_probability(logprobs: list[dict[str, Any]]) -> float:
    """ClashEval's confidence of a response: the mean of ``exp(logprob)`` over its tokens."""
    return sum(math.exp(e["logprob"]) for e in logprobs) / len(logprobs)


def percentile(value: float, reference: tuple[float, ...]) -> float:
    """The share of ``reference`` at or below ``value`` (the empirical CDF), in [0, 1]."""
    ordered = sorted(reference)
    return bisect.bisect_right(ordered, value) / len(ordered)


def choose(prior: float, context: float, opts: CalibrateOptions) -> tuple[str, float, float]:
    """Which response to keep (``prior`` or ``context``) and the two scores compared."""
    if opts.method == "ctpc":
        prior, context = percentile(prior, opts.prior_reference), percentile(context, opts.context_reference)
    # equal up to float rounding (means over replies of different lengths) is a tie
    tie = math.isclose(context, prior, rel_tol=1e-9, abs_tol=1e-12)
    return ("context" if tie or context > prior else "prior"), prior, context


async def _scored(ctx: DefenderContext, messages: Any, name: str, spec: str) -> tuple[str, float]:
    reply = await ctx.generate(messages, name=name, logprobs=True)
    found = reply_logprobs(reply)
    if not found:
        raise ModelConfigError(f"{spec}: the {name} reply came without token log-probabilities")
    return message_text(reply), mean_token_probability(found)


def calibrate_solver(opts: CalibrateOptions) -> SolveFn:
    """The ``calibrate`` defender: prior and contextual responses, kept by confidence."""

    async def solve(case: CaseView, ctx: DefenderContext) -> Answer:
        if not case.context:
            text, confidence = await _scored(ctx, render_prompt(case), "prior", ctx.model_spec)
            return answer_from_text(text, case, ctx, prior_confidence=confidence, chose="prior")
        # one after the other, so the trace's order never depends on which reply came first
        prior_text, prior_conf = await _scored(ctx, render_prompt(case, context=[]), "prior", ctx.model_spec)
        context_text, context_conf = await _scored(ctx, render_prompt(case), "contextual", ctx.model_spec)
        chose, prior_score, context_score = choose(prior_conf, context_conf, opts)
        decision = {
            "prior": extract_answer(prior_text, case.options).choice,
            "contextual": extract_answer(context_text, case.options).choice,
            "prior_confidence": prior_conf, "context_confidence": context_conf,
            "method": opts.method, "prior_score": prior_score, "context_score": context_score,
            "chose": chose,
        }  # fmt: skip
        ctx.note("calibrate", decision)
        return answer_from_text(prior_text if chose == "prior" else context_text, case, ctx, **decision)

    return solve


@defender(
    "calibrate",
    deterministic=True,  # same case, options and replies: same requests (--batch rounds)
    options=CalibrateOptions,
    description="Answers with and without context and keeps the answer whose token probabilities are "
    "higher (ClashEval's token probability correction; needs logprobs).",
    prompts=calibrate_prompts,
    source=SOURCE,
    cost=COST_HINT,
)
def calibrate(opts: CalibrateOptions) -> SolveFn:
    return calibrate_solver(opts)
