"""The search backend interface; the backends live in their own modules.

* ``medmis.tools._corpus.LocalSearch`` — BM25 over a local folder (offline, deterministic).
* ``medmis.tools._tavily.TavilySearch`` — Tavily's ``/search`` API.

All return ranked :class:`~medmis.tools._types.SearchResult` lists and raise
:class:`~medmis.tools._types.ToolError` for failures the model should see.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ._types import SearchResult


@runtime_checkable
class SearchBackend(Protocol):
    """A search engine: ``search(query, max_results)`` returns results, best first.

    ``cache_id`` names the backend in record/replay keys; it changes whenever the same query
    could return different results (another engine, another corpus).
    """

    @property
    def cache_id(self) -> str: ...

    async def search(self, query: str, max_results: int = 5) -> list[SearchResult]: ...
