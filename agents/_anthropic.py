"""Claude via ``langchain_anthropic.ChatAnthropic`` (Messages API).

``AnthropicChat`` is a thin subclass that:

* sends its requests through the toolkit's bounded ``httpx2`` clients (:mod:`._http`: the
  request deadline and the decoded reply cap on the SDK's own transport);
* never retries inside the SDK (``max_retries=0``): the run's
  :class:`~medmis.agents._retry.RetryPolicy` retries in ``DefenderContext.generate``;
* sends exactly the thinking it is given — a token budget (``{"type": "enabled",
  "budget_tokens": N}``), ``"adaptive"`` or ``0`` (``{"type": "disabled"}``) — and never one
  that langchain-anthropic would add from its model profiles, and Claude's effort as
  ``output_config.effort`` (``low`` … ``max``), as the reference evaluation does;
* handles a bound ``structured_output={"name", "schema"}`` argument (see
  :mod:`._capabilities`) in one of two documented ways, chosen with the model option
  ``structured_output``:

  - ``"prompt"`` (default): the request carries no output format. This is what the
    reference evaluation sends to Claude (``call_anthropic`` in AI-in-Health/MedMisBench
    ``medmisbench_no_harness_eval.ipynb``: the JSON instruction as the system message, no
    schema), so ``--prompt paper`` reproduces it; the extractor reads the JSON object from
    the reply's text blocks. Forced tool use with the reply schema is not used: the API
    refuses a forced ``tool_choice`` together with extended thinking, which the paper's Claude
    configurations enable, and it would change the request the reference sends.
  - ``"native"``: the schema goes out as ``output_config.format`` (``json_schema``, Claude's
    constrained decoding, compatible with thinking) and the decoded object is kept in
    ``additional_kwargs["parsed"]``, which the extractor reads first;

* turns ``stop_reason == "refusal"`` into :class:`BlockedResponseError` (not retried) and a
  2xx body that is not a message into :class:`MalformedResponseError` (retried);
* reports ``provider``, ``model``, ``base_url`` and every output-relevant setting in
  ``_identifying_params`` (the record/replay cache key), leaving timeouts and retries out.

Usage: ``input_tokens`` includes cache reads and writes (langchain-anthropic adds them);
``output_tokens`` is Anthropic's ``output_tokens``, which already includes thinking tokens
(billed as output).
"""

from __future__ import annotations

import json
import os
from functools import cached_property
from typing import Any, ClassVar, Literal

import anthropic
import pydantic
from langchain_anthropic import ChatAnthropic
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatResult
from pydantic import SecretStr

from ._capabilities import (
    CALL_SETTINGS_KWARG,
    STRUCTURED_OUTPUT_KWARG,
    StructuredOutput,
    check_call_settings,
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
from ._mock import content_text
from ._registry import ModelOptions

KEY_VARIABLE = "ANTHROPIC_API_KEY"
BASE_URL_VARIABLE = "ANTHROPIC_BASE_URL"
DEFAULT_BASE_URL = "https://api.anthropic.com"
EFFORTS = ("low", "medium", "high", "xhigh", "max")
MIN_THINKING_BUDGET = 1024  # the API's floor for budget_tokens

StructuredMode = Literal["prompt", "native"]

# Raised while decoding a 2xx body that is not a Messages API response.
_BODY_ERRORS = (json.JSONDecodeError, anthropic.APIResponseValidationError, pydantic.ValidationError)
_PARSE_ERRORS = (KeyError, TypeError, ValueError, AttributeError, IndexError)


def thinking_config(budget: int | str | None) -> dict[str, Any] | None:
    """The Messages API ``thinking`` object for a budget (None: send none).

    Raises:
        ModelConfigError: For a budget below the API's floor (other than 0) or an unknown word.
    """
    if budget is None:
        return None
    if budget == "adaptive":
        return {"type": "adaptive"}
    if isinstance(budget, int) and not isinstance(budget, bool):
        if budget == 0:
            return {"type": "disabled"}
        if budget >= MIN_THINKING_BUDGET:
            return {"type": "enabled", "budget_tokens": budget}
    raise ModelConfigError(
        f"anthropic: thinking budget must be 'adaptive', 0 (off) or at least "
        f"{MIN_THINKING_BUDGET} tokens, got {budget!r}"
    )


def output_format(structured_output: StructuredOutput) -> dict[str, Any]:
    """``output_config.format`` for a structured-output request (Claude's ``json_schema``).

    Claude's constrained decoding requires closed objects, so ``additionalProperties`` is
    set to false on the top-level object.
    """
    check_structured_output(structured_output)
    return {"type": "json_schema", "schema": {**structured_output["schema"], "additionalProperties": False}}


class AnthropicChat(ChatAnthropic):
    """``ChatAnthropic`` with the toolkit's transport, error mapping and cache identity."""

    provider_family: ClassVar[str] = "anthropic"
    accepts_structured_output: ClassVar[bool] = True
    accepts_call_settings: ClassVar[bool] = True

    structured_output_mode: StructuredMode = "prompt"
    thinking_setting: dict[str, Any] | None = None
    """The ``thinking`` object sent with every call (None: none is sent)."""
    http_timeout_s: float = 120.0
    max_response_bytes: int | None = 8 * 1024 * 1024

    @property
    def _llm_type(self) -> str:
        return "medmis-anthropic"

    @cached_property
    def _client(self) -> anthropic.Client:
        http = httpx2_sync_client(self.http_timeout_s, max_response_bytes=self.max_response_bytes)
        return anthropic.Client(**self._client_params, http_client=http)

    @cached_property
    def _async_client(self) -> anthropic.AsyncClient:
        http = httpx2_async_client(self.http_timeout_s, max_response_bytes=self.max_response_bytes)
        return anthropic.AsyncClient(**self._client_params, http_client=http)

    def _get_request_payload(
        self, input_: LanguageModelInput, *, stop: list[str] | None = None, **kwargs: Any
    ) -> dict:
        structured = kwargs.pop(STRUCTURED_OUTPUT_KWARG, None)
        settings = check_call_settings(kwargs.pop(CALL_SETTINGS_KWARG, None) or {})
        payload = super()._get_request_payload(input_, stop=stop, **kwargs)
        # only the thinking this model was built with, never one inferred from a model profile
        payload.pop("thinking", None)
        thinks = self.thinking_setting is not None and self.thinking_setting.get("type") != "disabled"
        if self.thinking_setting is not None:
            payload["thinking"] = dict(self.thinking_setting)
        # per-call settings (the reference harness's _chat_anthropic / _tools_anthropic): the cap,
        # and the temperature unless the model thinks (the API takes only 1 then); JSON mode
        # is not sent (the reference sends none to Claude)
        if settings.get("max_output_tokens") is not None:
            payload["max_tokens"] = settings["max_output_tokens"]
        if settings.get("temperature") is not None and not thinks:
            payload["temperature"] = settings["temperature"]
        if structured is not None and self.structured_output_mode == "native":
            payload.setdefault("output_config", {})["format"] = output_format(structured)
        elif structured is not None:
            check_structured_output(structured)  # prompt mode: validated, deliberately not sent
        return payload

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {
            "provider": "anthropic",
            "model": self.model,
            "base_url": self.anthropic_api_url or DEFAULT_BASE_URL,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "top_k": self.top_k,
            "top_p": self.top_p,
            "effort": self.reasoning_effort,
            "thinking": self.thinking_setting,
            "structured_output": self.structured_output_mode,
            "model_kwargs": dict(sorted(self.model_kwargs.items())),
        }

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        native = kwargs.get(STRUCTURED_OUTPUT_KWARG) is not None and self.structured_output_mode == "native"
        try:
            result = super()._generate(messages, stop, run_manager, **kwargs)
        except _BODY_ERRORS as exc:
            raise MalformedResponseError(f"anthropic response could not be parsed: {exc}"[:300]) from exc
        except anthropic.APIConnectionError as exc:
            raise_size_cap(exc)
            raise
        return _with_parsed(result) if native else result

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        native = kwargs.get(STRUCTURED_OUTPUT_KWARG) is not None and self.structured_output_mode == "native"
        try:
            result = await super()._agenerate(messages, stop, run_manager, **kwargs)
        except _BODY_ERRORS as exc:
            raise MalformedResponseError(f"anthropic response could not be parsed: {exc}"[:300]) from exc
        except anthropic.APIConnectionError as exc:
            raise_size_cap(exc)
            raise
        return _with_parsed(result) if native else result

    @property
    def sdk_async_client(self) -> anthropic.AsyncClient:
        """The SDK client the model's calls go through (its key, base URL and transport);
        a batch run drives the Message Batches API with it."""
        return self._async_client

    def message_result(self, message: anthropic.types.Message, *, native: bool) -> ChatResult:
        """The chat result an interactive call gives for ``message`` (a batch line's reply):
        the same refusal check and parsing, and the decoded object of a ``native``
        structured reply."""
        result = self._format_output(message)
        return _with_parsed(result) if native else result

    def _format_output(self, data: Any, **kwargs: Any) -> ChatResult:
        # Both the sync and the async path parse through here.
        if not isinstance(data, anthropic.types.Message):
            raise MalformedResponseError(f"anthropic response is not a message: {str(data)[:200]}")
        if data.stop_reason == "refusal":
            raise BlockedResponseError("anthropic stopped the answer: stop_reason=refusal")
        try:
            return super()._format_output(data, **kwargs)
        except _PARSE_ERRORS as exc:
            raise MalformedResponseError(f"anthropic response could not be parsed: {exc}"[:300]) from exc


def _with_parsed(result: ChatResult) -> ChatResult:
    """Keep a native structured reply's decoded object in ``additional_kwargs["parsed"]``."""
    message = result.generations[0].message if result.generations else None
    if isinstance(message, AIMessage):
        try:
            parsed = json.loads(content_text(message.content))
        except json.JSONDecodeError:
            parsed = None  # the extractor reads the text and reports what it finds
        if isinstance(parsed, dict):
            message.additional_kwargs["parsed"] = parsed
    return result


def resolve_key() -> str:
    """The API key from ``ANTHROPIC_API_KEY``.

    Raises:
        MissingKeyError: When it is unset or empty.
    """
    key = os.environ.get(KEY_VARIABLE, "").strip()
    if not key:
        raise MissingKeyError("anthropic", (KEY_VARIABLE,))
    return key


def build(model_id: str, opts: ModelOptions) -> BaseChatModel:
    """Build the chat model for ``anthropic/<model_id>``.

    Args:
        model_id: A Claude model id such as ``claude-sonnet-4-6``.
        opts: Shared generation options. ``reasoning_effort`` is Claude's effort (``low``,
            ``medium``, ``high``, ``xhigh``, ``max``); ``thinking_budget`` is extended
            thinking (tokens, ``"adaptive"`` or ``0`` for off); ``thinking_level`` is
            ignored (Gemini's). ``extra``: ``structured_output`` (``"prompt"`` or
            ``"native"``, see the module docstring); any other key is sent verbatim in the
            request body (e.g. ``top_k``).

    Returns:
        An :class:`AnthropicChat`.

    Raises:
        MissingKeyError: When ``ANTHROPIC_API_KEY`` is unset.
        ModelConfigError: For an effort Claude does not have, a thinking budget the API
            refuses, or thinking with a temperature other than 1 (the API rejects it).
    """
    key = resolve_key()
    base_url = opts.base_url or os.environ.get(BASE_URL_VARIABLE) or None
    effort = opts.reasoning_effort
    if effort is not None and effort not in EFFORTS:
        raise ModelConfigError(
            f"anthropic: reasoning effort {effort!r} is not a Claude effort (use {', '.join(EFFORTS)})"
        )
    thinking = thinking_config(opts.thinking_budget)
    thinks = thinking is not None and thinking["type"] != "disabled"
    if thinks and opts.temperature is not None and opts.temperature != 1.0:
        raise ModelConfigError(
            f"anthropic: extended thinking requires temperature 1 (got {opts.temperature:g}); "
            "pass --temperature 1"
        )
    extra = dict(opts.extra)
    mode = extra.pop("structured_output", "prompt")
    if mode not in ("prompt", "native"):
        raise ModelConfigError(f"anthropic: structured_output must be 'prompt' or 'native', got {mode!r}")
    budget = thinking.get("budget_tokens") if thinking else None
    if budget is not None and opts.max_output_tokens is not None and opts.max_output_tokens <= budget:
        raise ModelConfigError(
            f"anthropic: max output tokens ({opts.max_output_tokens}) must exceed the thinking "
            f"budget ({budget})"
        )
    # sampling fields ChatAnthropic knows go to it by name (it warns about them in model_kwargs)
    kwargs: dict[str, Any] = {k: extra.pop(k) for k in ("top_k", "top_p") if k in extra}
    if opts.max_output_tokens is not None:
        kwargs["max_tokens"] = opts.max_output_tokens
    if effort is not None:
        kwargs["reasoning_effort"] = effort
    return AnthropicChat(
        model_name=model_id,
        api_key=SecretStr(key),
        base_url=base_url or DEFAULT_BASE_URL,
        temperature=opts.temperature,
        # an explicit timeout also keeps the SDK from refusing large non-streaming max_tokens
        timeout=opts.timeout_s,
        http_timeout_s=opts.timeout_s,
        max_response_bytes=opts.max_response_bytes,
        max_retries=0,
        streaming=False,
        thinking_setting=thinking,
        structured_output_mode=mode,
        model_kwargs=extra,
        **kwargs,
    )
