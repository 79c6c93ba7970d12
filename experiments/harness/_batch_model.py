"""The chat model a batch run puts in a defender's context.

Every call is rebuilt into the exact request the provider's interactive adapter would send
(built by that adapter: ``OpenAIChat._get_request_payload``, ``GeminiChat._prepare``,
``AnthropicChat._get_request_payload``) and looked up by its hash among the results of the
run's batch jobs so far. A known request is answered by the adapter's own response parser, so
the record, its usage and its extracted answer are what an interactive call with that reply
would have produced. An unknown request is *collected* into the case's list (see
:func:`collecting`) and the call raises :class:`RequestCollected`: the case waits for the next
round's batch job.

This module is the toolkit's one shim over other libraries' private names (allowed by name in
``tests/test_public_apis_only.py``): a batch job's result is a provider's JSON with no call
around it, and only the SDKs' private parsers turn that JSON into the objects their public
calls return (``ChatOpenAI._create_chat_result`` through ``OpenAIChat.completion_result``,
google-genai's ``GenerateContentResponse._from_response``, ``ChatAnthropic._format_output``
through ``AnthropicChat.message_result``). Re-implementing any of them would give batch
records a second reading of the same reply.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, ClassVar

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatResult
from langchain_core.runnables import Runnable
from pydantic import ConfigDict, Field, SkipValidation

from medmis.agents import accepts_logprobs, provider_family

BATCH_FAMILIES = ("openai", "google", "anthropic")
"""Provider families with a batch API this toolkit drives (OpenAI Batch API, Gemini batches,
Anthropic Message Batches)."""


class RequestCollected(Exception):
    """The call's request has no result yet: it is collected and the case waits for the next
    round's batch job (a defender that catches this changes nothing: a case that collected a
    request is run again next round, whatever it did after)."""


class BatchLineError(Exception):
    """A batch job gave no usable result for a request (a failed or expired line, a failed,
    expired or cancelled job, or a request that changed since it was submitted)."""


@dataclass(frozen=True)
class BatchRequest:
    """One request as a batch line carries it.

    ``body`` is the provider's request: for OpenAI the chat-completions body (what the SDK
    posts to ``/v1/chat/completions``); for Gemini ``{"model", "contents", "config"}`` as
    JSON, the ``InlinedRequest`` fields; for Anthropic the Messages body (what the SDK posts to
    ``/v1/messages``, a batch line's ``params``). ``custom_id`` is the SHA-256 of ``body``.
    """

    custom_id: str
    body: dict[str, Any]


@dataclass(frozen=True)
class LineResult:
    """A batch line's outcome: the provider's response (OpenAI: the chat-completion body;
    Gemini: a ``GenerateContentResponse``; Anthropic: a ``Message``) or an error text."""

    response: Any = None
    error: str | None = None


def _request_hash(body: Mapping[str, Any]) -> str:
    blob = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def sdk_body(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON body the openai or anthropic SDK sends for a LangChain request payload: the
    payload with ``extra_body`` merged in, as the SDK merges it (OpenAI's ``stream: false``
    stays: ``create`` sends it, and so does ``parse``, which ChatOpenAI calls when a
    ``response_format`` is set)."""
    body = dict(payload)
    body.update(body.pop("extra_body", None) or {})
    return body


def build_request(real: Any, messages: list[BaseMessage], stop: list[str] | None,
                  kwargs: dict[str, Any]) -> BatchRequest:
    """The batch request for one call of ``real`` (an ``OpenAIChat``, ``GeminiChat`` or
    ``AnthropicChat``), built by the adapter's own request code.

    Raises:
        ValueError: A provider without a batch API here, or an Anthropic request that needs
            beta features (sent through another endpoint than Message Batches).
    """
    family = provider_family(real)
    if family == "openai":
        body = sdk_body(real._get_request_payload(messages, stop=stop, **kwargs))
    elif family == "anthropic":
        payload = real._get_request_payload(messages, stop=stop, **kwargs)
        if payload.get("betas"):
            raise ValueError(f"anthropic beta features ({', '.join(payload['betas'])}) are not sent "
                             "through Message Batches here")
        body = sdk_body(payload)
    elif family == "google":
        request = real._prepare(messages, stop, dict(kwargs))
        body = {
            "model": request["model"],
            "contents": [c.model_dump(mode="json", exclude_none=True) for c in request["contents"]],
            "config": request["config"].model_dump(mode="json", exclude_none=True),
        }
    else:
        raise ValueError(f"no batch API for provider family {family!r} (batch: {', '.join(BATCH_FAMILIES)})")
    return BatchRequest(_request_hash(body), body)


def chat_result(real: Any, request: BatchRequest, response: Any) -> ChatResult:
    """Parse a batch line's response with the adapter's interactive parser."""
    if provider_family(real) == "openai":
        from openai.types.chat import ChatCompletion

        return real.completion_result(ChatCompletion.model_validate(response))  # type: ignore[no-any-return]
    if provider_family(real) == "anthropic":
        native = "format" in (request.body.get("output_config") or {})
        return real.message_result(response, native=native)  # type: ignore[no-any-return]
    config = request.body.get("config") or {}
    schema = config.get("response_schema", config.get("response_json_schema"))
    if schema is not None:
        # generate_content hands the request's schema to the response, which then parses the
        # JSON reply; a batch job's response has no request beside it, so do the same here
        from google.genai import types

        response = types.GenerateContentResponse._from_response(
            response=response.model_dump(exclude_none=True), kwargs={"config": {"response_schema": schema}}
        )
    return real._result(response)


@dataclass
class CaseCalls:
    """What one case's run asked of its batch models: the requests without a result yet
    (model spec, request) and those answered from earlier rounds' jobs (model spec, custom_id),
    in call order."""

    asked: list[tuple[str, BatchRequest]]
    answered: list[tuple[str, str]]


_calls: ContextVar[CaseCalls | None] = ContextVar("medmis_batch_calls", default=None)


@contextmanager
def collecting() -> Iterator[CaseCalls]:
    """Note the batch calls made inside (by the case's task and the tasks it starts)."""
    calls = CaseCalls([], [])
    token = _calls.set(calls)
    try:
        yield calls
    finally:
        _calls.reset(token)


def current_calls() -> CaseCalls | None:
    """The calls noted by the innermost :func:`collecting` (None outside one)."""
    return _calls.get()


class BatchChat(BaseChatModel):
    """Stands in for ``real`` (the interactive model of ``spec``) in a batch run: answers
    each call from ``results`` (custom_id -> :class:`LineResult`, the run's batch results so
    far) or, inside :func:`collecting`, collects its request and raises
    :class:`RequestCollected`."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    accepts_structured_output: ClassVar[bool] = True

    real: Any
    spec: str = ""
    # not validated: validation would copy the dict, and the run adds each round's results to it
    results: SkipValidation[dict[str, LineResult]] = Field(default_factory=dict)

    @property
    def provider_family(self) -> str:
        # prompts are placed for the real model's family (the paper preset differs for Gemini)
        return provider_family(self.real)

    @property
    def accepts_call_settings(self) -> bool:
        # per-call settings change the request exactly as they would the real model's
        return bool(getattr(self.real, "accepts_call_settings", False))

    @property
    def accepts_logprobs(self) -> bool:
        return accepts_logprobs(self.real)

    @property
    def _llm_type(self) -> str:
        return "medmis-batch"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        """Tools bound as the real model binds them: its call arguments (the tool schemas in
        its provider's format) reach :meth:`_agenerate`, which builds the request with them."""
        binding = self.real.bind_tools(tools, **kwargs)
        return self.bind(**binding.kwargs)

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        raise TypeError("a batch run's model answers asynchronous calls only")

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                         run_manager: AsyncCallbackManagerForLLMRun | None = None,
                         **kwargs: Any) -> ChatResult:
        request = build_request(self.real, messages, stop, kwargs)
        line = self.results.get(request.custom_id)
        calls = _calls.get()
        if line is None:
            if calls is None:
                raise BatchLineError("no batch result for this request (the request differs from the "
                                     "one submitted; rerun with --retry-errors to submit it)")
            calls.asked.append((self.spec, request))
            raise RequestCollected(request.custom_id)
        if calls is not None:
            calls.answered.append((self.spec, request.custom_id))
        if line.error is not None:
            raise BatchLineError(line.error)
        return chat_result(self.real, request, line.response)
