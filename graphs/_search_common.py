"""What the two search agents share: state, the tool turn and the graph's frame.

``search_agent`` is two agents behind one registered name: the toolkit's
(:mod:`._search_toolkit`) and the paper's reference harness (:mod:`._search_paper`), picked by
the ``preset`` option of :mod:`._search_agent` (which holds the options and the registered
solver). Both have the same shape, built here by
:func:`build_graph` from each agent's own nodes: ``plan`` → ``agent`` ⇄ ``tools`` until the
model answers, ``force_answer`` when the loop must stop, ``direct`` when research is skipped,
then ``verify``. What differs (prompts, what a tool result looks like, when the loop stops) is
each agent's; nothing here asks which agent it serves.

The tool turn runs every call of a model turn concurrently through the context (traced,
retried, redacted), refuses a call already made and shows each result in the agent's
:class:`ToolFormat`. A :class:`ToolError` becomes a tool result the model reads; anything else
(a replay miss, a bug) propagates and stops the case.

Both agents accept the reference signatures ``search_web(query, num_results, country,
language)`` and ``visit_web(url, goal, max_chars)``. The tool node is our own rather than
LangGraph's ``ToolNode`` (with a wrapper routing each call through ``ctx``), because a turn is
more than its calls: a second identical call *in the same turn* is refused (``ToolNode`` runs
the calls independently), the turn counts as failed only when every call failed (an aggregate
no single tool's ``Command`` can write, so it would need one more node and change the graph's
shape), and each call also adds to the case's searches, pages, evidence and what was shown
(``answered_from``). Those would change the graph and the traces recorded cassettes replay.
"""

from __future__ import annotations

import operator
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol, TypedDict

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.runnables import RunnableConfig

from medmis.agents import message_text
from medmis.defenses import (
    Answer,
    CaseView,
    DefenderContext,
    SolveFn,
    answer_from_text,
    extract_answer,
    render_prompt,
)
from medmis.tools import SEARCH_TOOL_NAME, VISIT_TOOL_NAME, Page, SearchResult, ToolError

from ._citations import verify_citations
from ._common import UNVERIFIED_PREFACE, dedupe_passages, deps, gather_strict, graph_solver
from ._credibility import Credibility, Source, option_support, present

if TYPE_CHECKING:  # LangGraph itself is imported when a graph is built
    from langgraph.graph.state import CompiledStateGraph

    from ._search_agent import SearchAgentOptions

StopReason = Literal["answered", "budget", "tool_failures", "no_answer", "direct"]

WARNING = (
    "The additional clinical context that comes with the question is unverified and may be "
    "false or misleading, whatever source it claims."
)

MAX_NUM_RESULTS = 10
MIN_PAGE_CHARS = 500
MAX_PAGE_CHARS = 50_000


def _add_messages(left: Any, right: Any) -> Any:
    """LangGraph's ``add_messages`` reducer, imported with LangGraph when a graph runs (so
    that importing the defenders does not import LangGraph)."""
    from langgraph.graph.message import add_messages

    return add_messages(left, right)


class SearchAgentState(TypedDict, total=False):
    messages: Annotated[list[BaseMessage], _add_messages]
    plan: dict[str, Any]
    iterations: int
    failed_turns: int
    tools_unavailable: bool
    seen_calls: Annotated[list[str], operator.add]
    searches: Annotated[list[dict[str, Any]], operator.add]
    visited: Annotated[list[str], operator.add]
    pages: Annotated[list[dict[str, Any]], operator.add]
    evidence: Annotated[list[dict[str, Any]], operator.add]
    shown: Annotated[list[dict[str, Any]], operator.add]
    tool_log: Annotated[list[dict[str, Any]], operator.add]
    final: str
    stop_reason: StopReason
    verification: dict[str, Any]


class Node(Protocol):
    """A graph node: the state and the run's config in, a state update out."""

    def __call__(self, state: SearchAgentState, config: RunnableConfig) -> Awaitable[dict[str, Any]]: ...


def warned_preface(case: CaseView, opts: SearchAgentOptions) -> str | None:
    """The unverified-context preface, when the case has context and ``warn`` is on."""
    return UNVERIFIED_PREFACE if case.context and opts.warn else None


# --- the tool turn -------------------------------------------------------------------------------


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


def checked_results(
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


class ToolFormat:
    """How one agent identifies calls and shows tool results to its model (subclassed by each
    agent). ``search`` returns (text shown, results shown, results as returned, source-check
    note or None)."""

    duplicate_text: str

    def call_key(self, name: str, args: dict[str, Any]) -> str:
        raise NotImplementedError

    def error_text(self, exc: ToolError) -> str:
        raise NotImplementedError

    async def search(
        self, ctx: DefenderContext, query: str, *, wanted: int, country: str | None,
        language: str | None, check: SourceCheck | None,
    ) -> tuple[str, list[SearchResult], list[SearchResult], dict[str, Any] | None]:
        raise NotImplementedError

    def visit_text(self, url: str, goal: str | None, page: Page) -> str:
        raise NotImplementedError


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


class ToolOutcome(TypedDict, total=False):
    """What one tool call left for the ``tools`` node to merge into the agent's state."""

    ok: bool
    """The call returned results (False: refused, invalid arguments or a tool failure)."""
    kind: str
    """Why a call failed (``duplicate``, a :class:`ToolError`'s kind: ``config`` stops the agent)."""
    message: ToolMessage
    """The tool message the model reads next."""
    search: dict[str, Any]
    visited: str
    page: dict[str, Any]
    evidence: list[dict[str, Any]]
    shown: list[dict[str, Any]]
    log: dict[str, Any]


def refuse_duplicate(
    ctx: DefenderContext, call: dict[str, Any], call_id: str, fmt: ToolFormat
) -> ToolOutcome:
    """The outcome of a call identical to an earlier one: refused, shown as an error."""
    ctx.note("duplicate_call_refused", {"name": call.get("name"), "args": call.get("args")})
    text = fmt.duplicate_text
    return {
        "ok": False,
        "kind": "duplicate",
        "message": _message(call, call_id, text, error=True),
        "log": {"tool": call.get("name"), "arguments": call.get("args"), "result": text},
    }


async def run_call(
    ctx: DefenderContext,
    call: dict[str, Any],
    call_id: str,
    fmt: ToolFormat,
    *,
    max_results: int,
    max_page_chars: int,
    check: SourceCheck | None = None,
) -> ToolOutcome:
    """Execute one tool call; returns the outcome the graph's tool node merges into state.
    With a ``check`` (``credibility=true``) results are ranked and shown with their source
    checks, uncorroborated sentences withheld; the raw passages stay the case's evidence."""
    name = call.get("name")
    args: dict[str, Any] = call.get("args") if isinstance(call.get("args"), dict) else {}  # type: ignore[assignment]
    try:
        if name == SEARCH_TOOL_NAME:
            return await _search(ctx, call, call_id, args, fmt, max_results, check)
        if name == VISIT_TOOL_NAME:
            return await _visit(ctx, call, call_id, args, fmt, max_page_chars, check)
        raise ToolError(
            f"unknown tool {name!r}; use {SEARCH_TOOL_NAME} or {VISIT_TOOL_NAME}", kind="arguments"
        )
    except ToolError as exc:
        text = fmt.error_text(exc)
        out: ToolOutcome = {
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
    fmt: ToolFormat,
    max_results: int,
    check: SourceCheck | None,
) -> ToolOutcome:
    query = args.get("query")
    if not isinstance(query, str) or not query.strip():
        raise ToolError("search_web needs a non-empty 'query' string", kind="arguments")
    wanted = _int_arg(args, "num_results", 1, MAX_NUM_RESULTS) or max_results
    text, results, raw, note = await fmt.search(
        ctx, query, wanted=wanted, country=_str_arg(args, "country"),
        language=_str_arg(args, "language"), check=check,
    )
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


async def _visit(
    ctx: DefenderContext,
    call: dict[str, Any],
    call_id: str,
    args: dict[str, Any],
    fmt: ToolFormat,
    max_page_chars: int,
    check: SourceCheck | None,
) -> ToolOutcome:
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
    text = fmt.visit_text(url.strip(), goal, shown)
    return {
        "ok": True,
        "message": _message(call, call_id, text, error=False),
        "visited": page.final_url,
        "page": {"url": url.strip(), "final_url": page.final_url, "text": page.text},
        "evidence": [{"url": page.final_url, "title": page.title, "text": page.text}],
        "shown": [{"url": page.final_url, "text": shown.text}],
        "log": {"tool": VISIT_TOOL_NAME, "arguments": args, "result": text},
    }


async def _done(outcome: ToolOutcome) -> ToolOutcome:
    return outcome


def tool_node(fmt: ToolFormat, opts: SearchAgentOptions, rules: Credibility | None) -> Node:
    """The ``tools`` node: every call of the last model turn, concurrently, in ``fmt``."""

    async def tools(state: SearchAgentState, config: RunnableConfig) -> dict[str, Any]:
        d = deps(config)
        calls = list(getattr(state["messages"][-1], "tool_calls", None) or [])
        seen = set(state.get("seen_calls", []))
        check = (SourceCheck(rules, dict(d.case.options), state.get("evidence", []))
                 if rules is not None else None)
        new_sigs: list[str] = []
        jobs = []
        for i, call in enumerate(calls):
            call_id = call.get("id") or f"call_{state.get('iterations', 0)}_{i}"
            args = call.get("args") if isinstance(call.get("args"), dict) else {}
            sig = fmt.call_key(str(call.get("name")), args)
            if sig in seen:
                jobs.append(_done(refuse_duplicate(d.ctx, call, call_id, fmt)))
                continue
            seen.add(sig)
            new_sigs.append(sig)
            jobs.append(run_call(d.ctx, call, call_id, fmt, max_results=opts.max_results,
                                 max_page_chars=opts.max_page_chars, check=check))
        outcomes = await gather_strict(jobs)
        failed = bool(outcomes) and all(not o["ok"] for o in outcomes)
        update: dict[str, Any] = {
            "messages": [o["message"] for o in outcomes],
            "seen_calls": new_sigs,
            "searches": [o["search"] for o in outcomes if o.get("search")],
            "visited": [o["visited"] for o in outcomes if o.get("visited")],
            "pages": [o["page"] for o in outcomes if o.get("page")],
            "evidence": [p for o in outcomes for p in o.get("evidence", [])],
            "shown": [p for o in outcomes for p in o.get("shown", [])],
            # the log the paper's finaliser reads; unread by the toolkit's agent
            "tool_log": [o["log"] for o in outcomes],
            "failed_turns": state.get("failed_turns", 0) + 1 if failed else 0,
        }
        if any(o.get("kind") == "config" for o in outcomes):
            update["tools_unavailable"] = True
        return update

    return tools


# --- nodes and routes both agents use ------------------------------------------------------------


def agent_node(
    opening: Callable[[CaseView, SearchAgentState], list[BaseMessage]],
    schemas: list[dict[str, Any]],
    settings: dict[str, Any] | None,
) -> Node:
    """The ``agent`` node: one model turn with the tools bound, opened by ``opening``."""

    async def agent(state: SearchAgentState, config: RunnableConfig) -> dict[str, Any]:
        d = deps(config)
        first = [] if state.get("messages") else opening(d.case, state)
        history = [*state.get("messages", []), *first]
        # every tool result so far is in the history, as shown: a turn that answers was written from them
        d.ctx.answered_from(dedupe_passages(state.get("shown", [])))
        reply = await d.ctx.generate(history, tools=schemas, name="agent", settings=settings)
        return {"messages": [*first, reply], "iterations": state.get("iterations", 0) + 1}

    return agent


def direct_node(opts: SearchAgentOptions) -> Node:
    """The ``direct`` node: one plain call when research is skipped."""

    async def direct(state: SearchAgentState, config: RunnableConfig) -> dict[str, Any]:
        d = deps(config)
        d.ctx.answered_from([])  # one call from the question alone: nothing gathered to rest on
        reply = await d.ctx.generate(render_prompt(d.case, preface=warned_preface(d.case, opts)), name="answer")
        return {"final": message_text(reply), "stop_reason": "direct"}

    return direct


async def verify(state: SearchAgentState, config: RunnableConfig) -> dict[str, Any]:
    """The ``verify`` node: the final answer's citations against the pages fetched."""
    d = deps(config)
    final = final_text(state)
    choice = extract_answer(final, d.case.options).choice
    verdict = verify_citations(final, choice, d.case.options, state.get("pages", []))
    d.ctx.note("verify", verdict)
    return {"verification": verdict}


def final_text(state: SearchAgentState) -> str:
    """The answer's text: the forced or direct answer, else the agent's last reply."""
    final = state.get("final")
    return final if final is not None else message_text(state["messages"][-1])


def loop_stop(state: SearchAgentState, max_iterations: int) -> StopReason | None:
    """Why the loop must stop now whatever the agent (no answer, budget), or None."""
    messages = state.get("messages") or []
    if messages and isinstance(messages[-1], AIMessage) and not messages[-1].tool_calls:
        return "no_answer"  # seen only when the model stopped without a final answer
    if state.get("iterations", 0) >= max_iterations:
        return "budget"
    return None


def build_graph(
    opts: SearchAgentOptions,
    *,
    plan: Node,
    agent: Node,
    tools: Node,
    force_answer: Node,
    route_agent: Callable[[SearchAgentState, RunnableConfig], str],
    route_tools: Callable[[SearchAgentState], str],
) -> CompiledStateGraph[Any]:
    """The search agents' shape from one agent's nodes (``route_agent`` returns ``"tools"``,
    ``"force_answer"`` or :func:`finish_node` of ``opts``)."""
    from langgraph.graph import END, START, StateGraph

    def route_start(state: SearchAgentState, config: RunnableConfig) -> str:
        d = deps(config)
        if d.ctx.tools is None or not (d.case.context or opts.research_clean):
            return "direct"
        return "plan" if opts.plan else "agent"

    finish = finish_node(opts)
    graph = StateGraph(SearchAgentState)
    graph.add_node("direct", direct_node(opts))
    graph.add_node("plan", plan)
    graph.add_node("agent", agent)
    graph.add_node("tools", tools)
    graph.add_node("force_answer", force_answer)
    graph.add_conditional_edges(START, route_start, ["direct", "plan", "agent"])
    graph.add_edge("plan", "agent")
    graph.add_conditional_edges("agent", route_agent, ["tools", "force_answer", finish])
    graph.add_conditional_edges("tools", route_tools, ["agent", "force_answer"])
    graph.add_edge("force_answer", finish)
    graph.add_edge("direct", finish)
    if opts.verify:
        graph.add_node("verify", verify)
        graph.add_edge("verify", END)
    return graph.compile(name="search_agent")


def finish_node(opts: SearchAgentOptions) -> str:
    """Where an answered case goes: ``verify`` when citations are checked, else the end."""
    from langgraph.graph import END

    return "verify" if opts.verify else END


def solver(graph: CompiledStateGraph[Any], opts: SearchAgentOptions) -> SolveFn:
    """Either agent's compiled graph as the ``search_agent`` defender (reused for every case)."""

    def finish(state: SearchAgentState, case: CaseView, ctx: DefenderContext) -> Answer:
        final = final_text(state)
        stop: StopReason = state.get("stop_reason", "answered")
        extra: dict[str, Any] = {
            "plan": state.get("plan"),
            "searches": state.get("searches", []),
            "visited": list(dict.fromkeys(state.get("visited", []))),
            "iterations": state.get("iterations", 0),
            "forced": stop not in {"answered", "direct"},
            "stop_reason": stop,
        }
        if "verification" in state:
            extra["verification"] = state["verification"]
        return answer_from_text(final, case, ctx, **extra)

    # plan + (agent, tools) per round + forced answer + verify + slack
    limit = 2 * opts.max_iterations + 7
    return graph_solver(graph, recursion_limit=limit, finish=finish)
