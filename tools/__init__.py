"""Web tools for defenders: ``search_web`` (Serper, Tavily, local BM25), ``visit_web`` (direct or
Jina Reader), URL safety and the record/replay store."""

# The folder is the package ``medmis.tools``; imported as ``tools`` from the clone's root it
# would be a second copy of every class (isinstance checks and registries silently split).
if __name__ != "medmis.tools":
    raise ImportError(f"import medmis.tools, not {__name__}: the folder tools/ is installed as medmis.tools (pip install -e .)")

from typing import TYPE_CHECKING

from ._lazy import lazy_exports

if TYPE_CHECKING:
    from ._bounded import (
        DEFAULT_MAX_RESPONSE_BYTES,
        BoundedAsyncClient,
        BoundedClient,
        ResponseTooLargeError,
        bulk_transfers,
    )
    from ._bounded_httpx2 import Httpx2BoundedAsyncClient, Httpx2BoundedClient
    from ._cache_cli import add_cache_parser as add_cache_parser  # `medmis cache`: not in __all__
    from ._cache_cli import one_line
    from ._cache_cli import run_cache as run_cache
    from ._cassette import CassetteError, export_cassette, import_cassette
    from ._cli import tools_search, tools_visit
    from ._corpus import (
        CorpusDocument,
        LocalSearch,
        ambient_digest,
        corpus_digest,
        load_ambient,
        load_corpus,
        url_key,
    )
    from ._errors import EXIT_USAGE, ConfigError, InputError, MedmisError
    from ._facade import CaseTools, routed
    from ._jina import JINA_DEFAULT_BASE_URL, JinaReader
    from ._llm_cache import StoreCache, attach_cache
    from ._poison_types import (
        DEFAULT_PAGES,
        PAGE_STYLES,
        PoisonedPage,
        PoisonExposure,
        PoisonRank,
        PoisonSettings,
        case_key,
        load_pages,
        pages_digest,
    )
    from ._poisoned_web import PoisonedWeb, PoisonTally, locale_hints
    from ._probe import CacheProbe, cache_probe, mark_cache
    from ._redact import (
        configured_secrets,
        is_secret_name,
        json_needs_redaction,
        redact,
        redact_file_text,
        redact_json,
        redact_obj,
        remember_url,
        scrub_url,
    )
    from ._safety import DEFAULT_BLOCKLIST, AllowedHost, Blocklist, UrlPolicy, address_problem
    from ._search import SearchBackend
    from ._serper import SERPER_DEFAULT_BASE_URL, SerperSearch
    from ._signals import noting_signals, signals_seen, sigterm_as_interrupt
    from ._store import CacheMode, RecordStore
    from ._tavily import TAVILY_DEFAULT_BASE_URL, TavilySearch
    from ._text import split_sentences
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
    from ._userfile import (
        MAX_DEPTH,
        UNIQUE_KEYS,
        DuplicateKeyError,
        UserFileError,
        deep_line,
        json_file,
        json_lines,
        json_value,
        toml_file,
        toml_value,
        too_deep,
        too_deep_cause,
        unique_pairs,
        validation_line,
    )
    from ._visit import extract_html, fetch_page, focus_text
    from ._web import PageReader, WebTools, make_tools

# Loaded on first use: the CLI imports tool modules (cache commands) without LangChain.
_HOME = {
    **dict.fromkeys(("EXIT_USAGE", "ConfigError", "InputError", "MedmisError"), "_errors"),
    "locale_hints": "_poisoned_web",
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
    "PoisonTally": "_poisoned_web",
    "PoisonedWeb": "_poisoned_web",
    **dict.fromkeys(("DEFAULT_PAGES", "PAGE_STYLES", "PoisonExposure", "PoisonRank", "PoisonSettings", "PoisonedPage",
                     "case_key", "load_pages", "pages_digest"), "_poison_types"),
    "url_key": "_corpus",
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
    "load_ambient": "_corpus",
    "ambient_digest": "_corpus",
    "corpus_digest": "_corpus",
    "make_tools": "_web",
    "mark_cache": "_probe",
    "render_page": "_types",
    "render_search_results": "_types",
    "tool_schemas": "_types",
    **dict.fromkeys(
        (
            "BoundedAsyncClient", "BoundedClient", "DEFAULT_MAX_RESPONSE_BYTES", "ResponseTooLargeError",
            "bulk_transfers"
        ),
        "_bounded",
    ),
    **dict.fromkeys(("Httpx2BoundedAsyncClient", "Httpx2BoundedClient"), "_bounded_httpx2"),
    **dict.fromkeys(("add_cache_parser", "one_line", "run_cache"), "_cache_cli"),
    **dict.fromkeys(("CassetteError", "export_cassette", "import_cassette"), "_cassette"),
    **dict.fromkeys(("tools_search", "tools_visit"), "_cli"),
    **dict.fromkeys(("url_key",), "_corpus"),
    **dict.fromkeys(("noting_signals", "sigterm_as_interrupt", "signals_seen"), "_signals"),
    **dict.fromkeys(("CaseTools", "routed"), "_facade"),
    **dict.fromkeys(("JINA_DEFAULT_BASE_URL",), "_jina"),
    **dict.fromkeys(
        (
            "configured_secrets", "is_secret_name", "json_needs_redaction", "redact",
            "redact_file_text", "redact_json", "redact_obj", "remember_url", "scrub_url"
        ),
        "_redact",
    ),
    **dict.fromkeys(("SERPER_DEFAULT_BASE_URL",), "_serper"),
    **dict.fromkeys(("TAVILY_DEFAULT_BASE_URL",), "_tavily"),
    **dict.fromkeys(("split_sentences",), "_text"),
    **dict.fromkeys(
        (
            "MAX_DEPTH", "UNIQUE_KEYS", "DuplicateKeyError", "UserFileError", "deep_line", "json_file", "json_lines",
            "json_value", "too_deep", "too_deep_cause", "toml_file", "toml_value", "unique_pairs",
            "validation_line",
        ),
        "_userfile",
    ),
}
__getattr__ = lazy_exports(__name__, _HOME, globals())

__all__ = [
    "DEFAULT_BLOCKLIST",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "DEFAULT_PAGES",
    "EXIT_USAGE",
    "JINA_DEFAULT_BASE_URL",
    "MAX_DEPTH",
    "PAGE_STYLES",
    "PAPER_SEARCH_TOOL",
    "PAPER_VISIT_TOOL",
    "SEARCH_TOOL_NAME",
    "SERPER_DEFAULT_BASE_URL",
    "TAVILY_DEFAULT_BASE_URL",
    "UNIQUE_KEYS",
    "VISIT_TOOL_NAME",
    "AllowedHost",
    "Blocklist",
    "BoundedAsyncClient",
    "BoundedClient",
    "CacheMode",
    "CacheProbe",
    "CaseTools",
    "CassetteError",
    "ConfigError",
    "CorpusDocument",
    "DuplicateKeyError",
    "Httpx2BoundedAsyncClient",
    "Httpx2BoundedClient",
    "InputError",
    "JinaReader",
    "LocalSearch",
    "MedmisError",
    "Page",
    "PageReader",
    "PoisonExposure",
    "PoisonRank",
    "PoisonSettings",
    "PoisonTally",
    "PoisonedPage",
    "PoisonedWeb",
    "RecordStore",
    "ReplayMissError",
    "ResponseTooLargeError",
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
    "UserFileError",
    "VisitArgs",
    "WebTools",
    "address_problem",
    "ambient_digest",
    "attach_cache",
    "bulk_transfers",
    "cache_probe",
    "case_key",
    "configured_secrets",
    "corpus_digest",
    "deep_line",
    "export_cassette",
    "extract_html",
    "fetch_page",
    "focus_text",
    "import_cassette",
    "is_secret_name",
    "json_file",
    "json_lines",
    "json_needs_redaction",
    "json_value",
    "lazy_exports",
    "load_ambient",
    "load_corpus",
    "load_pages",
    "locale_hints",
    "make_tools",
    "mark_cache",
    "noting_signals",
    "one_line",
    "pages_digest",
    "redact",
    "redact_file_text",
    "redact_json",
    "redact_obj",
    "remember_url",
    "render_page",
    "render_search_results",
    "routed",
    "scrub_url",
    "signals_seen",
    "sigterm_as_interrupt",
    "split_sentences",
    "toml_file",
    "toml_value",
    "too_deep",
    "too_deep_cause",
    "tool_schemas",
    "tools_search",
    "tools_visit",
    "unique_pairs",
    "url_key",
    "validation_line",
]
