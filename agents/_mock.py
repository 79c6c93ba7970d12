"""A scripted chat model: a real provider for tests and offline runs.

``ScriptedChatModel(outputs=...)`` accepts a list, a generator/iterator, or a callable
``(messages, tools) -> output``. Each output is a string, an ``AIMessage`` (tool calls
included), or an exception instance to raise. Every call is kept in ``calls`` so tests can
assert on exactly what a defender sent.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict, Field, PrivateAttr

from ._text import content_text, estimate_tokens, message_text

__all__ = ["ScriptedChatModel", "content_text", "cycle", "estimate_tokens", "message_text", "with_usage"]

Output = str | AIMessage | BaseException


def with_usage(reply: AIMessage, messages: Sequence[BaseMessage]) -> AIMessage:
    """Attach estimated usage when a scripted reply has none."""
    if reply.usage_metadata:
        return reply
    n_in = sum(estimate_tokens(message_text(m)) for m in messages)
    n_out = estimate_tokens(message_text(reply)) + 8 * len(reply.tool_calls)
    reply.usage_metadata = {"input_tokens": n_in, "output_tokens": n_out, "total_tokens": n_in + n_out}
    return reply


class ScriptedChatModel(BaseChatModel):
    """Replays scripted outputs; raises ``IndexError`` when a list script runs out.

    A ``structured_output`` request is accepted and kept in ``calls`` (the script decides
    what to reply), so tests can check that a prompt preset asked for one. So is a
    ``logprobs=True`` request: a scripted ``AIMessage`` that carries
    ``response_metadata["logprobs"]`` keeps it, any other reply gets log-probability 0 (a
    certain model) for each of its whitespace-separated tokens.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    provider_family: ClassVar[str] = "mock"
    accepts_structured_output: ClassVar[bool] = True
    accepts_logprobs: ClassVar[bool] = True

    outputs: Any = Field(default_factory=list)
    model_name: str = "scripted"
    calls: list[dict[str, Any]] = Field(default_factory=list)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _script_iter: Iterator[Output] | None = PrivateAttr(default=None)

    @property
    def _llm_type(self) -> str:
        return "medmis-scripted"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.model_name}

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        schemas = [t if isinstance(t, dict) and "function" in t else convert_to_openai_tool(t) for t in tools]
        return self.bind(tools=schemas, **kwargs)

    def _next(
        self,
        messages: list[BaseMessage],
        tools: list[dict[str, Any]],
        structured_output: dict[str, Any] | None = None,
    ) -> Output:
        with self._lock:
            call: dict[str, Any] = {"messages": list(messages), "tools": tools}
            if structured_output is not None:
                call["structured_output"] = structured_output
            self.calls.append(call)
            script = self.outputs
            if callable(script) and not isinstance(script, (list, tuple)):
                return script(messages, tools)
            if self._script_iter is None:
                self._script_iter = iter(script) if isinstance(script, (list, tuple)) else script
            try:
                return next(self._script_iter)  # type: ignore[arg-type]
            except StopIteration:
                raise IndexError(f"scripted model ran out of outputs after {len(self.calls) - 1} calls") from None

    def _respond(self, messages: list[BaseMessage], kwargs: dict[str, Any]) -> ChatResult:
        out = self._next(messages, list(kwargs.get("tools") or []), kwargs.get("structured_output"))
        if isinstance(out, BaseException):
            raise out
        reply = out.model_copy(deep=True) if isinstance(out, AIMessage) else AIMessage(content=str(out))
        reply = with_usage(reply, messages)
        if kwargs.get("logprobs") is True and "logprobs" not in reply.response_metadata:
            reply.response_metadata["logprobs"] = {
                "content": [{"token": t, "logprob": 0.0} for t in message_text(reply).split()]
            }
        return ChatResult(generations=[ChatGeneration(message=reply)])

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return self._respond(messages, kwargs)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return self._respond(messages, kwargs)


def cycle(outputs: Sequence[Output]) -> Iterator[Output]:
    """A script that repeats forever (handy for concurrency tests)."""
    return itertools.cycle(outputs)
