"""Gemini as a LangChain chat model, written directly over the google-genai SDK.

We do not use langchain-google-genai because this toolkit needs control over four things
that wrapper hides:

* **Transport.** Every call goes through httpx (never aiohttp), so respx-mocked tests and the
  record/replay layer see every request. google-genai silently prefers aiohttp for async
  calls whenever aiohttp is importable; handing it our own ``httpx.AsyncClient`` through
  ``HttpOptions.httpx_async_client`` switches that off (see ``BaseApiClient._use_aiohttp``).
* **Retries.** The SDK's own retries are disabled (``HttpRetryOptions(attempts=1)``); the
  run's :class:`~medmis.agents._retry.RetryPolicy` retries in ``DefenderContext.generate``, so
  attempts and deadlines are counted once.
* **Safety settings.** Medical questions about overdoses, self-harm or toxicology trip the
  default filters; every harm category is set to ``OFF``.
* **Structured output.** A bound ``structured_output={"name", "schema"}`` argument (see
  :mod:`._capabilities`) becomes ``response_mime_type="application/json"`` plus
  ``response_schema``, as the reference evaluation asks Gemini for its JSON answer; the
  SDK's parsed object is kept in ``additional_kwargs["parsed"]``.
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
import base64
import hashlib
import json
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Literal

import httpx
import pydantic
from google import genai
from google.genai import errors as genai_errors
from google.genai import types
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
)
from langchain_core.messages.ai import InputTokenDetails, OutputTokenDetails, UsageMetadata
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict, Field, PrivateAttr, SecretStr

from ._capabilities import STRUCTURED_OUTPUT_KWARG, StructuredOutput, check_structured_output
from ._errors import BlockedResponseError, MalformedResponseError, MissingKeyError
from ._mock import content_text
from ._registry import HTTP_LIMITS, ModelOptions

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

# Finish reasons that carry a usable answer (MAX_TOKENS: a truncated answer is still graded
# by the extractor, which reports it as unparsed when no choice survives).
_OK_FINISH = frozenset({"STOP", "MAX_TOKENS", "FINISH_REASON_UNSPECIFIED"})
# The model produced something broken rather than refusing: worth another attempt.
_MALFORMED_FINISH = frozenset(
    {"MALFORMED_FUNCTION_CALL", "MALFORMED_RESPONSE", "UNEXPECTED_TOOL_CALL", "TOO_MANY_TOOL_CALLS"}
)
# Every other finish reason (SAFETY, RECITATION, BLOCKLIST, PROHIBITED_CONTENT, SPII, OTHER,
# LANGUAGE, and any the SDK adds later) is treated as a block: we never return an answer we
# cannot vouch for.

# Ids we mint for function calls the API left without one; never echoed back to the API.
_LOCAL_ID_PREFIX = "gcall_"

ThinkingLevel = Literal["minimal", "low", "medium", "high"]


def _enum_name(value: Any) -> str | None:
    if value is None:
        return None
    return str(getattr(value, "name", None) or getattr(value, "value", value))


def _call_id(index: int, name: str, args: dict[str, Any]) -> str:
    """A deterministic id, so a replayed trace is byte-identical to the recorded one."""
    blob = json.dumps([index, name, args], sort_keys=True, ensure_ascii=False, default=str)
    return _LOCAL_ID_PREFIX + hashlib.sha256(blob.encode()).hexdigest()[:16]


def function_declaration(tool: dict[str, Any] | type | Callable[..., Any] | BaseTool) -> dict[str, Any]:
    """Convert a tool (OpenAI-style dict, pydantic class, function or LangChain tool) into a
    Gemini function declaration, as a JSON-able dict.

    The JSON schema is passed through ``parameters_json_schema`` untouched, rather than
    translated into Gemini's restricted ``Schema`` type, so nothing is lost in conversion.
    """
    if isinstance(tool, dict) and isinstance(tool.get("function"), dict):
        fn = tool["function"]
    elif isinstance(tool, dict) and "name" in tool:
        fn = tool
    else:
        fn = convert_to_openai_tool(tool)["function"]
    decl: dict[str, Any] = {"name": fn["name"], "description": fn.get("description", "")}
    params = fn.get("parameters")
    if params and params.get("properties"):
        decl["parameters_json_schema"] = params
    return decl


def _tool_config(tool_choice: Any) -> types.ToolConfig | None:
    if tool_choice is None or tool_choice == "auto":
        return None
    mode = types.FunctionCallingConfigMode
    if tool_choice == "none" or tool_choice is False:
        return types.ToolConfig(function_calling_config=types.FunctionCallingConfig(mode=mode.NONE))
    if tool_choice in ("any", "required") or tool_choice is True:
        return types.ToolConfig(function_calling_config=types.FunctionCallingConfig(mode=mode.ANY))
    name = tool_choice
    if isinstance(tool_choice, dict):
        name = (tool_choice.get("function") or {}).get("name") or tool_choice.get("name")
    if not isinstance(name, str):
        raise ValueError(f"unsupported tool_choice {tool_choice!r}")
    return types.ToolConfig(
        function_calling_config=types.FunctionCallingConfig(mode=mode.ANY, allowed_function_names=[name])
    )


def to_gemini_contents(messages: Sequence[BaseMessage]) -> tuple[str | None, list[types.Content]]:
    """Split LangChain messages into a system instruction and Gemini ``contents``.

    System messages are joined into the system instruction; human and tool messages become
    ``user`` turns, AI messages ``model`` turns. A tool message becomes a
    ``function_response`` part named after the tool call it answers (Gemini matches
    responses by name); consecutive tool messages share one turn because Gemini expects the
    answers to parallel calls together.
    """
    system: list[str] = []
    contents: list[types.Content] = []
    call_names: dict[str, str] = {}
    for message in messages:
        if isinstance(message, SystemMessage):
            system.append(content_text(message.content))
        elif isinstance(message, HumanMessage):
            contents.append(types.Content(role="user", parts=[types.Part(text=content_text(message.content))]))
        elif isinstance(message, AIMessage):
            turn = _model_turn(message, call_names)
            if turn.parts:  # the API rejects an empty turn; dropping it loses nothing
                contents.append(turn)
        elif isinstance(message, ToolMessage):
            name = call_names.get(message.tool_call_id) or message.name
            if not name:
                raise ValueError(f"tool message {message.tool_call_id!r} answers no earlier tool call")
            key = "error" if message.status == "error" else "result"
            response = types.FunctionResponse(
                name=name,
                response={key: content_text(message.content)},
                id=None if message.tool_call_id.startswith(_LOCAL_ID_PREFIX) else message.tool_call_id,
            )
            part = types.Part(function_response=response)
            last = contents[-1] if contents else None
            if last is not None and last.parts and last.role == "user" and all(
                p.function_response is not None for p in last.parts
            ):
                last.parts.append(part)
            else:
                contents.append(types.Content(role="user", parts=[part]))
        else:
            raise ValueError(f"unsupported message type for Gemini: {type(message).__name__}")
    return ("\n\n".join(system) if system else None), contents


def _model_turn(message: AIMessage, call_names: dict[str, str]) -> types.Content:
    signatures: dict[str, str] = message.additional_kwargs.get("thought_signatures") or {}
    parts: list[types.Part] = []
    text = content_text(message.content)
    if text:
        text_sig = message.additional_kwargs.get("text_signature")
        parts.append(types.Part(text=text, thought_signature=base64.b64decode(text_sig) if text_sig else None))
    for call in message.tool_calls:
        call_id = call.get("id") or ""
        call_names[call_id] = call["name"]
        sig = signatures.get(call_id)
        parts.append(
            types.Part(
                function_call=types.FunctionCall(
                    name=call["name"],
                    args=call["args"],
                    id=None if not call_id or call_id.startswith(_LOCAL_ID_PREFIX) else call_id,
                ),
                # Gemini 3 rejects a follow-up turn whose function calls lost their signature.
                thought_signature=base64.b64decode(sig) if sig else None,
            )
        )
    return types.Content(role="model", parts=parts)


def usage_from_gemini(meta: types.GenerateContentResponseUsageMetadata | None) -> UsageMetadata | None:
    """Token usage in LangChain's shape; thinking tokens count as output (they are billed so)."""
    if meta is None:
        return None
    n_in = (meta.prompt_token_count or 0) + (meta.tool_use_prompt_token_count or 0)
    thoughts = meta.thoughts_token_count or 0
    n_out = (meta.candidates_token_count or 0) + thoughts
    usage = UsageMetadata(input_tokens=n_in, output_tokens=n_out, total_tokens=n_in + n_out)
    if meta.cached_content_token_count:
        usage["input_token_details"] = InputTokenDetails(cache_read=meta.cached_content_token_count)
    if thoughts:
        usage["output_token_details"] = OutputTokenDetails(reasoning=thoughts)
    return usage


def parse_response(response: types.GenerateContentResponse, model: str) -> AIMessage:
    """Turn a Gemini response into an ``AIMessage`` or raise when it carries no answer."""
    feedback = response.prompt_feedback
    if feedback is not None and feedback.block_reason is not None:
        detail = f" ({feedback.block_reason_message})" if feedback.block_reason_message else ""
        raise BlockedResponseError(f"gemini blocked the prompt: {_enum_name(feedback.block_reason)}{detail}")
    if not response.candidates:
        # A real "no candidates" answer still carries usage or ids; a body with none of the
        # documented fields (``[]``, ``{}``, an HTML page decoded as JSON) is not a refusal.
        if response.usage_metadata is None and not (response.model_version or response.response_id):
            raise MalformedResponseError("gemini response has none of the documented fields")
        raise BlockedResponseError("gemini returned no candidates")
    candidate = response.candidates[0]
    reason = _enum_name(candidate.finish_reason) or "FINISH_REASON_UNSPECIFIED"
    if reason in _MALFORMED_FINISH:
        raise MalformedResponseError(f"gemini finished with {reason}")
    if reason not in _OK_FINISH:
        raise BlockedResponseError(f"gemini stopped the answer: finish_reason={reason}")

    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[ToolCall] = []
    signatures: dict[str, str] = {}
    text_signature: str | None = None
    parts = (candidate.content.parts if candidate.content else None) or []
    for part in parts:
        sig = base64.b64encode(part.thought_signature).decode() if part.thought_signature else None
        if part.function_call is not None:
            fc = part.function_call
            name = fc.name or ""
            args = dict(fc.args or {})
            call_id = fc.id or _call_id(len(calls), name, args)
            calls.append(ToolCall(name=name, args=args, id=call_id, type="tool_call"))
            if sig:
                signatures[call_id] = sig
        elif part.text is not None:
            (thoughts if part.thought else texts).append(part.text)
            if sig and not part.thought:
                text_signature = text_signature or sig
    text = "".join(texts)
    if not text and not calls and reason != "MAX_TOKENS":
        # Gemini occasionally ends a turn with STOP and no parts; asking again usually works.
        raise MalformedResponseError(f"gemini returned an empty candidate (finish_reason={reason})")

    extra: dict[str, Any] = {}
    if signatures:
        extra["thought_signatures"] = signatures
    if text_signature:
        extra["text_signature"] = text_signature
    if thoughts:
        extra["thoughts"] = "".join(thoughts)
    parsed = _parsed(response)
    if parsed is not None:
        extra["parsed"] = parsed
    return AIMessage(
        content=text,
        tool_calls=calls,
        additional_kwargs=extra,
        usage_metadata=usage_from_gemini(response.usage_metadata),
        response_metadata={
            "model_provider": "google",
            "model_name": response.model_version or model,
            "finish_reason": reason,
            "response_id": response.response_id,
        },
    )


def _parsed(response: types.GenerateContentResponse) -> dict[str, Any] | None:
    """The SDK's parse of a structured reply (a JSON object), or None."""
    try:
        parsed = response.parsed
    except (ValueError, TypeError):  # a schema the SDK cannot parse into: the text still counts
        return None
    if isinstance(parsed, pydantic.BaseModel):
        parsed = parsed.model_dump(mode="json")
    return parsed if isinstance(parsed, dict) else None


class GeminiChat(BaseChatModel):
    """A Gemini chat model over google-genai (httpx transport, no SDK retries, safety off).

    Build it with :func:`build` (``load_model("google/<id>")``) rather than directly, so the
    key and base URL are resolved from the environment the documented way.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    provider_family: ClassVar[str] = "google"
    accepts_structured_output: ClassVar[bool] = True

    model: str
    api_key: SecretStr = Field(repr=False)
    base_url: str | None = None
    temperature: float | None = 0.0
    max_output_tokens: int | None = None
    seed: int | None = None
    thinking_level: ThinkingLevel | None = None
    timeout_s: float = 120.0
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
            httpx_client=httpx.Client(timeout=self.timeout_s, limits=httpx.Limits(**HTTP_LIMITS)),
            httpx_async_client=httpx.AsyncClient(
                timeout=self.timeout_s, limits=httpx.Limits(**HTTP_LIMITS)
            ),
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
    ) -> types.GenerateContentConfig:
        """The ``GenerateContentConfig`` sent with a call."""
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
        fields.update(self.extra)
        return types.GenerateContentConfig(**fields)

    def _prepare(
        self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any]
    ) -> dict[str, Any]:
        unknown = set(kwargs) - {"tools", "tool_choice", STRUCTURED_OUTPUT_KWARG}
        if unknown:
            raise TypeError(f"unsupported call arguments for Gemini: {sorted(unknown)}")
        system, contents = to_gemini_contents(messages)
        config = self.request_config(
            system,
            kwargs.get("tools"),
            kwargs.get("tool_choice"),
            stop,
            structured_output=kwargs.get(STRUCTURED_OUTPUT_KWARG),
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
        extra=dict(opts.extra),
    )
