"""LangGraph state machines behind the agentic defenders.

Each graph is built from small named nodes, compiled once per configured defender and run
once per case with an explicit recursion limit. Nodes get the case's
:class:`~experiments.benchmark.CaseView` and its :class:`~defenses.DefenderContext` from
``config["configurable"]`` (see :func:`run_config`) and do every model and tool call through
the context, which traces, counts, caches and retries them.
"""

from ._astute_rag import AstuteRagOptions, astute_rag_prompts, astute_rag_solver
from ._calibrate import CalibrateOptions, calibrate_prompts, calibrate_solver
from ._citations import answer_sources, cited_urls_in, source_urls, verify_citations
from ._claim_verify import ClaimVerifyOptions, build_claim_verify_graph, claim_verify_solver
from ._common import GraphDeps, deps, parse_json_object, run_config, sentences_supporting
from ._context import (
    DefenderContext,
    DefenderOptions,
    SolveFn,
    answer_from_reply,
    answer_from_text,
    message_to_dict,
)
from ._escalate import build_escalate_graph, escalate_solver
from ._isolate_vote import (
    IsolateVoteOptions,
    VoteResult,
    build_isolate_vote_graph,
    decide_vote,
    isolate_vote_solver,
)
from ._prior_reconcile import (
    PriorReconcileOptions,
    build_prior_reconcile_graph,
    prior_reconcile_solver,
)
from ._robustrag import SOURCE as ROBUSTRAG_SOURCE
from ._robustrag import (
    RobustRAGOptions,
    certified_k,
    is_certified,
    majority_vote,
    robustrag_prompts,
    robustrag_solver,
)
from ._sandwich import SandwichOptions, sandwich_messages, sandwich_prompts, sandwich_solver
from ._sanitize import SanitizeOptions, sanitize_prompts, sanitize_solver
from ._search_agent import (
    SearchAgentOptions,
    build_search_agent_graph,
    search_agent_prompts,
    search_agent_solver,
)
from ._shown import (
    claim_verify_prompts,
    isolate_vote_prompts,
    prior_reconcile_prompts,
)
from ._trustrag import MiniLMEmbedder, TrustRagOptions, trustrag_prompts, trustrag_solver

__all__ = [
    "ROBUSTRAG_SOURCE",
    "AstuteRagOptions",
    "CalibrateOptions",
    "ClaimVerifyOptions",
    "DefenderContext",
    "DefenderOptions",
    "GraphDeps",
    "IsolateVoteOptions",
    "MiniLMEmbedder",
    "PriorReconcileOptions",
    "RobustRAGOptions",
    "SandwichOptions",
    "SanitizeOptions",
    "SearchAgentOptions",
    "SolveFn",
    "TrustRagOptions",
    "VoteResult",
    "answer_from_reply",
    "answer_from_text",
    "answer_sources",
    "astute_rag_prompts",
    "astute_rag_solver",
    "build_claim_verify_graph",
    "build_escalate_graph",
    "build_isolate_vote_graph",
    "build_prior_reconcile_graph",
    "build_search_agent_graph",
    "calibrate_prompts",
    "calibrate_solver",
    "certified_k",
    "cited_urls_in",
    "claim_verify_prompts",
    "claim_verify_solver",
    "decide_vote",
    "deps",
    "escalate_solver",
    "is_certified",
    "isolate_vote_prompts",
    "isolate_vote_solver",
    "majority_vote",
    "message_to_dict",
    "parse_json_object",
    "prior_reconcile_prompts",
    "prior_reconcile_solver",
    "robustrag_prompts",
    "robustrag_solver",
    "run_config",
    "sandwich_messages",
    "sandwich_prompts",
    "sandwich_solver",
    "sanitize_prompts",
    "sanitize_solver",
    "search_agent_prompts",
    "search_agent_solver",
    "sentences_supporting",
    "source_urls",
    "trustrag_prompts",
    "trustrag_solver",
    "verify_citations",
]
