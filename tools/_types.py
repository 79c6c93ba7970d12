"""The tool interface that defenders and graphs call: search the web, visit a page.

Tools raise :class:`ToolError` for anything the *model* should see and react to (a refused
URL, an HTTP error, a timeout, nothing found). Anything else, a replay miss included, stops
the case and is recorded as an error on its record.
"""

from __future__ import annotations

import copy
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from ._redact import redact


class SearchResult(BaseModel):
    title: str
    url: str
    snippet: str = ""
    score: float = 0.0


class SerpResult(SearchResult):
    """A result of a search engine's results page: its rank and, when shown, source and date."""

    position: int | None = None
    source: str | None = None
    date: str | None = None


class SearchResponse(BaseModel):
    """One search with everything the engine returned beside the ranked results.

    Serper (Google) adds an answer box, a knowledge-graph card and related searches; the other
    backends return results only. ``results`` is already filtered by the blocklist.
    """

    query: str
    results: list[SerpResult] = Field(default_factory=list)
    answer_box: str | None = None
    knowledge_graph: str | None = None
    related_queries: list[str] = Field(default_factory=list)


class Page(BaseModel):
    url: str
    final_url: str
    title: str = ""
    text: str = ""
    metadata: dict[str, Any] = Field(default_factory=dict)
    truncated: bool = False


class ToolError(Exception):
    """A failure the model is shown as a tool result (never a crash of the case).

    ``kind`` is a short machine-readable reason: ``refused`` (URL safety or contamination
    blocklist), ``http``, ``timeout``, ``content`` (wrong type / too large), ``not_found``,
    ``config`` (missing key), ``duplicate`` (identical repeated call refused by an agent),
    ``arguments`` (a malformed tool call).
    """

    def __init__(self, message: str, *, kind: str = "error") -> None:
        # shown to the model, so it enters traces and model cache keys: a provider's error
        # body echoing the key must not (see medmis.tools._redact)
        message = redact(message)
        super().__init__(message)
        self.kind = kind
        self.message = message

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"


class ReplayMissError(RuntimeError):
    """Raised in ``replay`` mode when the store has no entry for a call; stops the case."""


class StoreCorruptError(RuntimeError):
    """The record/replay store holds something it cannot vouch for; stops the case.

    Raised when a stored value no longer matches its content hash, a value file is gone or
    unreadable, or SQLite cannot read the store. It is deliberately not a
    :class:`ReplayMissError`: a damaged entry is never reported as "not recorded", never
    replaced by a live call, and never served. The message starts with ``cache corrupt:`` and
    names the store folder and the entry's key digest.

    Attributes:
        directory: The store folder.
        digest: The entry's disk key (``"<kind>:<sha256>"``), or ``None`` when the store as a
            whole could not be read.
        reason: What is wrong, in a few words.
    """

    def __init__(self, directory: str, digest: str | None, reason: str) -> None:
        where = f"{directory}: {digest}" if digest else directory
        super().__init__(f"cache corrupt: {where}: {reason} (see `medmis cache verify`)")
        self.directory = directory
        self.digest = digest
        self.reason = reason

    def __reduce__(self) -> tuple[Any, ...]:
        # exceptions are rebuilt from ``args`` when pickled (process pools); keep the fields
        return (type(self), (self.directory, self.digest, self.reason))


@runtime_checkable
class Toolset(Protocol):
    """The two web tools. Implementations: ``tools.WebTools`` (Serper, Tavily or local BM25
    search; direct or Jina Reader visits; URL safety; record/replay store) and test fakes.

    ``search`` may also accept the keyword arguments ``country`` and ``language`` (two-letter
    codes, the reference harness's localisation hints) and the toolset may offer
    ``search_response(query, *, max_results, country, language) -> SearchResponse``; callers
    use them only when present, so a toolset with the two methods below is complete.
    """

    async def search(self, query: str, *, max_results: int = 5) -> list[SearchResult]: ...

    async def visit(
        self, url: str, *, goal: str | None = None, max_chars: int = 6000
    ) -> Page: ...


class SearchArgs(BaseModel):
    """Search the web for medical reference information. Returns ranked results with title, URL and snippet."""

    query: str = Field(description="A focused search query.")


class VisitArgs(BaseModel):
    """Open a web page and read its main text, optionally focused on a goal."""

    url: str = Field(description="The http(s) URL of the page to read.")
    goal: str | None = Field(
        default=None, description="What you are looking for on the page (keeps the relevant passages)."
    )


SEARCH_TOOL_NAME = "search_web"
VISIT_TOOL_NAME = "visit_web"

SchemaStyle = Literal["toolkit", "paper"]

# The reference harness's tool specifications, verbatim (names, descriptions, parameters):
# AI-in-Health/MedMisBench, medmisbench_tool_harness_eval.ipynb, SERPER_SEARCH_TOOL_SPEC and
# JINA_VISIT_TOOL_SPEC. What a model is told about its tools is part of the protocol.
PAPER_SEARCH_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": SEARCH_TOOL_NAME,
        "description": (
            "Search the web for relevant pages. Use this first to discover "
            "candidate URLs before deciding which pages to visit."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Focused web search query."},
                "num_results": {
                    "type": "integer",
                    "description": "How many results to return.",
                    "default": 5,
                },
                "country": {
                    "type": "string",
                    "description": "Two-letter country code for localization, e.g. us.",
                },
                "language": {
                    "type": "string",
                    "description": "Language code for localization, e.g. en.",
                },
            },
            "required": ["query"],
        },
    },
}
PAPER_VISIT_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": VISIT_TOOL_NAME,
        "description": (
            "Visit a specific URL and extract the content most relevant to the "
            "current research need."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "url": {"type": "string", "description": "Absolute URL to read."},
                "goal": {
                    "type": "string",
                    "description": (
                        "What information to extract from the page. Pass the "
                        "current sub-question or evidence need."
                    ),
                },
                "max_chars": {
                    "type": "integer",
                    "description": "Maximum number of characters to return.",
                    "default": 8000,
                },
            },
            "required": ["url"],
        },
    },
}


def tool_schemas(style: SchemaStyle = "toolkit") -> list[dict[str, Any]]:
    """OpenAI-style function schemas for ``bind_tools`` on any provider.

    Args:
        style: ``toolkit`` (``search_web(query)``, ``visit_web(url, goal)``; what every
            built-in defender binds) or ``paper`` (the reference harness's
            ``search_web(query, num_results, country, language)`` and
            ``visit_web(url, goal, max_chars)`` with their exact descriptions).
    """
    if style == "paper":
        return copy.deepcopy([PAPER_SEARCH_TOOL, PAPER_VISIT_TOOL])
    from langchain_core.utils.function_calling import convert_to_openai_tool

    search = convert_to_openai_tool(SearchArgs)
    search["function"]["name"] = SEARCH_TOOL_NAME
    visit = convert_to_openai_tool(VisitArgs)
    visit["function"]["name"] = VISIT_TOOL_NAME
    return [search, visit]


def render_search_results(results: list[SearchResult]) -> str:
    """How search results are shown to a model."""
    if not results:
        return "No results."
    lines = []
    for i, r in enumerate(results, 1):
        lines.append(f"[{i}] {r.title}\nURL: {r.url}\n{r.snippet}".rstrip())
    return "\n\n".join(lines)


def render_page(page: Page) -> str:
    """How a visited page is shown to a model."""
    head = f"Title: {page.title}\nURL: {page.final_url}\n\n" if page.title else f"URL: {page.final_url}\n\n"
    tail = "\n[truncated]" if page.truncated else ""
    return head + page.text + tail
