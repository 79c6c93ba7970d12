"""Gemini's wire shapes: LangChain messages and tools to google-genai ``Content`` and function
declarations, and a ``GenerateContentResponse`` back to an ``AIMessage`` (or a raised error).

Kept apart from :mod:`._google`, which owns the chat model, its clients and its requests.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any

import pydantic
from google.genai import types
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
)
from langchain_core.messages.ai import InputTokenDetails, OutputTokenDetails, UsageMetadata
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from ._errors import BlockedResponseError, MalformedResponseError
from ._mock import content_text

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
    metadata: dict[str, Any] = {
        "model_provider": "google",
        "model_name": response.model_version or model,
        "finish_reason": reason,
        "response_id": response.response_id,
    }
    chosen = candidate.logprobs_result.chosen_candidates if candidate.logprobs_result else None
    if chosen:
        # OpenAI's shape, so one reader serves every provider (``reply_logprobs``)
        metadata["logprobs"] = {
            "content": [{"token": c.token or "", "logprob": c.log_probability} for c in chosen]
        }
    return AIMessage(
        content=text,
        tool_calls=calls,
        additional_kwargs=extra,
        usage_metadata=usage_from_gemini(response.usage_metadata),
        response_metadata=metadata,
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
