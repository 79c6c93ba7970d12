"""Gemini as a LangChain chat model, written directly over the google-genai SDK.

We do not use langchain-google-genai because this toolkit needs control over four things
that wrapper hides:

* **Transport.** Every call goes through the toolkit's bounded httpx clients (:mod:`._http`:
  the request deadline and the decoded reply cap), handed over through the public
  ``HttpOptions.httpx_client`` / ``httpx_async_client``, so respx-mocked tests and the
  record/replay layer see every request. google-genai would otherwise use its own aiohttp
  session for async calls whenever aiohttp is importable, which nothing bounds.
* **Retries.** The SDK's own retries are disabled (``HttpRetryOptions(attempts=1)``); the
  run's :class:`~medmis.agents._retry.RetryPolicy` retries in ``DefenderContext.generate``, so
  attempts and deadlines are counted once.
* **Safety settings.** Medical questions about overdoses, self-harm or toxicology trip the
  default filters; every harm category is set to ``OFF``.
* **Structured output.** A bound ``structured_output={"name", "schema"}`` argument (see
  :mod:`._capabilities`) becomes ``response_mime_type="application/json"`` plus
  ``response_schema``, as the reference evaluation asks Gemini for its JSON answer; the
  SDK's parsed object is kept in ``additional_kwargs["parsed"]``.
* **Log-probabilities.** A bound ``logprobs=True`` (see :mod:`._capabilities`) sets
  ``response_logprobs=True``; the chosen tokens' log-probabilities Gemini returns in
  ``logprobsResult.chosenCandidates`` come back in ``response_metadata["logprobs"]``.
* **Errors.** A blocked prompt, a blocking finish reason or an empty candidate list raises
  :class:`BlockedResponseError` (not retried); an unparseable body, a malformed function
  call or a candidate with no parts :class:`MalformedResponseError` (retried). Neither is
  ever returned as an answer.

Usage accounting: ``input_tokens`` is ``prompt_token_count`` (plus
``tool_use_prompt_token_count``); ``output_tokens`` is ``candidates_token_count`` **plus**
``thoughts_token_count``, because Google bills thinking tokens at the output rate and cost
figures must match the invoice. The thinking share is kept in
``output_token_details["reasoning"]``.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Literal

import pydantic
from google import genai
from google.genai import errors as genai_errors
from google.genai import types
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
)
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from pydantic import ConfigDict, Field, PrivateAttr, SecretStr

from ._capabilities import (
    CALL_SETTINGS_KWARG,
    LOGPROBS_KWARG,
    STRUCTURED_OUTPUT_KWARG,
    CallSettings,
    StructuredOutput,
    check_call_settings,
    check_structured_output,
)
from ._errors import MalformedResponseError, MissingKeyError
from ._gemini_wire import (
    _tool_config,
    function_declaration,
    parse_response,
    to_gemini_contents,
    usage_from_gemini,
)
from ._http import async_client, sync_client
from ._registry import ModelOptions

# Re-exported: the wire conversions have always been importable from here.
__all__ = [
    "GeminiChat",
    "api_key_from_env",
    "build",
    "function_declaration",
    "parse_response",
    "to_gemini_contents",
    "usage_from_gemini",
]

KEY_VARIABLES = ("GOOGLE_API_KEY", "GEMINI_API_KEY")
BASE_URL_VARIABLE = "GOOGLE_GEMINI_BASE_URL"
DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com/"

# The categories the Gemini Developer API accepts; the image / jailbreak categories are
# Vertex-only and would be rejected with a 400.
SAFETY_CATEGORIES = (
    types.HarmCategory.HARM_CATEGORY_HARASSMENT,
    types.HarmCategory.HARM_CATEGORY_HATE_SPEECH,
    types.HarmCategory.HARM_CATEGORY_SEXUALLY_EXPLICIT,
    types.HarmCategory.HARM_CATEGORY_DANGEROUS_CONTENT,
)
SAFETY_THRESHOLD = types.HarmBlockThreshold.OFF

ThinkingLevel = Literal["minimal", "low", "medium", "high"]


class GeminiChat(BaseChatModel):
    """A Gemini chat model over google-genai (httpx transport, no SDK retries, safety off).

    Build it with :func:`build` (``load_model("google/<id>")``) rather than directly, so the
    key and base URL are resolved from the environment the documented way.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    provider_family: ClassVar[str] = "google"
    accepts_structured_output: ClassVar[bool] = True
    accepts_call_settings: ClassVar[bool] = True
    accepts_logprobs: ClassVar[bool] = True

    model: str
    api_key: SecretStr = Field(repr=False)
    base_url: str | None = None
    temperature: float | None = 0.0
    max_output_tokens: int | None = None
    seed: int | None = None
    thinking_level: ThinkingLevel | None = None
    timeout_s: float = 120.0
    max_response_bytes: int | None = 8 * 1024 * 1024
    extra: dict[str, Any] = Field(default_factory=dict)
    """Further ``GenerateContentConfig`` fields (e.g. ``top_p``); they override the defaults."""

    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _sync_client: genai.Client | None = PrivateAttr(default=None)
    # an httpx.AsyncClient's connection pool belongs to one event loop, so one client per loop
    _async_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, genai.Client] = PrivateAttr(
        default_factory=weakref.WeakKeyDictionary
    )

    @property
    def _llm_type(self) -> str:
        return "medmis-google-genai"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        # Everything that changes the answer, nothing that does not (timeouts, retries): the
        # record/replay cache keys on this.
        return {
            "provider": "google",
            "model": self.model,
            "base_url": self.base_url or DEFAULT_BASE_URL,
            "temperature": self.temperature,
            "max_output_tokens": self.max_output_tokens,
            "seed": self.seed,
            "thinking_level": self.thinking_level,
            "safety_threshold": SAFETY_THRESHOLD.value,
            "extra": dict(sorted(self.extra.items())),
        }

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind tools as Gemini function declarations.

        Args:
            tools: OpenAI-style function dicts (``tools.tool_schemas()``), pydantic classes,
                functions or LangChain tools.
            tool_choice: ``"auto"`` (default), ``"any"``/``"required"``, ``"none"`` or the
                name of one tool that must be called.
            **kwargs: Further call arguments bound with the tools.

        Returns:
            A runnable that sends the declarations with every call.
        """
        decls = [function_declaration(t) for t in tools]
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        return self.bind(tools=decls, **kwargs)

    # -- clients ---------------------------------------------------------------------------

    def _new_client(self) -> genai.Client:
        options = types.HttpOptions(
            base_url=self.base_url,
            timeout=int(self.timeout_s * 1000),  # the SDK takes milliseconds
            retry_options=types.HttpRetryOptions(attempts=1),
            httpx_client=sync_client(self.timeout_s, max_response_bytes=self.max_response_bytes),
            httpx_async_client=async_client(self.timeout_s, max_response_bytes=self.max_response_bytes),
        )
        return genai.Client(api_key=self.api_key.get_secret_value(), http_options=options)

    def client(self) -> genai.Client:
        """The SDK client for the current event loop (or for sync calls outside any loop)."""
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        with self._lock:
            if loop is None:
                if self._sync_client is None:
                    self._sync_client = self._new_client()
                return self._sync_client
            client = self._async_clients.get(loop)
            if client is None:
                client = self._new_client()
                self._async_clients[loop] = client
            return client

    # -- requests --------------------------------------------------------------------------

    def request_config(
        self,
        system: str | None,
        tools: Sequence[dict[str, Any]] | None = None,
        tool_choice: Any = None,
        stop: list[str] | None = None,
        structured_output: StructuredOutput | None = None,
        settings: CallSettings | None = None,
        logprobs: bool = False,
    ) -> types.GenerateContentConfig:
        """The ``GenerateContentConfig`` sent with a call (``settings``: per-call temperature,
        output cap and JSON mode, see ``_capabilities``; ``logprobs``: ask for the chosen
        tokens' log-probabilities)."""
        fields: dict[str, Any] = {
            "system_instruction": system,
            "stop_sequences": stop or None,
            "temperature": self.temperature,
            "max_output_tokens": self.max_output_tokens,
            "seed": self.seed,
            "safety_settings": [
                types.SafetySetting(category=c, threshold=SAFETY_THRESHOLD) for c in SAFETY_CATEGORIES
            ],
            # tools are executed by our graphs, never by the SDK
            "automatic_function_calling": types.AutomaticFunctionCallingConfig(disable=True),
        }
        if self.thinking_level is not None:
            fields["thinking_config"] = types.ThinkingConfig(
                thinking_level=types.ThinkingLevel(self.thinking_level.upper())
            )
        if tools:
            decls = [types.FunctionDeclaration(**d) for d in tools]
            fields["tools"] = [types.Tool(function_declarations=decls)]
            fields["tool_config"] = _tool_config(tool_choice)
        if structured_output is not None:
            check_structured_output(structured_output)
            fields["response_mime_type"] = "application/json"
            fields["response_schema"] = structured_output["schema"]
        settings = check_call_settings(settings or {})
        for name in ("temperature", "max_output_tokens"):
            if settings.get(name) is not None:
                fields[name] = settings[name]
        if settings.get("json_mode") and structured_output is None:
            fields["response_mime_type"] = "application/json"
        if logprobs:
            fields["response_logprobs"] = True
        fields.update(self.extra)
        return types.GenerateContentConfig(**fields)

    def _prepare(
        self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any]
    ) -> dict[str, Any]:
        unknown = set(kwargs) - {"tools", "tool_choice", STRUCTURED_OUTPUT_KWARG, CALL_SETTINGS_KWARG,
                                 LOGPROBS_KWARG}
        if unknown:
            raise TypeError(f"unsupported call arguments for Gemini: {sorted(unknown)}")
        system, contents = to_gemini_contents(messages)
        config = self.request_config(
            system,
            kwargs.get("tools"),
            kwargs.get("tool_choice"),
            stop,
            structured_output=kwargs.get(STRUCTURED_OUTPUT_KWARG),
            settings=kwargs.get(CALL_SETTINGS_KWARG),
            logprobs=kwargs.get(LOGPROBS_KWARG) is True,
        )
        return {"model": self.model, "contents": contents, "config": config}

    def _result(self, response: types.GenerateContentResponse) -> ChatResult:
        message = parse_response(response, self.model)
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        request = self._prepare(messages, stop, kwargs)
        try:
            response = self.client().models.generate_content(**request)
        except _PARSE_ERRORS as exc:
            raise MalformedResponseError(f"gemini response could not be parsed: {exc}"[:300]) from exc
        return self._result(response)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        request = self._prepare(messages, stop, kwargs)
        try:
            response = await self.client().aio.models.generate_content(**request)
        except _PARSE_ERRORS as exc:
            raise MalformedResponseError(f"gemini response could not be parsed: {exc}"[:300]) from exc
        return self._result(response)


# Raised by the SDK while decoding a 2xx body (invalid JSON, or JSON of the wrong shape).
_PARSE_ERRORS = (json.JSONDecodeError, genai_errors.UnknownApiResponseError, pydantic.ValidationError)


def api_key_from_env() -> str:
    """The Gemini key from ``GOOGLE_API_KEY`` or ``GEMINI_API_KEY`` (that order).

    Raises:
        MissingKeyError: When neither variable is set (or both are empty).
    """
    for name in KEY_VARIABLES:
        value = os.environ.get(name, "").strip()
        if value:
            return value
    raise MissingKeyError("google", KEY_VARIABLES)


def build(model_id: str, opts: ModelOptions) -> BaseChatModel:
    """Build the Gemini model for ``google/<model_id>``.

    Args:
        model_id: A Gemini model id such as ``gemini-2.5-flash``.
        opts: Shared generation options; ``reasoning_effort`` is ignored (Gemini uses
            ``thinking_level``) and ``extra`` holds further ``GenerateContentConfig`` fields.

    Returns:
        A :class:`GeminiChat`.

    Raises:
        MissingKeyError: When no key is set.
    """
    key = api_key_from_env()
    base_url = opts.base_url or os.environ.get(BASE_URL_VARIABLE) or None
    if opts.extra:
        types.GenerateContentConfig(**opts.extra)  # fail at start-up, not on the first call
    return GeminiChat(
        model=model_id,
        api_key=SecretStr(key),
        base_url=base_url,
        temperature=opts.temperature,
        max_output_tokens=opts.max_output_tokens,
        seed=opts.seed,
        thinking_level=opts.thinking_level,
        timeout_s=opts.timeout_s,
        max_response_bytes=opts.max_response_bytes,
        extra=dict(opts.extra),
    )
