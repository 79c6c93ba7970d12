"""The per-case context every defender works through, and the defender's function shape.

Everything a defender does with a model or a tool goes through :class:`DefenderContext`,
which traces the exact messages sent, the raw output, usage, timing and cache hits, applies
the run's retry policy to model calls, and turns tool failures into :class:`ToolError` that
the defender can show to its model. It is part of the defender contract
(``medmis.defenses``), below the built-in defenders in ``medmis.graphs``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from pydantic import BaseModel, ConfigDict

from medmis.agents import (
    CALL_SETTINGS_KWARG,
    LOGPROBS_KWARG,
    STRUCTURED_OUTPUT_KWARG,
    AdaptiveLimiter,
    CallSettings,
    ModelConfigError,
    RetryPolicy,
    StructuredOutput,
    Usage,
    accepts_call_settings,
    accepts_logprobs,
    accepts_structured_output,
    estimate_tokens,
    message_text,
    provider_family,
    reply_logprobs,
    retry_async,
)
from medmis.tools import (
    Page,
    SearchResponse,
    SearchResult,
    SerpResult,
    ToolError,
    Toolset,
    cache_probe,
    locale_hints,
    redact,
)

from ._case import Answer, CaseView, TraceStep, Viewable, as_view
from ._extract import extract_answer
from ._prompts import PromptMessages


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


T = TypeVar("T")  # what a traced tool call returns


@dataclass
class DefenderContext:
    """Per-case services for a defender: models, tools, tracing and accounting.

    It carries no case: what the defender is asked is the :class:`CaseView` it is handed
    beside the context. Whoever builds one (the harness, ``defenses.testing``) passes
    services only, so nothing reachable from it leads to the gold answer or the target.
    """

    model: BaseChatModel
    model_spec: str = "unknown"
    tools: Toolset | None = None
    model_factory: Callable[[str], BaseChatModel] | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy.none)
    tool_timeout_s: float = 30.0
    limiter: AdaptiveLimiter | None = None  # the run's shared limit on model calls in flight
    trace: list[TraceStep] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    llm_calls: int = 0
    tool_calls: int = 0
    answer_evidence: list[dict[str, Any]] = field(default_factory=list)
    """What the final answer call was given, as declared by :meth:`answered_from`."""

    def answered_from(self, passages: Sequence[Any]) -> None:
        """Declare the attributed passages (``{"url", "text"}``) the next answer call is given.

        The one seam through which a defender says what its final answer was written from:
        each call replaces the last, so the declaration made before the final answer call is
        the one that stands. The harness then decides which of them the answer rests on with
        the same rule for every defender (:func:`medmis.graphs.answer_sources`); a defender
        that never declares rests only on the URLs its answer names.
        """
        self.answer_evidence = [
            {"url": p.get("url"), "text": str(p.get("text") or "")}
            for p in passages if isinstance(p, dict) and isinstance(p.get("url"), str)
        ]

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
        structured_output: StructuredOutput | Literal["auto"] | None = "auto",
        settings: CallSettings | None = None,
        logprobs: bool = False,
    ) -> AIMessage:
        """One traced, retried model call. Provider failures propagate after the retries.

        Messages from ``render_prompt`` are placed for the family of the model called (the
        ``paper`` preset puts its answer instruction in the user turn for Gemini), and the
        structured output they ask for is requested from a model that understands it
        (``structured_output="auto"``; pass a request or None to override). Structured
        output is never combined with bound tools. ``settings`` (temperature, output cap,
        JSON mode for this call) reach a model that declares it understands them; the
        simulated examinee never sees them. ``logprobs=True`` asks for the sampled tokens'
        log-probabilities (``medmis.agents.accepts_logprobs``; a model that cannot return them
        raises :class:`~medmis.agents.ModelConfigError` before any request); read them from the
        reply with :func:`medmis.agents.reply_logprobs`. They are traced with the reply
        (``output["logprobs"]``) and stored with it by the record/replay layer.
        """
        chat = model or self.model
        if isinstance(messages, PromptMessages):
            messages = messages.for_family(provider_family(chat))
        if structured_output == "auto":
            structured_output = getattr(messages, "structured_output", None)
        runnable: Any = chat
        if tools:
            runnable = chat.bind_tools(list(tools), tool_choice=tool_choice) if tool_choice else chat.bind_tools(list(tools))
        elif structured_output is not None and accepts_structured_output(chat):
            runnable = chat.bind(**{STRUCTURED_OUTPUT_KWARG: structured_output})
        if settings and accepts_call_settings(chat):
            runnable = runnable.bind(**{CALL_SETTINGS_KWARG: dict(settings)})
        if logprobs:
            if not accepts_logprobs(chat):
                raise ModelConfigError(
                    f"{self.model_spec if chat is self.model else type(chat).__name__} does not return "
                    "token log-probabilities (models that do: openai/, google/, mock/)"
                )
            runnable = runnable.bind(**{LOGPROBS_KWARG: True})
        sent = [message_to_dict(m) for m in messages]
        start = time.perf_counter()
        step = TraceStep(kind="model", name=name, input=sent)
        self.llm_calls += 1
        try:
            with cache_probe() as probe:
                limiter = self.limiter

                # a --max-tpm budget charges the prompt's estimate up front (corrected from usage)
                tokens = sum(estimate_tokens(message_text(m)) for m in messages) \
                    if limiter is not None and limiter.budget is not None else 0

                async def call() -> Any:
                    if limiter is None:
                        return await runnable.ainvoke(list(messages))
                    return await limiter.run(lambda: runnable.ainvoke(list(messages)), tokens=tokens)

                reply = await retry_async(call, self.retry)
        except Exception as exc:
            step.error = redact(f"{type(exc).__name__}: {exc}")[:500]  # redact, then cut
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
        if logprobs:
            step.output["logprobs"] = reply_logprobs(reply)
        step.usage = usage
        step.cache_hit = probe.result
        step.latency_s = time.perf_counter() - start
        self.trace.append(step)
        return reply

    async def _tool(self, name: str, args: dict[str, Any], call: Callable[[], Awaitable[T]]) -> T:
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
            step.error = redact(f"{type(exc).__name__}: {exc}")[:500]  # redact, then cut
            step.latency_s = time.perf_counter() - start
            self.trace.append(step)
            raise
        step.output = result
        step.latency_s = time.perf_counter() - start
        self.trace.append(step)
        return result

    async def search(
        self,
        query: str,
        *,
        max_results: int = 5,
        country: str | None = None,
        language: str | None = None,
    ) -> list[SearchResult]:
        """Traced web search; raises ToolError for model-visible failures.

        ``country`` and ``language`` are passed on (and traced) only when given and when the
        toolset's ``search`` accepts them, so toolsets written before they existed still work.
        """
        tools = self.tools
        hints = locale_hints(tools.search if tools is not None else None, country, language)
        return await self._tool(
            "search_web",
            {"query": query, "max_results": max_results, **hints},
            lambda: tools.search(query, max_results=max_results, **hints),  # type: ignore[union-attr]
        )

    async def search_response(
        self,
        query: str,
        *,
        max_results: int = 5,
        country: str | None = None,
        language: str | None = None,
    ) -> SearchResponse:
        """Traced web search with what the engine showed beside the results (answer box,
        knowledge graph, related searches) when the toolset offers ``search_response``;
        otherwise the results alone. Raises ToolError for model-visible failures."""
        tools = self.tools
        rich = getattr(tools, "search_response", None)
        hints = locale_hints(rich if callable(rich) else getattr(tools, "search", None), country, language)

        async def call() -> SearchResponse:
            if callable(rich):
                response = await rich(query, max_results=max_results, **hints)
                return SearchResponse.model_validate(response)
            results = await tools.search(query, max_results=max_results, **hints)  # type: ignore[union-attr]
            return SearchResponse(
                query=query, results=[SerpResult.model_validate(r.model_dump()) for r in results]
            )

        return await self._tool("search_web", {"query": query, "max_results": max_results, **hints}, call)

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

    def label_items(self) -> dict[str, Any]:
        """The options that name this configuration in a defender label (``name[k=v,...]``):
        by default those that differ from their field defaults. Options classes with presets
        override it so a preset is named once instead of by every value it sets."""
        return self.model_dump(exclude_defaults=True, mode="json")


SolveFn = Callable[[CaseView, DefenderContext], Awaitable[Answer]]
"""A defender's solve function: ``solve(view, ctx) -> Answer``; ``view`` is all it is told."""


def answer_from_text(
    text: str, case: CaseView | Viewable, ctx: DefenderContext, *, parsed: Any = None, **extra: Any
) -> Answer:
    """Extract the chosen option from ``text`` (or from a provider's ``parsed`` structured
    reply, when it names one) and note how it was found in the trace.

    An open-ended case has no option to extract: its answer is ``text`` itself, with no
    choice (``method="open"``); it is graded afterwards (``medmis grade``), never here.
    """
    view = as_view(case)
    if view.is_open:
        ctx.trace.append(TraceStep(kind="extract", name="open_answer", input=None,
                                   output={"choice": None, "method": "open"}))
        return Answer(choice=None, raw=text, method="open", extra=dict(extra))
    found = extract_answer(text, view.options, parsed=parsed)
    ctx.trace.append(
        TraceStep(kind="extract", name="extract_answer", input=None, output={"choice": found.choice, "method": found.method})
    )
    return Answer(choice=found.choice, raw=text, method=found.method, extra=dict(extra))


def answer_from_reply(
    reply: AIMessage, case: CaseView | Viewable, ctx: DefenderContext, **extra: Any
) -> Answer:
    """:func:`answer_from_text` on a model reply, its structured parse included."""
    parsed = reply.additional_kwargs.get("parsed")
    return answer_from_text(message_text(reply), case, ctx, parsed=parsed, **extra)
