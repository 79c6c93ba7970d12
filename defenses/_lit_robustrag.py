"""Defenders from the literature, slice RobustRAG: ``robustrag`` (Xiang et al. 2024).

Registration only; the defender (options, prompts, aggregation, certificate) lives in
``medmis.graphs._robustrag``.
"""

from __future__ import annotations

from medmis.graphs import (
    ROBUSTRAG_SOURCE,
    RobustRAGOptions,
    SolveFn,
    robustrag_prompts,
    robustrag_solver,
)

from ._base import defender


@defender(
    "robustrag",
    options=RobustRAGOptions,
    description=(
        "Answers from each passage (context sentence, or search result with search_results=N) in "
        "isolation, majority vote, and certifies whether up to k' corrupted passages could "
        f"change the answer ({ROBUSTRAG_SOURCE})."
    ),
    uses_tools=True,
    prompts=robustrag_prompts,
)
def robustrag(opts: RobustRAGOptions) -> SolveFn:
    return robustrag_solver(opts)
