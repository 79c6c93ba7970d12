"""The built-in defenders, one module each: options, prompts, graph or solver, registration.

Every module here imports the defender contract (``medmis.defenses``) and registers its
defender with ``@defender(..., source=..., cost=...)`` when it is imported; the registry
imports this package on its first lookup. The agentic defenders are LangGraph state
machines built from small named nodes, compiled once per configured defender and run once
per case with an explicit recursion limit. Nodes get the case's
:class:`~medmis.defenses.CaseView` and its :class:`~medmis.defenses.DefenderContext` from
``config["configurable"]`` (see :func:`run_config`) and do every model and tool call through
the context, which traces, counts, caches and retries them.

==================  ===========================  ==================================================
defender            module                       what it does
==================  ===========================  ==================================================
``none``            ``_none``                    the paper's prompt, context as given (baseline)
``warning``         ``_warning``                 a defensive prompt (paper §D.3)
``context_blind``   ``_context_blind``           withholds the context (a control)
``spotlight``       ``_spotlight``               datamarks or delimits the context
``search_agent``    ``_search_agent``            the paper's search-and-visit agent (two presets)
``claim_verify``    ``_claim_verify``            atomic claims verified against the web
``prior_reconcile`` ``_prior_reconcile``         own answer first, reconcile on conflict
``isolate_vote``    ``_isolate_vote``            one answer per sentence, margin vote
``escalate``        ``_escalate``                warning first, claim verification on conflict
``robustrag``       ``_robustrag``               isolated answers per passage, vote, certificate
``trustrag``        ``_trustrag``                K-means on embeddings, own knowledge, consolidation
``astute_rag``      ``_astute_rag``              own-knowledge passage, source-aware consolidation
``sanitize``        ``_sanitize``                a guardrail call removes misleading sentences
``sandwich``        ``_sandwich``                the task repeated after the context
``calibrate``       ``_calibrate``               with/without context by token probabilities
==================  ===========================  ==================================================
"""

# The folder is the package ``medmis.graphs``; imported as ``graphs`` from the clone's root it
# would be a second copy of every class (isinstance checks and registries silently split).
if __name__ != "medmis.graphs":
    raise ImportError(f"import medmis.graphs, not {__name__}: the folder graphs/ is installed as medmis.graphs (pip install -e .)")

from ._astute_rag import AstuteRagOptions, astute_rag, astute_rag_prompts, astute_rag_solver
from ._calibrate import CalibrateOptions, calibrate, calibrate_prompts, calibrate_solver
from ._citations import answer_sources, cited_urls_in, source_urls, verify_citations
from ._claim_verify import (
    ClaimVerifyOptions,
    build_claim_verify_graph,
    claim_verify,
    claim_verify_prompts,
    claim_verify_solver,
)
from ._common import GraphDeps, deps, parse_json_object, run_config, sentences_supporting
from ._context_blind import context_blind_defender
from ._escalate import EscalateOptions, build_escalate_graph, escalate, escalate_solver
from ._isolate_vote import (
    IsolateVoteOptions,
    VoteResult,
    build_isolate_vote_graph,
    decide_vote,
    isolate_vote,
    isolate_vote_prompts,
    isolate_vote_solver,
)
from ._none import none_defender
from ._prior_reconcile import (
    PriorReconcileOptions,
    build_prior_reconcile_graph,
    prior_reconcile,
    prior_reconcile_prompts,
    prior_reconcile_solver,
)
from ._robustrag import (
    RobustRAGOptions,
    certified_k,
    is_certified,
    majority_vote,
    robustrag,
    robustrag_prompts,
    robustrag_solver,
)
from ._sandwich import (
    SandwichOptions,
    sandwich,
    sandwich_messages,
    sandwich_prompts,
    sandwich_solver,
)
from ._sanitize import SanitizeOptions, sanitize, sanitize_prompts, sanitize_solver
from ._search_agent import (
    SearchAgentOptions,
    build_search_agent_graph,
    search_agent,
    search_agent_prompts,
    search_agent_solver,
)
from ._spotlight import (
    SpotlightOptions,
    datamark,
    spotlight,
    spotlight_context,
    spotlight_instruction,
)
from ._trustrag import MiniLMEmbedder, TrustRagOptions, trustrag, trustrag_prompts, trustrag_solver
from ._warning import DEFAULT_WARNING, WarningOptions, warning_defender

__all__ = [
    "DEFAULT_WARNING",
    "AstuteRagOptions",
    "CalibrateOptions",
    "ClaimVerifyOptions",
    "EscalateOptions",
    "GraphDeps",
    "IsolateVoteOptions",
    "MiniLMEmbedder",
    "PriorReconcileOptions",
    "RobustRAGOptions",
    "SandwichOptions",
    "SanitizeOptions",
    "SearchAgentOptions",
    "SpotlightOptions",
    "TrustRagOptions",
    "VoteResult",
    "WarningOptions",
    "answer_sources",
    "astute_rag",
    "astute_rag_prompts",
    "astute_rag_solver",
    "build_claim_verify_graph",
    "build_escalate_graph",
    "build_isolate_vote_graph",
    "build_prior_reconcile_graph",
    "build_search_agent_graph",
    "calibrate",
    "calibrate_prompts",
    "calibrate_solver",
    "certified_k",
    "cited_urls_in",
    "claim_verify",
    "claim_verify_prompts",
    "claim_verify_solver",
    "context_blind_defender",
    "datamark",
    "decide_vote",
    "deps",
    "escalate",
    "escalate_solver",
    "is_certified",
    "isolate_vote",
    "isolate_vote_prompts",
    "isolate_vote_solver",
    "majority_vote",
    "none_defender",
    "parse_json_object",
    "prior_reconcile",
    "prior_reconcile_prompts",
    "prior_reconcile_solver",
    "robustrag",
    "robustrag_prompts",
    "robustrag_solver",
    "run_config",
    "sandwich",
    "sandwich_messages",
    "sandwich_prompts",
    "sandwich_solver",
    "sanitize",
    "sanitize_prompts",
    "sanitize_solver",
    "search_agent",
    "search_agent_prompts",
    "search_agent_solver",
    "sentences_supporting",
    "source_urls",
    "spotlight",
    "spotlight_context",
    "spotlight_instruction",
    "trustrag",
    "trustrag_prompts",
    "trustrag_solver",
    "verify_citations",
    "warning_defender",
]
