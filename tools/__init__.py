"""Web tools for defenders: ``search_web``, ``visit_web``, URL safety and the record/replay store."""

from ._llm_cache import StoreCache, attach_cache
from ._probe import CacheProbe, cache_probe, mark_cache
from ._safety import DEFAULT_BLOCKLIST, AllowedHost, Blocklist, UrlPolicy, address_problem
from ._search import CorpusDocument, LocalSearch, SearchBackend, TavilySearch, load_corpus
from ._store import CacheMode, RecordStore
from ._types import (
    SEARCH_TOOL_NAME,
    VISIT_TOOL_NAME,
    Page,
    ReplayMissError,
    SearchArgs,
    SearchResult,
    ToolError,
    Toolset,
    VisitArgs,
    render_page,
    render_search_results,
    tool_schemas,
)
from ._visit import extract_html, fetch_page, focus_text
from ._web import WebTools, make_tools

__all__ = [
    "DEFAULT_BLOCKLIST",
    "SEARCH_TOOL_NAME",
    "VISIT_TOOL_NAME",
    "AllowedHost",
    "Blocklist",
    "CacheMode",
    "CacheProbe",
    "CorpusDocument",
    "LocalSearch",
    "Page",
    "RecordStore",
    "ReplayMissError",
    "SearchArgs",
    "SearchBackend",
    "SearchResult",
    "StoreCache",
    "TavilySearch",
    "ToolError",
    "Toolset",
    "UrlPolicy",
    "VisitArgs",
    "WebTools",
    "address_problem",
    "attach_cache",
    "cache_probe",
    "extract_html",
    "fetch_page",
    "focus_text",
    "load_corpus",
    "make_tools",
    "mark_cache",
    "render_page",
    "render_search_results",
    "tool_schemas",
]
