"""The defender protocol, the per-case context it works through, and the registry.

A defender is an async callable ``(case, ctx) -> Answer`` built by a factory registered with
``@defender(name, options=...)``. Its typed options are validated, recorded on every record
and enough to rebuild the exact defender. Third-party defenders register through the
entry-point group ``medmis.defenders`` (the entry point names a module or object whose import
runs the decorator).

Everything a defender does with a model or a tool goes through :class:`DefenderContext`,
which traces the exact messages sent, the raw output, usage, timing and cache hits, applies
the run's retry policy to model calls, and turns tool failures into :class:`ToolError` that
the defender can show to its model.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from pydantic import BaseModel, ConfigDict, ValidationError

from agents._retry import RetryPolicy, retry_async
from experiments._types import Answer, Case, TraceStep, Usage
from tools._probe import cache_probe
from tools._types import Page, SearchResult, ToolError, Toolset

ENTRY_POINT_GROUP = "medmis.defenders"


class DefenderConfigError(ValueError):
    """An unknown defender name or invalid defender options (a user error, not a bug)."""


def message_to_dict(message: BaseMessage) -> dict[str, Any]:
    """A JSON-able view of a message without run-specific ids (used for traces)."""
    out: dict[str, Any] = {"role": message.type, "content": message.content}
    tool_calls = getattr(message, "tool_calls", None)
    if tool_calls:
        out["tool_calls"] = [
            {"name": c["name"], "args": c["args"], "id": c.get("id")} for c in tool_calls
        ]
    tool_call_id = getattr(message, "tool_call_id", None)
    if tool_call_id:
        out["tool_call_id"] = tool_call_id
    return out


@dataclass
class DefenderContext:
    """Per-case services for a defender: models, tools, tracing and accounting."""

    model: BaseChatModel
    model_spec: str = "unknown"
    tools: Toolset | None = None
    model_factory: Callable[[str], BaseChatModel] | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy.none)
    tool_timeout_s: float = 30.0
    trace: list[TraceStep] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    llm_calls: int = 0
    tool_calls: int = 0

    def model_for(self, spec: str | None) -> BaseChatModel:
        """The model for a role: the base model unless a defender option names another."""
        if not spec or spec == self.model_spec:
            return self.model
        if self.model_factory is None:
            raise ValueError(f"no model factory to build role model {spec!r}")
        return self.model_factory(spec)

    def note(self, name: str, output: Any = None, **fields: Any) -> None:
        """Add a non-call step (a decision, a vote, a verdict table) to the trace."""
        self.trace.append(TraceStep(kind="node", name=name, output=output, **fields))

    async def generate(
        self,
        messages: Sequence[BaseMessage],
        *,
        model: BaseChatModel | None = None,
        tools: Sequence[Any] | None = None,
        tool_choice: str | None = None,
        name: str = "model",
    ) -> AIMessage:
        """One traced, retried model call. Provider failures propagate after the retries."""
        chat = model or self.model
        runnable: Any = chat
        if tools:
            runnable = chat.bind_tools(list(tools), tool_choice=tool_choice) if tool_choice else chat.bind_tools(list(tools))
        sent = [message_to_dict(m) for m in messages]
        start = time.perf_counter()
        step = TraceStep(kind="model", name=name, input=sent)
        self.llm_calls += 1
        try:
            with cache_probe() as probe:
                reply = await retry_async(lambda: runnable.ainvoke(list(messages)), self.retry)
        except Exception as exc:
            step.error = f"{type(exc).__name__}: {exc}"[:500]
            step.latency_s = time.perf_counter() - start
            self.trace.append(step)
            raise
        if not isinstance(reply, AIMessage):  # pragma: no cover - providers return AIMessage
            reply = AIMessage(content=str(getattr(reply, "content", reply)))
        usage = Usage()
        meta = reply.usage_metadata
        if meta:
            usage = Usage(
                input_tokens=int(meta.get("input_tokens", 0) or 0),
                output_tokens=int(meta.get("output_tokens", 0) or 0),
            )
        self.usage.add(usage)
        step.output = message_to_dict(reply)
        step.usage = usage
        step.cache_hit = probe.result
        step.latency_s = time.perf_counter() - start
        self.trace.append(step)
        return reply

    async def _tool(self, name: str, args: dict[str, Any], call: Callable[[], Awaitable[Any]]) -> Any:
        self.tool_calls += 1
        start = time.perf_counter()
        step = TraceStep(kind="tool", name=name, input=args)
        try:
            if self.tools is None:
                raise ToolError("no web tools are configured for this run", kind="config")
            with cache_probe() as probe:
                result = await asyncio.wait_for(call(), timeout=self.tool_timeout_s)
            step.cache_hit = probe.result
        except TimeoutError as exc:
            step.error = f"timeout: no result within {self.tool_timeout_s:g} s"
            step.latency_s = time.perf_counter() - start
            self.trace.append(step)
            raise ToolError(step.error.split(": ", 1)[1], kind="timeout") from exc
        except ToolError as exc:
            step.error = str(exc)
            step.latency_s = time.perf_counter() - start
            self.trace.append(step)
            raise
        except Exception as exc:
            step.error = f"{type(exc).__name__}: {exc}"[:500]
            step.latency_s = time.perf_counter() - start
            self.trace.append(step)
            raise
        step.output = result
        step.latency_s = time.perf_counter() - start
        self.trace.append(step)
        return result

    async def search(self, query: str, *, max_results: int = 5) -> list[SearchResult]:
        """Traced web search; raises ToolError for model-visible failures."""
        tools = self.tools
        return await self._tool(
            "search_web",
            {"query": query, "max_results": max_results},
            lambda: tools.search(query, max_results=max_results),  # type: ignore[union-attr]
        )

    async def visit(self, url: str, *, goal: str | None = None, max_chars: int = 6000) -> Page:
        """Traced page visit; raises ToolError for model-visible failures."""
        tools = self.tools
        return await self._tool(
            "visit_web",
            {"url": url, "goal": goal, "max_chars": max_chars},
            lambda: tools.visit(url, goal=goal, max_chars=max_chars),  # type: ignore[union-attr]
        )


class DefenderOptions(BaseModel):
    """Base class for a defender's typed options (unknown keys are an error)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


SolveFn = Callable[[Case, DefenderContext], Awaitable[Answer]]
Factory = Callable[[Any], SolveFn]


@dataclass(frozen=True)
class DefenderSpec:
    name: str
    factory: Factory
    options: type[DefenderOptions]
    description: str
    uses_tools: bool = False
    control: bool = False  # a reference point (e.g. context_blind), never a candidate mitigation


@dataclass(frozen=True)
class Defender:
    """A configured defender: registry name, validated options and a display label."""

    name: str
    options: DefenderOptions
    solve: SolveFn
    label: str
    uses_tools: bool = False

    async def __call__(self, case: Case, ctx: DefenderContext) -> Answer:
        answer = await self.solve(case, ctx)
        return answer.model_copy(
            update={
                "usage": ctx.usage,
                "llm_calls": ctx.llm_calls,
                "tool_calls": ctx.tool_calls,
                "trace": ctx.trace,
            }
        )


_REGISTRY: dict[str, DefenderSpec] = {}
_entry_points_loaded = False


def defender(
    name: str,
    *,
    options: type[DefenderOptions] = DefenderOptions,
    description: str | None = None,
    uses_tools: bool = False,
    control: bool = False,
) -> Callable[[Factory], Factory]:
    """Register a defender factory ``factory(options) -> solve``.

    Example::

        class MyOptions(DefenderOptions):
            strictness: int = 2

        @defender("my_defense", options=MyOptions)
        def my_defense(opts: MyOptions) -> SolveFn:
            async def solve(case: Case, ctx: DefenderContext) -> Answer: ...
            return solve
    """
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise ValueError(f"defender names are lower_snake_case, got {name!r}")

    def register(factory: Factory) -> Factory:
        text = description or ((factory.__doc__ or "").strip().splitlines() or [""])[0]
        existing = _REGISTRY.get(name)
        # re-importing the same module (e.g. a reload in a notebook) re-registers the same
        # factory; a different factory under a taken name is a real conflict
        if existing is not None and existing.factory.__qualname__ != factory.__qualname__:
            raise DefenderConfigError(f"defender {name!r} is already registered")
        _REGISTRY[name] = DefenderSpec(name, factory, options, text, uses_tools, control)
        return factory

    return register


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        ep.load()


def _load_builtins() -> None:
    # importing registers the built-ins; the agentic ones live beside the graphs they wrap
    import defenses._agentic
    import defenses._builtin  # noqa: F401


def get_spec(name: str) -> DefenderSpec:
    _load_builtins()
    if name not in _REGISTRY:
        _load_entry_points()
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY))
        raise DefenderConfigError(f"unknown defender {name!r} (registered: {known})") from None


def is_control(label: str) -> bool:
    """Whether a defender label (``name`` or ``name[k=v]``) names a registered control."""
    try:
        return get_spec(label.split("[", 1)[0]).control
    except DefenderConfigError:
        return False  # a plug-in not installed here: treat it as a candidate


def list_defenders() -> list[DefenderSpec]:
    _load_builtins()
    _load_entry_points()
    return [_REGISTRY[n] for n in sorted(_REGISTRY)]


def _label(name: str, opts: DefenderOptions) -> str:
    changed = opts.model_dump(exclude_defaults=True, mode="json")
    if not changed:
        return name
    inner = ",".join(f"{k}={v}" for k, v in sorted(changed.items()))
    return f"{name}[{inner}]"


def create_defender(
    name: str, options: Mapping[str, Any] | DefenderOptions | None = None, *, label: str | None = None
) -> Defender:
    """Build a defender by name with validated options."""
    spec = get_spec(name)
    if isinstance(options, DefenderOptions):
        opts = options
    else:
        try:
            opts = spec.options(**dict(options or {}))
        except ValidationError as exc:
            errors = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise DefenderConfigError(f"invalid options for defender {name!r}: {errors}") from exc
    solve = spec.factory(opts)
    return Defender(name, opts, solve, label or _label(name, opts), spec.uses_tools)
