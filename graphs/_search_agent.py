"""The registered ``search_agent``: the paper's mitigation, a search-and-visit ReAct agent that
checks the context before answering, in one of two agents picked by ``preset``.

* ``toolkit`` (default, :mod:`._search_toolkit`): the toolkit's own prompts; clean cases
  answered without tools; the context flagged as unverified (``warn``).
* ``paper`` (:mod:`._search_paper`): the reference harness of the paper, verbatim: its
  prompts, tool schemas and JSON tool results, clean questions through the same tool loop, no
  extra warning, at most six model turns with tools and then the finaliser. Use it as
  ``--defender search_agent --defender-option search_agent.preset=paper`` (or
  ``options = { preset = "paper" }`` in an ablation config) with ``--search serper
  --visit jina`` to reproduce the paper's MEDMISHLE setting.

Both graphs have one shape (``plan`` → ``agent`` ⇄ ``tools``, ``force_answer``, ``direct``,
``verify``; :mod:`._search_common`). ``warn`` and ``research_clean`` can be set on either
preset, so "searching" and "being warned" can be ablated separately.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, model_validator

from medmis.defenses import SolveFn, defender

from ._credibility import CredibilityOptions
from ._search_common import solver
from ._search_paper import build_paper_graph, paper_prompts
from ._search_toolkit import build_toolkit_graph, toolkit_prompts

SOURCE = "MedMisBench, arXiv 2606.12291 (the paper's search agent)"
COST_HINT = {"clean": (1, 0, 1), "type1": (4, 3, 6), "type2": (4, 3, 7)}

if TYPE_CHECKING:
    from langgraph.graph.state import CompiledStateGraph

__all__ = [
    "PAPER_SETTINGS",
    "SearchAgentOptions",
    "build_search_agent_graph",
    "search_agent_prompts",
    "search_agent_solver",
]


Preset = Literal["toolkit", "paper"]

# what ``preset="paper"`` sets unless the option is given explicitly: the reference harness's
# MAX_ITERATIONS, planner query cap, search_result_limit and visit_char_limit
PAPER_SETTINGS: dict[str, Any] = {
    "research_clean": True,
    "warn": False,
    "max_iterations": 6,
    "max_queries": 4,
    "max_results": 5,
    "max_page_chars": 8000,
    "call_decoding": "harness",
}

class SearchAgentOptions(CredibilityOptions):
    """Options of ``search_agent``.

    Attributes:
        preset: ``toolkit`` (the toolkit's prompts) or ``paper`` (the paper's reference
            harness verbatim; also sets the defaults in ``PAPER_SETTINGS``).
        max_iterations: Tool rounds (model turn + tool execution) before a forced answer.
        plan: Ask for a JSON research plan before the loop (the paper preset without a plan
            gives the agent the reference's fallback plan).
        max_queries: At most this many planned queries are kept.
        max_results: Results per ``search_web`` call when the model does not ask for a number.
        max_page_chars: Characters kept from a visited page when the model does not say.
        max_tool_failures: Consecutive tool turns in which every call failed before the agent
            is made to answer without tools (toolkit preset; the paper's loop never stops
            for failures).
        research_clean: Also research questions that come without context (off: a clean case
            is one plain call, so clean accuracy stays the base model's).
        warn: Tell the model that the context is unverified and may be false (toolkit: in
            the system prompt and before the context; paper: one added system paragraph).
        verify: Check the final answer's cited URLs against the pages fetched in the case and
            record the verdict (``verification`` in the answer's extra; no model call).
        credibility: Results ranked trusted publishers first, a source check on each result
            and page, uncorroborated sentences of untrusted sources withheld (``_credibility``).
        trusted_domains: Domains added to the publisher allowlist.
        planner_model: Model spec for the plan step (default: the base model).
        call_decoding: ``harness`` (the paper preset's default): each call carries the
            reference harness's temperature and output cap (planner and loop 0.1 / 4096
            tokens, finaliser 0.0 / 2048), whatever the run's decoding preset; ``run``
            (the toolkit preset's default): every call is sent with the run's decoding
            (``--decoding`` and its override flags). The paper preset's planner asks for
            JSON mode either way.
    """

    preset: Preset = "toolkit"
    max_iterations: int = Field(default=6, ge=1, le=30)
    plan: bool = True
    max_queries: int = Field(default=3, ge=1, le=10)
    max_results: int = Field(default=5, ge=1, le=20)
    max_page_chars: int = Field(default=6000, ge=500, le=50_000)
    max_tool_failures: int = Field(default=2, ge=1, le=10)
    research_clean: bool = False
    warn: bool = True
    verify: bool = True
    planner_model: str | None = None
    call_decoding: Literal["harness", "run"] = "run"

    @model_validator(mode="before")
    @classmethod
    def _preset_defaults(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("preset") == "paper":
            return {**PAPER_SETTINGS, **data}
        return data

    def label_items(self) -> dict[str, Any]:
        """Options that differ from the preset's own settings (the preset named once)."""
        base = type(self)().model_dump(mode="json")
        if self.preset == "paper":
            base.update(PAPER_SETTINGS)
        return {k: v for k, v in self.model_dump(mode="json").items() if v != base.get(k)}


def build_search_agent_graph(opts: SearchAgentOptions) -> CompiledStateGraph:
    """Compile the preset's agent graph for one set of options."""
    return build_paper_graph(opts) if opts.preset == "paper" else build_toolkit_graph(opts)


def search_agent_solver(opts: SearchAgentOptions) -> SolveFn:
    """The ``search_agent`` defender: the preset's compiled graph, reused for every case."""
    return solver(build_search_agent_graph(opts), opts)


def search_agent_prompts(opts: SearchAgentOptions) -> dict[str, str]:
    """``search_agent`` on a case with context: the agent's system prompt, the planner's, and
    (toolkit preset, ``warn``) the preface before the context."""
    return paper_prompts(opts) if opts.preset == "paper" else toolkit_prompts(opts)


@defender(
    "search_agent",
    options=SearchAgentOptions,
    description="The paper's mitigation: plans, searches and reads the web to check the context before answering (ReAct); preset=paper reproduces the paper's harness.",
    uses_tools=True,
    deterministic=True,
    prompts=search_agent_prompts,
    source=SOURCE,
    cost=COST_HINT,
)
def search_agent(opts: SearchAgentOptions) -> SolveFn:
    return search_agent_solver(opts)
