"""Web tools for defenders: ``search_web`` (Serper, Tavily, local BM25), ``visit_web`` (direct or
Jina Reader), URL safety and the record/replay store."""

from ._corpus import CorpusDocument, LocalSearch, load_corpus
from ._jina import JinaReader
from ._llm_cache import StoreCache, attach_cache
from ._probe import CacheProbe, cache_probe, mark_cache
from ._safety import DEFAULT_BLOCKLIST, AllowedHost, Blocklist, UrlPolicy, address_problem
from ._search import SearchBackend
from ._serper import SerperSearch
from ._store import CacheMode, RecordStore
from ._tavily import TavilySearch
from ._types import (
    PAPER_SEARCH_TOOL,
    PAPER_VISIT_TOOL,
    SEARCH_TOOL_NAME,
    VISIT_TOOL_NAME,
    Page,
    ReplayMissError,
    SearchArgs,
    SearchResponse,
    SearchResult,
    SerpResult,
    StoreCorruptError,
    ToolError,
    Toolset,
    VisitArgs,
    render_page,
    render_search_results,
    tool_schemas,
)
from ._visit import extract_html, fetch_page, focus_text
from ._web import PageReader, WebTools, make_tools

__all__ = [
    "DEFAULT_BLOCKLIST",
    "PAPER_SEARCH_TOOL",
    "PAPER_VISIT_TOOL",
    "SEARCH_TOOL_NAME",
    "VISIT_TOOL_NAME",
    "AllowedHost",
    "Blocklist",
    "CacheMode",
    "CacheProbe",
    "CorpusDocument",
    "JinaReader",
    "LocalSearch",
    "Page",
    "PageReader",
    "RecordStore",
    "ReplayMissError",
    "SearchArgs",
    "SearchBackend",
    "SearchResponse",
    "SearchResult",
    "SerpResult",
    "SerperSearch",
    "StoreCache",
    "StoreCorruptError",
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
