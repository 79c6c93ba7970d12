"""Web tools for defenders: ``search_web`` (Serper, Tavily, local BM25), ``visit_web`` (direct or
Jina Reader), URL safety and the record/replay store."""

from typing import TYPE_CHECKING

from ._lazy import lazy_exports

if TYPE_CHECKING:
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

# Loaded on first use: the CLI imports tool modules (cache commands) without LangChain.
_HOME = {
    "AllowedHost": "_safety",
    "Blocklist": "_safety",
    "CacheMode": "_store",
    "CacheProbe": "_probe",
    "CorpusDocument": "_corpus",
    "DEFAULT_BLOCKLIST": "_safety",
    "JinaReader": "_jina",
    "LocalSearch": "_corpus",
    "PAPER_SEARCH_TOOL": "_types",
    "PAPER_VISIT_TOOL": "_types",
    "Page": "_types",
    "PageReader": "_web",
    "RecordStore": "_store",
    "ReplayMissError": "_types",
    "SEARCH_TOOL_NAME": "_types",
    "SearchArgs": "_types",
    "SearchBackend": "_search",
    "SearchResponse": "_types",
    "SearchResult": "_types",
    "SerpResult": "_types",
    "SerperSearch": "_serper",
    "StoreCache": "_llm_cache",
    "StoreCorruptError": "_types",
    "TavilySearch": "_tavily",
    "ToolError": "_types",
    "Toolset": "_types",
    "UrlPolicy": "_safety",
    "VISIT_TOOL_NAME": "_types",
    "VisitArgs": "_types",
    "WebTools": "_web",
    "address_problem": "_safety",
    "attach_cache": "_llm_cache",
    "cache_probe": "_probe",
    "extract_html": "_visit",
    "fetch_page": "_visit",
    "focus_text": "_visit",
    "load_corpus": "_corpus",
    "make_tools": "_web",
    "mark_cache": "_probe",
    "render_page": "_types",
    "render_search_results": "_types",
    "tool_schemas": "_types",
}
__getattr__ = lazy_exports(__name__, _HOME, globals())

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
    "lazy_exports",
    "load_corpus",
    "make_tools",
    "mark_cache",
    "render_page",
    "render_search_results",
    "tool_schemas",
]
