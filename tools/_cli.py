"""What ``medmis tools search|visit`` run: one tool call, printed as JSON.

The output shows exactly what a defender's model would get (results or page, or the tool
error it would be shown), plus whether the record/replay store answered.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from ._probe import cache_probe
from ._types import ReplayMissError, ToolError
from ._web import WebTools, make_tools


def _dumps(obj: Any) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False)


async def _run(
    flags: dict[str, Any], request: dict[str, Any], call: Callable[[WebTools], Awaitable[Any]]
) -> str:
    out: dict[str, Any] = dict(request)
    try:
        tools = make_tools(**flags)
    except ToolError as exc:
        out["error"] = {"kind": exc.kind, "message": exc.message}
        return _dumps(out)
    try:
        with cache_probe() as probe:
            out.update(await call(tools))
        out["cache_hit"] = probe.result
    except ToolError as exc:
        out["error"] = {"kind": exc.kind, "message": exc.message}
    except ReplayMissError as exc:
        # in a run this stops the case; here it is the answer to "is this call recorded?"
        out["error"] = {"kind": "replay_miss", "message": str(exc)}
    finally:
        await tools.aclose()
    return _dumps(out)


async def tools_search(query: str, *, max_results: int = 5, **flags: Any) -> str:
    """Run one search and return it as printable JSON.

    Args:
        query: The search query.
        max_results: How many results to return.
        **flags: :func:`~medmis.tools._web.make_tools` arguments (``search``, ``visit``,
            ``cache_mode``, ``cache_dir``, ``allow_hosts``, ``corpus_dir``, …).

    Returns:
        ``{"query", "max_results", "backend", "results": [...], "cache_hit"}`` (with
        ``answer_box``, ``knowledge_graph`` and ``related_queries`` when the engine showed
        them) or, when the tool fails the
        way a model would be told, ``{"query", "max_results", "error": {"kind", "message"}}``.
    """

    async def call(tools: WebTools) -> dict[str, Any]:
        response = await tools.search_response(query, max_results=max_results)
        out: dict[str, Any] = {
            "backend": tools.backend.cache_id,
            "results": [r.model_dump(mode="json", exclude_none=True) for r in response.results],
        }
        # what a search engine shows beside the results (Serper), only when it showed it
        for name in ("answer_box", "knowledge_graph", "related_queries"):
            value = getattr(response, name)
            if value:
                out[name] = value
        return out

    return await _run(flags, {"query": query, "max_results": max_results}, call)


async def tools_visit(
    url: str, goal: str | None = None, *, max_chars: int = 6000, **flags: Any
) -> str:
    """Visit one page and return it as printable JSON.

    Args:
        url: The page to read.
        goal: What to look for on it (keeps the relevant passages).
        max_chars: Character budget of the page text.
        **flags: :func:`~medmis.tools._web.make_tools` arguments.

    Returns:
        ``{"url", "goal", "max_chars", "page": {...}, "cache_hit"}`` or ``{…, "error": {...}}``.
    """

    async def call(tools: WebTools) -> dict[str, Any]:
        page = await tools.visit(url, goal=goal, max_chars=max_chars)
        return {"page": page.model_dump(mode="json")}

    return await _run(flags, {"url": url, "goal": goal, "max_chars": max_chars}, call)
