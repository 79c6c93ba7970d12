"""What each agentic defender shows its model, for ``@defender(prompts=...)``.

Rendered from the prompts the graphs send (placeholders such as ``<claim>`` stand for the
case), never copied, so an adaptive attacker (``medmis generate --attack adaptive``) reads the
defense's actual wording.
"""

from __future__ import annotations

from medmis.agents import message_text
from medmis.experiments.benchmark import CaseView

from ._claim_verify import ANNOTATION_PREFACE, ClaimVerifyOptions, _split_prompt, _verify_prompt
from ._common import UNVERIFIED_PREFACE
from ._isolate_vote import ISOLATED_PREFACE, IsolateVoteOptions
from ._prior_reconcile import PriorReconcileOptions, _reconcile_preface


def claim_verify_prompts(opts: ClaimVerifyOptions) -> dict[str, str]:
    """``claim_verify``: the split step (``split="model"``), the per-claim verdict, and the
    answer prompt's preface."""
    placeholder = CaseView("<question>", {"A": "<option>"}, ("<statement>",))
    out: dict[str, str] = {}
    if opts.split == "model":
        out["split"] = "\n\n".join(message_text(m) for m in _split_prompt(placeholder, [0]))
    out["verify"] = "\n\n".join(message_text(m) for m in _verify_prompt("<claim>", [], []))
    out["answer"] = ANNOTATION_PREFACE
    return out


def prior_reconcile_prompts(opts: PriorReconcileOptions) -> dict[str, str]:
    """``prior_reconcile``: the preface of the contextual answer and the reconciliation prompt
    (sent when the two answers differ; earlier answers as placeholders)."""
    reconcile = _reconcile_preface({"prior": "<answer>", "contextual": "<answer>"}, opts.max_reasoning_chars)
    return {"contextual": UNVERIFIED_PREFACE, "reconcile": reconcile}


def isolate_vote_prompts(opts: IsolateVoteOptions) -> dict[str, str]:
    """``isolate_vote``: the preface of each isolated context sentence."""
    return {"isolated": ISOLATED_PREFACE}
