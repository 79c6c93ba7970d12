"""What a defender holds as its web tools during a run: :class:`CaseTools`, one type for every
toolset (the local corpus, Tavily, Serper + Jina, a poisoned web or a clean one).

A defender's code can walk everything it is handed, private attributes and closures
included. If its ``ctx.tools`` were the toolset itself, a poisoned case would hand it the
poisoned layer, with that case's pages and the counts of what it met of them. So the harness
hands every case the same object, which holds nothing: its methods look up the toolset the
harness routed the running case to (:func:`routed`) in a :class:`~contextvars.ContextVar`,
which keeps concurrent cases apart as each asyncio task sees its own value (the same
mechanism as :mod:`._probe`). What a call returns is the toolset's plain result; which of
them were poisoned stays with the harness.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from ._poisoned_web import locale_hints
from ._types import Page, SearchResponse, SearchResult, SerpResult, ToolError, Toolset

__all__ = ["CaseTools", "routed"]

_current: ContextVar[Toolset | None] = ContextVar("medmis_case_tools", default=None)


def _toolset() -> Toolset:
    tools = _current.get()
    if tools is None:  # used outside the case it was handed for
        raise ToolError("no web tools are configured for this case", kind="config")
    return tools


class CaseTools:
    """The web tools of the running case: ``search``, ``search_response`` and ``visit``, each
    forwarded to the toolset :func:`routed` set for the case. It holds no state, so every
    case (poisoned or not, whatever the backend) is handed an identical object."""

    __slots__ = ()

    async def search(
        self, query: str, *, max_results: int = 5, country: str | None = None, language: str | None = None
    ) -> list[SearchResult]:
        """Ranked results for ``query`` (``country`` and ``language`` reach a toolset that
        takes them).

        Raises:
            ToolError: The toolset's model-visible failures.
        """
        tools = _toolset()
        return list(await tools.search(query, max_results=max_results, **locale_hints(tools.search, country, language)))

    async def search_response(
        self, query: str, *, max_results: int = 5, country: str | None = None, language: str | None = None
    ) -> SearchResponse:
        """:meth:`search` with what the engine showed beside the results (when it shows any).

        Raises:
            ToolError: As :meth:`search`.
        """
        tools = _toolset()
        rich: Any = getattr(tools, "search_response", None)
        if callable(rich):
            return SearchResponse.model_validate(
                await rich(query, max_results=max_results, **locale_hints(rich, country, language))
            )
        found = await tools.search(query, max_results=max_results, **locale_hints(tools.search, country, language))
        return SearchResponse(query=query, results=[SerpResult.model_validate(r.model_dump()) for r in found])

    async def visit(self, url: str, *, goal: str | None = None, max_chars: int = 6000) -> Page:
        """The main text of ``url``, focused on ``goal``.

        Raises:
            ToolError: The toolset's model-visible failures.
        """
        return await _toolset().visit(url, goal=goal, max_chars=max_chars)


_FACADE = CaseTools()


@contextmanager
def routed(tools: Toolset | None) -> Iterator[CaseTools | None]:
    """Within the block (and the tasks started in it), the :class:`CaseTools` of a case
    forward to ``tools``; yields the object to hand the defender (None without tools)."""
    if tools is None:
        yield None
        return
    token = _current.set(tools)
    try:
        yield _FACADE
    finally:
        _current.reset(token)
