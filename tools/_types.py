"""The tool interface that defenders and graphs call: search the web, visit a page.

Tools raise :class:`ToolError` for anything the *model* should see and react to (a refused
URL, an HTTP error, a timeout, nothing found). Anything else, a replay miss included, stops
the case and is recorded as an error on its record.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field


class SearchResult(BaseModel):
    title: str
    url: str
    snippet: str = ""
    score: float = 0.0


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
    ``config`` (missing key), ``duplicate`` (identical repeated call refused by an agent).
    """

    def __init__(self, message: str, *, kind: str = "error") -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"


class ReplayMissError(RuntimeError):
    """Raised in ``replay`` mode when the store has no entry for a call; stops the case."""


@runtime_checkable
class Toolset(Protocol):
    """The two web tools. Implementations: ``tools.WebTools`` (Tavily or local BM25 search,
    httpx + trafilatura visits, URL safety, record/replay store) and test fakes."""

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


def tool_schemas() -> list[dict[str, Any]]:
    """OpenAI-style function schemas for ``bind_tools`` on any provider."""
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
