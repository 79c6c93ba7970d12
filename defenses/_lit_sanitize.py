"""Defenders from the literature, slice ``sanitize`` of issue 33: ``sanitize`` (PromptArmor),
``sandwich`` (AgentDojo's ``repeat_user_prompt``) and ``calibrate`` (ClashEval).

Registered here (the registry imports this module with the other built-ins); each lives in one
module of ``medmis.graphs`` with its options, prompts, solver, ``SOURCE`` and ``COST_HINT``.
"""

from __future__ import annotations

from medmis.graphs import (
    CalibrateOptions,
    SandwichOptions,
    SanitizeOptions,
    SolveFn,
    calibrate_prompts,
    calibrate_solver,
    sandwich_prompts,
    sandwich_solver,
    sanitize_prompts,
    sanitize_solver,
)

from ._base import defender


@defender(
    "sanitize",
    options=SanitizeOptions,
    description="Sanitizer: a guardrail call names injected or misleading context sentences, which are "
    "removed before the answer call (PromptArmor, Shi et al. 2025, arXiv 2507.15219).",
    prompts=sanitize_prompts,
)
def sanitize(opts: SanitizeOptions) -> SolveFn:
    return sanitize_solver(opts)


@defender(
    "sandwich",
    options=SandwichOptions,
    single_call=True,
    description="Sandwich: repeats the task (question, options, instruction) after the untrusted context, "
    "as AgentDojo's repeat_user_prompt (Debenedetti et al. 2024, arXiv 2406.13352).",
    prompts=sandwich_prompts,
)
def sandwich(opts: SandwichOptions) -> SolveFn:
    return sandwich_solver(opts)


@defender(
    "calibrate",
    options=CalibrateOptions,
    description="Answers with and without context and keeps the answer whose token probabilities are "
    "higher (token probability correction; needs logprobs) (Wu et al. 2024, arXiv 2404.10198).",
    prompts=calibrate_prompts,
)
def calibrate(opts: CalibrateOptions) -> SolveFn:
    return calibrate_solver(opts)
