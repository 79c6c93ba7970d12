"""OpenAI and OpenAI-compatible servers (vLLM, SGLang, Ollama, llama.cpp) via ``ChatOpenAI``.

``OpenAIChat`` is a thin subclass of ``langchain_openai.ChatOpenAI`` that:

* sends its requests through the toolkit's bounded ``httpx2`` clients (:mod:`._http`): the
  SDK's own client family and transport, plus the request deadline and the reply cap.
  ``httpx2``'s connection pool skips the socket probe of connections already reserved by a
  request, which legacy ``httpx`` runs on every idle connection at every request and every
  reply: 2.5-3.5 CPU-s less over the bench's 1,224 calls (see docs/performance.md);
* never retries inside the SDK (``max_retries=0``): the run's
  :class:`~medmis.agents._retry.RetryPolicy` retries in ``DefenderContext.generate``;
* always speaks Chat Completions (``use_responses_api=False``) because that is the one
  endpoint every compatible server implements;
* sends ``max_tokens`` instead of ``max_completion_tokens`` to non-OpenAI servers, since
  several compatible servers only know the older name, while api.openai.com rejects
  ``max_tokens`` for reasoning models;
* turns a 2xx body that cannot be read as a chat completion (non-JSON, no ``choices``, an
  ``error`` object) into :class:`MalformedResponseError`, which ``classify`` retries, and a
  ``content_filter`` finish into :class:`BlockedResponseError`, which it does not;
* maps a bound ``structured_output={"name", "schema"}`` argument (see
  :mod:`._capabilities`) onto ``response_format`` as the reference evaluation does:
  ``{"type": "json_object"}`` for OpenAI's own API, ``{"type": "json_schema", ...}`` with the
  schema for compatible servers (the reference's SGLang path);
* reports ``provider``, ``model`` and ``base_url`` in ``_identifying_params`` (the
  record/replay cache key) and leaves timeouts and retry counts out.

Usage comes from the response's ``usage`` block (non-streaming); ``output_tokens`` is
``completion_tokens``, which already includes OpenAI's reasoning tokens.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from typing import Any, ClassVar

import openai
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from ._capabilities import (
    CALL_SETTINGS_KWARG,
    STRUCTURED_OUTPUT_KWARG,
    StructuredOutput,
    apply_openai_settings,
    check_structured_output,
)
from ._errors import (
    BlockedResponseError,
    MalformedResponseError,
    MissingKeyError,
    ModelConfigError,
    raise_size_cap,
)
from ._http import httpx2_async_client, httpx2_sync_client
from ._options import OPENAI_BASE_URL_VARIABLE, is_openai_host, is_openai_reasoning_model
from ._registry import ModelOptions

KEY_VARIABLE = "OPENAI_API_KEY"
BASE_URL_VARIABLE = OPENAI_BASE_URL_VARIABLE
DEFAULT_BASE_URL = "https://api.openai.com/v1"
# ``none`` (GPT-5.1 and later; the paper's GPT-5.4 setting) … ``xhigh``; Claude's ``max`` is not one.
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
# vLLM, SGLang, Ollama and llama.cpp accept any key, but the SDK refuses to send none.
PLACEHOLDER_KEY = "EMPTY"

# What ``ChatOpenAI`` raises while reading a body that is not a chat completion.
_PARSE_ERRORS = (KeyError, TypeError, ValueError, AttributeError, IndexError)
# What the SDK raises earlier, while decoding a 2xx body labelled JSON (nothing in request
# building decodes JSON, so these can only come from the response).
_BODY_ERRORS = (json.JSONDecodeError, openai.APIResponseValidationError)


def response_format(structured_output: StructuredOutput, base_url: str | None) -> dict[str, Any]:
    """The chat-completions ``response_format`` for a structured-output request."""
    check_structured_output(structured_output)
    strict = structured_output.get("strict") is True
    # The reference evaluation asks OpenAI only for a JSON object; a request marked strict
    # (all fields required, no extra keys, e.g. the generator's bundles) gets the schema enforced.
    if is_openai_host(base_url) and not strict:
        return {"type": "json_object"}
    spec: dict[str, Any] = {"name": structured_output["name"], "schema": structured_output["schema"]}
    if strict:
        spec["strict"] = True
    return {"type": "json_schema", "json_schema": spec}


class OpenAIChat(ChatOpenAI):
    """``ChatOpenAI`` with the toolkit's error mapping and cache identity."""

    provider_family: ClassVar[str] = "openai"
    accepts_structured_output: ClassVar[bool] = True
    accepts_call_settings: ClassVar[bool] = True

    @property
    def _llm_type(self) -> str:
        return "medmis-openai"

    def _completion_tokens(self) -> bool:
        """Whether the cap goes out as ``max_completion_tokens`` (OpenAI's API, and an OpenAI
        reasoning model anywhere: it refuses ``max_tokens``) rather than ``max_tokens`` (the
        reference's SGLang path)."""
        return is_openai_host(self.openai_api_base) or is_openai_reasoning_model(self.model_name)

    def _legacy_token_limit(self, params: dict[str, Any]) -> dict[str, Any]:
        if not self._completion_tokens() and "max_completion_tokens" in params:
            params["max_tokens"] = params.pop("max_completion_tokens")
        return params

    @property
    def _default_params(self) -> dict[str, Any]:
        return self._legacy_token_limit(super()._default_params)

    def _get_request_payload(
        self, input_: LanguageModelInput, *, stop: list[str] | None = None, **kwargs: Any
    ) -> dict:
        structured = kwargs.pop(STRUCTURED_OUTPUT_KWARG, None)
        settings = kwargs.pop(CALL_SETTINGS_KWARG, None)
        # ChatOpenAI renames max_tokens once more while building the payload
        payload = self._legacy_token_limit(super()._get_request_payload(input_, stop=stop, **kwargs))
        if structured is not None:
            payload["response_format"] = response_format(structured, self.openai_api_base)
        if settings:
            apply_openai_settings(payload, settings, openai_host=self._completion_tokens())
        return _format_in_extra_body(payload)

    @property
    def _identifying_params(self) -> dict[str, Any]:
        params = {k: v for k, v in self._default_params.items() if k not in ("model", "stream")}
        return {
            "provider": "openai",
            "model": self.model_name,
            "base_url": self.openai_api_base or DEFAULT_BASE_URL,
            **params,
        }

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        with _mapped_errors():
            return _checked(super()._generate(messages, stop, run_manager, **kwargs))

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        with _mapped_errors():
            return _checked(await super()._agenerate(messages, stop, run_manager, **kwargs))

    def completion_result(self, completion: openai.BaseModel) -> ChatResult:
        """A chat completion that came without a call (a batch job's result line), read as this
        model reads its replies.

        The one use of ``ChatOpenAI``'s private ``_create_chat_result`` (the batch shim, see
        ``medmis.experiments.harness._batch_model``): the completion's JSON must become the
        message an interactive call would have made, and only that parser makes it.
        """
        with _mapped_errors():
            return _checked(self._create_chat_result(completion))


def _format_in_extra_body(payload: dict[str, Any]) -> dict[str, Any]:
    """The payload with a JSON ``response_format`` sent through the SDK's ``extra_body``.

    ``ChatOpenAI`` sends every payload that holds a ``response_format`` through the SDK's
    ``chat.completions.parse`` helper, which exists to turn the reply into a pydantic class
    given as the format. A format given as JSON (ours always is) gives it nothing to parse,
    but it still type-walks the whole body against both the streaming and the non-streaming
    parameter types and builds a ``ParsedChatCompletion``: about twice ``create()``'s request
    work on every structured call. In ``extra_body`` the same key and value go out in the same
    JSON body through ``create()`` (the SDK merges ``extra_body`` into the body as it is;
    a ``response_format`` the user put in ``extra`` still wins, as it did before).
    """
    fmt = payload.get("response_format")
    if not isinstance(fmt, dict):
        return payload  # absent, or a pydantic class LangChain's parse path is for
    payload = dict(payload)
    payload["extra_body"] = {"response_format": payload.pop("response_format"), **(payload.get("extra_body") or {})}
    return payload


@contextlib.contextmanager
def _mapped_errors() -> Iterator[None]:
    """A body the SDK or ``ChatOpenAI`` cannot read as a chat completion is a
    :class:`MalformedResponseError`; a reply over the size cap says so."""
    try:
        yield
    except MalformedResponseError:
        raise
    except (*_BODY_ERRORS, *_PARSE_ERRORS) as exc:
        raise MalformedResponseError(f"openai response could not be parsed: {exc}"[:300]) from exc
    except openai.APIConnectionError as exc:
        raise_size_cap(exc)
        raise


def _checked(result: ChatResult) -> ChatResult:
    """``result``, unless it holds no answer or the provider's filter stopped the answer."""
    if not result.generations:
        raise MalformedResponseError("openai response has no choices")
    info = result.generations[0].generation_info or {}
    if info.get("finish_reason") == "content_filter":
        raise BlockedResponseError("openai stopped the answer: finish_reason=content_filter")
    return result


def resolve_key(base_url: str | None) -> str:
    """The API key to send: ``OPENAI_API_KEY``, or a placeholder for a non-OpenAI server.

    Raises:
        MissingKeyError: When no key is set and the base URL is OpenAI's.
    """
    key = os.environ.get(KEY_VARIABLE, "").strip()
    if key:
        return key
    if not is_openai_host(base_url):
        return PLACEHOLDER_KEY
    raise MissingKeyError("openai", (KEY_VARIABLE,))


def build(model_id: str, opts: ModelOptions) -> BaseChatModel:
    """Build the chat model for ``openai/<model_id>``.

    Args:
        model_id: The model name the server expects (``gpt-4.1-mini``, or the name a vLLM /
            Ollama server was started with).
        opts: Shared generation options. ``thinking_level`` and ``thinking_budget`` are
            ignored (OpenAI uses ``reasoning_effort``: ``none``, ``minimal``, ``low``,
            ``medium``, ``high``, ``xhigh``, sent only when set, ``none`` included);
            ``extra`` is sent verbatim in the
            request body (``extra_body``), e.g. ``top_k`` or ``chat_template_kwargs`` for
            vLLM.

    Returns:
        An :class:`OpenAIChat`.

    Raises:
        MissingKeyError: When ``OPENAI_API_KEY`` is unset and no non-OpenAI base URL is
            configured (``opts.base_url`` or ``OPENAI_BASE_URL``).
        ModelConfigError: For a reasoning effort OpenAI does not have (``max``).
    """
    if opts.reasoning_effort is not None and opts.reasoning_effort not in EFFORTS:
        raise ModelConfigError(
            f"openai: reasoning effort {opts.reasoning_effort!r} is not an OpenAI effort "
            f"(use {', '.join(EFFORTS)})"
        )
    base_url = opts.base_url or os.environ.get(BASE_URL_VARIABLE) or None
    key = resolve_key(base_url)
    kwargs: dict[str, Any] = {}
    if opts.reasoning_effort is not None:
        kwargs["reasoning_effort"] = opts.reasoning_effort
    if opts.extra:
        kwargs["extra_body"] = dict(opts.extra)
    return OpenAIChat(
        model=model_id,
        api_key=SecretStr(key),
        base_url=base_url or DEFAULT_BASE_URL,
        temperature=opts.temperature,
        max_completion_tokens=opts.max_output_tokens,
        seed=opts.seed,
        timeout=opts.timeout_s,
        max_retries=0,
        # The SDK's own httpx2 clients, bounded (_http): the request deadline and the decoded
        # reply cap hold whatever the transport.
        http_client=httpx2_sync_client(opts.timeout_s, max_response_bytes=opts.max_response_bytes),
        http_async_client=httpx2_async_client(opts.timeout_s, max_response_bytes=opts.max_response_bytes),
        use_responses_api=False,
        stream_usage=False,
        **kwargs,
    )
