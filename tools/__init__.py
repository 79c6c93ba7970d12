"""Web tools for defenders: ``search_web``, ``visit_web``, URL safety and the record/replay store."""

from ._probe import CacheProbe, cache_probe, mark_cache
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

__all__ = [
    "SEARCH_TOOL_NAME",
    "VISIT_TOOL_NAME",
    "CacheProbe",
    "Page",
    "ReplayMissError",
    "SearchArgs",
    "SearchResult",
    "ToolError",
    "Toolset",
    "VisitArgs",
    "cache_probe",
    "mark_cache",
    "render_page",
    "render_search_results",
    "tool_schemas",
]
