"""The search agent's tool turn: each call run through the context, shown to the model.

Both presets accept the reference signatures ``search_web(query, num_results, country,
language)`` and ``visit_web(url, goal, max_chars)``; the toolkit preset advertises only
``query`` and ``url``/``goal`` (its schema predates the others) but honours them when a model
sends them. Presets differ in what the model sees:

* ``toolkit``: results as numbered ``[i] title / URL: ... / snippet`` blocks, pages as
  ``Title / URL / text``, errors as ``Tool error (kind: message).``, duplicates refused by
  whitespace- and case-insensitive query identity;
* ``paper``: the reference harness's JSON results, ``[tool error: ...]`` and
  ``[duplicate call refused]`` for calls identical in their exact arguments, and every call
  logged for the finaliser (see ``_search_paper``).

A :class:`ToolError` becomes a tool result the model reads; anything else (a replay miss, a
bug) propagates and stops the case.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import ToolMessage

from medmis.graphs._context import DefenderContext
from medmis.tools import (
    SEARCH_TOOL_NAME,
    VISIT_TOOL_NAME,
    SearchResult,
    ToolError,
    render_page,
    render_search_results,
)

from . import _search_paper as paper
from ._credibility import Credibility, Source, option_support, present

MAX_NUM_RESULTS = 10
MIN_PAGE_CHARS = 500
MAX_PAGE_CHARS = 50_000


def call_signature(name: str, args: dict[str, Any]) -> str:
    """Identity of a tool call for duplicate refusal (whitespace and query case ignored)."""
    norm: dict[str, Any] = {}
    for key, value in sorted(args.items()):
        if isinstance(value, str):
            value = " ".join(value.split())
            if key == "query":
                value = value.casefold()
        norm[key] = value
    return f"{name}:{json.dumps(norm, sort_keys=True, default=str)}"


def _message(call: dict[str, Any], call_id: str, content: str, *, error: bool) -> ToolMessage:
    return ToolMessage(
        content=content,
        tool_call_id=call_id,
        name=str(call.get("name", "")),
        status="error" if error else "success",
    )


def _int_arg(args: dict[str, Any], name: str, low: int, high: int) -> int | None:
    value = args.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        number = int(value)
    except ValueError:
        return None
    return max(low, min(number, high)) if number > 0 else None


def _str_arg(args: dict[str, Any], name: str) -> str | None:
    value = args.get(name)
    return value.strip() if isinstance(value, str) and value.strip() else None


def refuse_duplicate(
    ctx: DefenderContext, call: dict[str, Any], call_id: str, *, paper_format: bool
) -> dict[str, Any]:
    ctx.note("duplicate_call_refused", {"name": call.get("name"), "args": call.get("args")})
    if paper_format:
        text = paper.DUPLICATE_REFUSED
    else:
        err = ToolError(
            "this identical call was already made; use its earlier result or change the arguments",
            kind="duplicate",
        )
        text = f"Tool error ({err})."
    return {
        "ok": False,
        "kind": "duplicate",
        "message": _message(call, call_id, text, error=True),
        "log": {"tool": call.get("name"), "arguments": call.get("args"), "result": text},
    }


class SourceCheck:
    """What ``credibility=true`` needs to show a tool result: the rules, the question's
    options and the passages the case has gathered before this call (``_credibility``)."""

    def __init__(self, rules: Credibility, options: dict[str, str], earlier: list[dict[str, Any]]) -> None:
        self.rules = rules
        self.options = options
        self.earlier = [(self.assess(p), str(p.get("text", ""))) for p in earlier]

    def assess(self, passage: dict[str, Any]) -> Source:
        return self.rules.assess(str(passage.get("url", "")), str(passage.get("title") or ""),
                                 str(passage.get("text", "")))

    def show(self, fresh: list[tuple[Source, str]], uncounted: int = 0) -> tuple[list[str], int]:
        """Each fresh passage's text as shown (corroboration counted over the case so far,
        without the last ``uncounted`` fresh ones: a search engine's own summaries restate
        its results)."""
        weights = option_support([*self.earlier, *fresh[: len(fresh) - uncounted]], self.options)
        shown = [present(src, text, self.options, weights) for src, text in fresh]
        return [text for text, _ in shown], sum(n for _, n in shown)


async def run_call(
    ctx: DefenderContext,
    call: dict[str, Any],
    call_id: str,
    *,
    max_results: int,
    max_page_chars: int,
    paper_format: bool,
    check: SourceCheck | None = None,
) -> dict[str, Any]:
    """Execute one tool call; returns the outcome the graph's tool node merges into state.
    With a ``check`` (``credibility=true``) results are ranked and shown with their source
    checks, uncorroborated sentences withheld; the raw passages stay the case's evidence."""
    name = call.get("name")
    args: dict[str, Any] = call.get("args") if isinstance(call.get("args"), dict) else {}  # type: ignore[assignment]
    try:
        if name == SEARCH_TOOL_NAME:
            return await _search(ctx, call, call_id, args, max_results, paper_format, check)
        if name == VISIT_TOOL_NAME:
            return await _visit(ctx, call, call_id, args, max_page_chars, paper_format, check)
        raise ToolError(
            f"unknown tool {name!r}; use {SEARCH_TOOL_NAME} or {VISIT_TOOL_NAME}", kind="arguments"
        )
    except ToolError as exc:
        text = paper.error_text(exc) if paper_format else f"Tool error ({exc})."
        out: dict[str, Any] = {
            "ok": False,
            "kind": exc.kind,
            "message": _message(call, call_id, text, error=True),
            "log": {"tool": name, "arguments": args, "result": text},
        }
        if name == SEARCH_TOOL_NAME:
            out["search"] = {"query": args.get("query"), "urls": [], "error": str(exc)}
        return out


async def _search(
    ctx: DefenderContext,
    call: dict[str, Any],
    call_id: str,
    args: dict[str, Any],
    max_results: int,
    paper_format: bool,
    check: SourceCheck | None = None,
) -> dict[str, Any]:
    query = args.get("query")
    if not isinstance(query, str) or not query.strip():
        raise ToolError("search_web needs a non-empty 'query' string", kind="arguments")
    wanted = _int_arg(args, "num_results", 1, MAX_NUM_RESULTS) or max_results
    country, language = _str_arg(args, "country"), _str_arg(args, "language")
    note: dict[str, Any] | None = None  # with a check: what it found
    if paper_format:
        response = await ctx.search_response(
            query, max_results=wanted, country=country, language=language
        )
        results: list[SearchResult] = list(response.results)
        raw = results
        if check is not None:
            boxes = {k: getattr(response, k) for k in ("answer_box", "knowledge_graph") if getattr(response, k)}
            results, raw, note, summaries = _checked_results(results, check, list(boxes.values()))
            response = response.model_copy(update={"results": results, **dict(zip(boxes, summaries, strict=True))})
        text = paper.search_result_text(response, query)
    else:
        results = list(
            await ctx.search(query, max_results=wanted, country=country, language=language)
        )
        raw = results
        if check is not None:
            results, raw, note, _ = _checked_results(results, check)
        text = render_search_results(results)
    if note is not None:
        ctx.note("source_check", {"tool": SEARCH_TOOL_NAME, **note})
    return {
        "ok": True,
        "message": _message(call, call_id, text, error=False),
        "search": {"query": query, "urls": [r.url for r in results]},
        "evidence": [{"url": r.url, "title": r.title, "text": r.snippet} for r in raw],
        # what the model was shown (after a source check): what an answer can rest on
        "shown": [{"url": r.url, "text": r.snippet} for r in results],
        "log": {"tool": SEARCH_TOOL_NAME, "arguments": args, "result": text},
    }


def _checked_results(
    results: list[Any], check: SourceCheck, summaries: Sequence[str] = ()
) -> tuple[list[Any], list[Any], dict[str, Any], list[str]]:
    """(results as shown, the same results as returned, what the check found, summaries as
    shown): ranked by tier, each shown snippet replaced by its source check and kept text.
    ``summaries`` (a search engine's answer box and knowledge graph, which name no source)
    are shown as unverified text and never count towards agreement."""
    sources = {id(r): check.rules.assess(r.url, r.title, r.snippet) for r in results}
    ranked = check.rules.rank(results, lambda r: sources[id(r)])
    engine = Source("", "search engine summary", "", False, ())
    extra = [(engine, text) for text in summaries or []]
    texts, withheld = check.show([*((sources[id(r)], r.snippet) for r in ranked), *extra], len(extra))
    shown = [r.model_copy(update={"snippet": t}) for r, t in zip(ranked, texts, strict=False)]
    note = {"sources": [sources[id(r)].public() for r in ranked], "withheld": withheld}
    return shown, ranked, note, texts[len(ranked):]


async def _visit(
    ctx: DefenderContext,
    call: dict[str, Any],
    call_id: str,
    args: dict[str, Any],
    max_page_chars: int,
    paper_format: bool,
    check: SourceCheck | None = None,
) -> dict[str, Any]:
    url = args.get("url")
    if not isinstance(url, str) or not url.strip():
        raise ToolError("visit_web needs a 'url' string", kind="arguments")
    goal = args.get("goal") if isinstance(args.get("goal"), str) else None
    chars = _int_arg(args, "max_chars", MIN_PAGE_CHARS, MAX_PAGE_CHARS) or max_page_chars
    page = await ctx.visit(url, goal=goal, max_chars=chars)
    shown = page
    if check is not None:
        source = check.rules.assess(page.final_url, page.title, page.text)
        texts, withheld = check.show([(source, page.text)])
        shown = page.model_copy(update={"text": texts[0]})
        ctx.note("source_check", {"tool": VISIT_TOOL_NAME, "sources": [source.public()], "withheld": withheld})
    text = paper.visit_result_text(url.strip(), goal, shown) if paper_format else render_page(shown)
    return {
        "ok": True,
        "message": _message(call, call_id, text, error=False),
        "visited": page.final_url,
        "page": {"url": url.strip(), "final_url": page.final_url, "text": page.text},
        "evidence": [{"url": page.final_url, "title": page.title, "text": page.text}],
        "shown": [{"url": page.final_url, "text": shown.text}],
        "log": {"tool": VISIT_TOOL_NAME, "arguments": args, "result": text},
    }
