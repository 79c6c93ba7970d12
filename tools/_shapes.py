"""What a stored value must look like for each kind the toolkit reads back.

A replayed value is handed to the code that reads it (a web page to ``Page``, search results to
``SearchResult`` / ``SearchResponse``, a model reply to LangChain's loader). A value of another
shape (``null``, a list where an object belongs, a page without its URL) would pass the content
hash, which only says the value is the one written, and fail inside a case at replay. So
``medmis cache import`` and ``medmis cache verify`` check the shape here, before a run gets it.
Kinds this module does not know (a caller's own) are not checked.

Reads during a run do not call this: the hash check is the per-read cost, and a value written by
the toolkit's own recorder has its shape by construction.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

__all__ = ["value_problem"]


def _short(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "value"
        more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        return f"{where}: {first['msg']}{more}"
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def _visit(value: Any) -> None:
    from medmis.tools._types import Page

    Page.model_validate(value)


def _search(value: Any) -> None:
    from medmis.tools._types import SearchResponse, SearchResult

    if isinstance(value, dict):
        SearchResponse.model_validate(value)
    elif isinstance(value, list):
        for result in value:
            SearchResult.model_validate(result)
    else:
        raise TypeError(f"expected a list of results or a search response, got {_type(value)}")


def _model(value: Any) -> None:
    from langchain_core.outputs import Generation

    from ._generations import load_generations

    if not isinstance(value, dict) or not isinstance(value.get("generations"), list):
        raise TypeError(f"expected an object with a 'generations' list, got {_type(value)}")
    if not value["generations"]:
        raise ValueError("'generations' is empty")
    for loaded in load_generations(value):
        if not isinstance(loaded, Generation):
            raise TypeError(f"a generation loads as {type(loaded).__name__}, not a Generation")


def _type(value: Any) -> str:
    return "null" if value is None else type(value).__name__


_CHECKS = {"visit": _visit, "search": _search, "model": _model}


def value_problem(kind: str, value: Any) -> str | None:
    """Why ``value`` cannot be served as a recording of ``kind``, in a few words; ``None`` if it can."""
    check = _CHECKS.get(kind)
    if check is None:
        return None
    try:
        check(value)
    except Exception as exc:  # whatever the reader would raise at replay is the problem to name
        return f"value has the wrong shape for a {kind} entry ({_short(exc)})"
    return None
