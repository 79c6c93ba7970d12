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

from typing import TYPE_CHECKING

from ._context import SolveFn
from ._search_common import PAPER_SETTINGS, SearchAgentOptions, solver
from ._search_paper import build_paper_graph, paper_prompts
from ._search_toolkit import build_toolkit_graph, toolkit_prompts

if TYPE_CHECKING:
    from langgraph.graph.state import CompiledStateGraph

__all__ = [
    "PAPER_SETTINGS",
    "SearchAgentOptions",
    "build_search_agent_graph",
    "search_agent_prompts",
    "search_agent_solver",
]


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
