"""The Gemini adapter against the real google-genai client over respx-mocked httpx.

Response bodies follow the documented REST shape of ``models.generateContent``.
"""

from __future__ import annotations

import json
import os
import sys
import types as pytypes
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import respx
from conftest import clear_provider_env
from google.genai import _api_client
from google.genai import errors as genai_errors
from google.genai import types as gtypes
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from pydantic import BaseModel, Field

from medmis.agents import (
    BlockedResponseError,
    MalformedResponseError,
    MissingKeyError,
    ModelOptions,
    RetryPolicy,
    classify,
    load_model,
    retry_async,
)
from medmis.agents._google import GeminiChat, build, function_declaration, to_gemini_contents
from medmis.defenses import DefenderContext
from medmis.tools import tool_schemas

MODEL = "gemini-test"
URL = r"https://generativelanguage\.googleapis\.com/v1(beta)?/models/gemini-test:generateContent"


@pytest.fixture(autouse=True)
def fake_env(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.node.get_closest_marker("live"):
        return  # live tests need the real environment
    clear_provider_env(monkeypatch, "google")
    monkeypatch.setenv("GOOGLE_API_KEY", "test-key")


def text_body(text: str = "The answer is B.", **usage: int) -> dict[str, Any]:
    return {
        "candidates": [
            {
                "content": {"role": "model", "parts": [{"text": text}]},
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": {
            "promptTokenCount": 20,
            "candidatesTokenCount": 5,
            "totalTokenCount": 25,
            **usage,
        },
        "modelVersion": "gemini-test-001",
        "responseId": "resp-1",
    }


def error_body(code: int, status: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": f"{status.lower()} (test)", "status": status}}


def sent(route: respx.Route, index: int = -1) -> dict[str, Any]:
    return json.loads(route.calls[index].request.content)


def field(obj: dict[str, Any], camel: str) -> Any:
    """The SDK writes top-level keys in camelCase but nested ones as snake_case; the API
    accepts both (proto JSON), so tests accept both."""
    snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in camel)
    return obj[camel] if camel in obj else obj[snake]


def gemini(**opts: Any) -> GeminiChat:
    model = load_model(f"google/{MODEL}", ModelOptions(**opts))
    assert isinstance(model, GeminiChat)
    return model


QUESTION = [SystemMessage("You are a physician taking a board exam."), HumanMessage("Scurvy?")]


async def test_text_answer_with_usage(respx_mock: respx.MockRouter) -> None:
    body = text_body(thoughtsTokenCount=30, cachedContentTokenCount=4, totalTokenCount=55)
    route = respx_mock.post(url__regex=URL).mock(return_value=httpx.Response(200, json=body))

    reply = await gemini().ainvoke(QUESTION)

    assert reply.content == "The answer is B."
    assert reply.tool_calls == []
    # thinking tokens are billed as output, so they count as output
    assert reply.usage_metadata == {
        "input_tokens": 20,
        "output_tokens": 35,
        "total_tokens": 55,
        "input_token_details": {"cache_read": 4},
        "output_token_details": {"reasoning": 30},
    }
    assert reply.response_metadata["finish_reason"] == "STOP"
    assert reply.response_metadata["model_name"] == "gemini-test-001"
    assert route.calls.last.request.headers["x-goog-api-key"] == "test-key"


async def test_request_body(respx_mock: respx.MockRouter) -> None:
    route = respx_mock.post(url__regex=URL).mock(return_value=httpx.Response(200, json=text_body()))

    await gemini(thinking_level="high", max_output_tokens=256, seed=7).ainvoke(QUESTION)

    body = sent(route)
    assert body["systemInstruction"]["parts"] == [{"text": "You are a physician taking a board exam."}]
    assert body["contents"] == [{"role": "user", "parts": [{"text": "Scurvy?"}]}]
    config = body["generationConfig"]
    assert config["temperature"] == 0
    assert config["maxOutputTokens"] == 256
    assert config["seed"] == 7
    assert field(config["thinkingConfig"], "thinkingLevel") == "HIGH"
    safety = {s["category"]: s["threshold"] for s in body["safetySettings"]}
    assert safety == {
        "HARM_CATEGORY_HARASSMENT": "OFF",
        "HARM_CATEGORY_HATE_SPEECH": "OFF",
        "HARM_CATEGORY_SEXUALLY_EXPLICIT": "OFF",
        "HARM_CATEGORY_DANGEROUS_CONTENT": "OFF",
    }
    assert "tools" not in body


async def test_defaults_send_no_thinking_config(respx_mock: respx.MockRouter) -> None:
    route = respx_mock.post(url__regex=URL).mock(return_value=httpx.Response(200, json=text_body()))
    await gemini().ainvoke("Scurvy?")
    config = sent(route)["generationConfig"]
    assert "thinkingConfig" not in config
    assert config == {"temperature": 0.0}


async def test_async_calls_use_httpx_even_if_aiohttp_is_importable(
    respx_mock: respx.MockRouter, monkeypatch: pytest.MonkeyPatch
) -> None:
    def forbidden(name: str) -> Any:
        raise AssertionError(f"the SDK touched aiohttp.{name}")

    fake = pytypes.ModuleType("aiohttp")
    fake.__getattr__ = forbidden  # type: ignore[method-assign]
    monkeypatch.setitem(sys.modules, "aiohttp", fake)
    monkeypatch.setattr(_api_client, "has_aiohttp", True)
    # Control: under this patch, a client built with default options would pick aiohttp.
    default = SimpleNamespace(_http_options=gtypes.HttpOptions())
    assert _api_client.BaseApiClient._use_aiohttp(default)  # type: ignore[arg-type]

    route = respx_mock.post(url__regex=URL).mock(return_value=httpx.Response(200, json=text_body()))
    model = gemini()
    assert not model.client()._api_client._use_aiohttp()
    reply = await model.ainvoke(QUESTION)

    assert route.call_count == 1
    assert reply.content == "The answer is B."


def test_sync_path(respx_mock: respx.MockRouter) -> None:
    route = respx_mock.post(url__regex=URL).mock(return_value=httpx.Response(200, json=text_body()))
    reply = gemini().invoke(QUESTION)
    assert reply.content == "The answer is B."
    assert route.call_count == 1


async def test_429_with_retry_after_then_success(respx_mock: respx.MockRouter) -> None:
    route = respx_mock.post(url__regex=URL).mock(
        side_effect=[
            httpx.Response(429, json=error_body(429, "RESOURCE_EXHAUSTED"), headers={"Retry-After": "7"}),
            httpx.Response(200, json=text_body()),
        ]
    )
    sleeps: list[float] = []

    async def fake_sleep(delay: float) -> None:
        sleeps.append(delay)

    model = gemini()
    reply = await retry_async(
        lambda: model.ainvoke(QUESTION), RetryPolicy(max_retries=3, base_delay=0.01), sleep=fake_sleep
    )

    assert reply.content == "The answer is B."
    assert route.call_count == 2
    assert sleeps == [7.0]


async def test_sdk_does_not_retry_by_itself(respx_mock: respx.MockRouter) -> None:
    route = respx_mock.post(url__regex=URL).mock(
        return_value=httpx.Response(503, json=error_body(503, "UNAVAILABLE"))
    )
    with pytest.raises(genai_errors.ServerError):
        await gemini().ainvoke(QUESTION)
    assert route.call_count == 1


async def test_503_exhausted_is_recorded_as_an_error_step(respx_mock: respx.MockRouter) -> None:
    route = respx_mock.post(url__regex=URL).mock(
        return_value=httpx.Response(503, json=error_body(503, "UNAVAILABLE"))
    )
    ctx = DefenderContext(model=gemini(), retry=RetryPolicy(max_retries=2, base_delay=0))

    with pytest.raises(genai_errors.ServerError) as info:
        await ctx.generate(QUESTION)

    assert classify(info.value)[0] is True
    assert route.call_count == 3
    assert ctx.llm_calls == 1
    step = ctx.trace[-1]
    assert step.kind == "model"
    assert step.error is not None and step.error.startswith("ServerError")


@pytest.mark.parametrize(
    "response",
    [
        httpx.Response(200, text="<html>upstream proxy error</html>"),
        httpx.Response(200, text='{"candidates": [', headers={"content-type": "application/json"}),
        httpx.Response(200, json=[]),
    ],
    ids=["html", "truncated-json", "wrong-shape"],
)
async def test_malformed_body(respx_mock: respx.MockRouter, response: httpx.Response) -> None:
    respx_mock.post(url__regex=URL).mock(return_value=response)
    with pytest.raises(MalformedResponseError) as info:
        await gemini().ainvoke(QUESTION)
    assert classify(info.value) == (True, None)


async def test_empty_stop_candidate_is_malformed(respx_mock: respx.MockRouter) -> None:
    body = text_body()
    body["candidates"][0]["content"] = {"role": "model", "parts": []}
    respx_mock.post(url__regex=URL).mock(return_value=httpx.Response(200, json=body))
    with pytest.raises(MalformedResponseError):
        await gemini().ainvoke(QUESTION)


BLOCKED_PROMPT = {
    "promptFeedback": {
        "blockReason": "SAFETY",
        "safetyRatings": [{"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH"}],
    },
    "usageMetadata": {"promptTokenCount": 20, "totalTokenCount": 20},
    "modelVersion": "gemini-test-001",
}
BLOCKED_ANSWER = {
    "candidates": [
        {
            "finishReason": "SAFETY",
            "index": 0,
            "safetyRatings": [
                {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": True}
            ],
        }
    ],
    "usageMetadata": {"promptTokenCount": 20, "totalTokenCount": 20},
}
PARTIAL_THEN_PROHIBITED = {
    "candidates": [
        {
            "content": {"role": "model", "parts": [{"text": "The answer is"}]},
            "finishReason": "PROHIBITED_CONTENT",
        }
    ],
    "usageMetadata": {"promptTokenCount": 20, "candidatesTokenCount": 3, "totalTokenCount": 23},
}
NO_CANDIDATES = {"candidates": [], "usageMetadata": {"promptTokenCount": 20, "totalTokenCount": 20}}


@pytest.mark.parametrize(
    "body",
    [BLOCKED_PROMPT, BLOCKED_ANSWER, PARTIAL_THEN_PROHIBITED, NO_CANDIDATES],
    ids=["prompt-block", "safety-finish", "partial-text", "no-candidates"],
)
async def test_blocked_is_an_error_not_an_answer(respx_mock: respx.MockRouter, body: dict[str, Any]) -> None:
    route = respx_mock.post(url__regex=URL).mock(return_value=httpx.Response(200, json=body))
    ctx = DefenderContext(model=gemini(), retry=RetryPolicy(max_retries=3, base_delay=0))

    with pytest.raises(BlockedResponseError):
        await ctx.generate(QUESTION)

    assert route.call_count == 1  # a block is not retried
    assert ctx.trace[-1].error is not None and ctx.trace[-1].error.startswith("BlockedResponseError")


def function_call_body(call: dict[str, Any], signature: str | None = "c2lnbmF0dXJlLTE=") -> dict[str, Any]:
    part: dict[str, Any] = {"functionCall": call}
    if signature:
        part["thoughtSignature"] = signature
    return {
        "candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP"}],
        "usageMetadata": {"promptTokenCount": 50, "candidatesTokenCount": 10, "totalTokenCount": 60},
    }


async def test_tool_call_round_trip(respx_mock: respx.MockRouter) -> None:
    call = {"name": "search_web", "args": {"query": "scurvy vitamin deficiency"}}
    route = respx_mock.post(url__regex=URL).mock(
        side_effect=[
            httpx.Response(200, json=function_call_body(call)),
            httpx.Response(200, json=function_call_body(call)),
            httpx.Response(200, json=text_body("Vitamin C. Answer: B")),
        ]
    )
    model = gemini().bind_tools(tool_schemas())

    first = await model.ainvoke(QUESTION)
    again = await model.ainvoke(QUESTION)

    assert first.content == ""
    [tool_call] = first.tool_calls
    assert tool_call["name"] == "search_web"
    assert tool_call["args"] == {"query": "scurvy vitamin deficiency"}
    assert tool_call["id"] and tool_call["id"] == again.tool_calls[0]["id"]  # stable ids

    declarations = sent(route, 0)["tools"][0]["functionDeclarations"]
    assert [d["name"] for d in declarations] == ["search_web", "visit_web"]
    schema = field(declarations[0], "parametersJsonSchema")
    assert schema["properties"]["query"]["type"] == "string"
    assert schema["required"] == ["query"]

    result = ToolMessage(content="[1] Scurvy - vitamin C deficiency", tool_call_id=tool_call["id"])
    final = await model.ainvoke([*QUESTION, first, result])

    assert final.content == "Vitamin C. Answer: B"
    contents = sent(route)["contents"]
    assert [c["role"] for c in contents] == ["user", "model", "user"]
    model_part = contents[1]["parts"][0]
    assert field(model_part, "functionCall") == {"name": "search_web", "args": call["args"]}
    assert field(model_part, "thoughtSignature") == "c2lnbmF0dXJlLTE="  # Gemini 3 requires it back
    response = field(contents[2]["parts"][0], "functionResponse")
    assert response == {"name": "search_web", "response": {"result": "[1] Scurvy - vitamin C deficiency"}}


async def test_api_call_ids_are_kept_and_echoed(respx_mock: respx.MockRouter) -> None:
    call = {"id": "fc-42", "name": "visit_web", "args": {"url": "https://example.org/scurvy"}}
    route = respx_mock.post(url__regex=URL).mock(
        side_effect=[
            httpx.Response(200, json=function_call_body(call, signature=None)),
            httpx.Response(200, json=text_body()),
        ]
    )
    model = gemini().bind_tools(tool_schemas(), tool_choice="visit_web")

    first = await model.ainvoke(QUESTION)
    assert first.tool_calls[0]["id"] == "fc-42"
    await model.ainvoke([*QUESTION, first, ToolMessage("page text", tool_call_id="fc-42", status="error")])

    body = sent(route)
    calling = field(body["toolConfig"], "functionCallingConfig")
    assert calling["mode"] == "ANY"
    assert field(calling, "allowedFunctionNames") == ["visit_web"]
    assert field(body["contents"][1]["parts"][0], "functionCall")["id"] == "fc-42"
    response = field(body["contents"][2]["parts"][0], "functionResponse")
    assert response == {"id": "fc-42", "name": "visit_web", "response": {"error": "page text"}}


def test_parallel_tool_results_share_one_turn() -> None:
    ai = AIMessage(
        content="",
        tool_calls=[
            {"name": "search_web", "args": {"query": "a"}, "id": "gcall_1"},
            {"name": "visit_web", "args": {"url": "https://x.org"}, "id": "gcall_2"},
        ],
    )
    system, contents = to_gemini_contents(
        [SystemMessage("s1"), SystemMessage("s2"), HumanMessage("q"), ai,
         ToolMessage("r1", tool_call_id="gcall_1"), ToolMessage("r2", tool_call_id="gcall_2")]
    )
    assert system == "s1\n\ns2"
    assert [c.role for c in contents] == ["user", "model", "user"]
    responses = [p.function_response for p in contents[2].parts or []]
    assert [(r.name, r.id) for r in responses if r] == [("search_web", None), ("visit_web", None)]


async def test_structured_output_via_function_calling(respx_mock: respx.MockRouter) -> None:
    class Verdict(BaseModel):
        """Whether the claim is supported by the evidence."""

        supported: bool

    call = {"name": "Verdict", "args": {"supported": False}}
    route = respx_mock.post(url__regex=URL).mock(
        return_value=httpx.Response(200, json=function_call_body(call, signature=None))
    )
    verdict = await gemini().with_structured_output(Verdict).ainvoke(QUESTION)
    assert verdict == Verdict(supported=False)
    calling = field(sent(route)["toolConfig"], "functionCallingConfig")
    assert calling["mode"] == "ANY"


def test_pydantic_tools_become_declarations() -> None:
    class LookupGuideline(BaseModel):
        """Look up a clinical guideline by topic."""

        topic: str = Field(description="The clinical topic.")

    decl = function_declaration(LookupGuideline)
    assert decl["name"] == "LookupGuideline"
    assert decl["description"] == "Look up a clinical guideline by topic."
    assert decl["parameters_json_schema"]["properties"]["topic"]["type"] == "string"
    gtypes.FunctionDeclaration(**decl)  # accepted by the SDK


def test_missing_key_names_both_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOOGLE_API_KEY")
    with pytest.raises(MissingKeyError) as info:
        load_model(f"google/{MODEL}")
    message = str(info.value)
    assert "\n" not in message
    assert "GOOGLE_API_KEY" in message and "GEMINI_API_KEY" in message


async def test_gemini_api_key_is_accepted(respx_mock: respx.MockRouter, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOOGLE_API_KEY")
    monkeypatch.setenv("GEMINI_API_KEY", "gemini-key")
    route = respx_mock.post(url__regex=URL).mock(return_value=httpx.Response(200, json=text_body()))
    await gemini().ainvoke(QUESTION)
    assert route.calls.last.request.headers["x-goog-api-key"] == "gemini-key"


async def test_base_url_env_var_is_honoured(respx_mock: respx.MockRouter, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", "https://gemini-gateway.test/")
    route = respx_mock.post(url__regex=r"https://gemini-gateway\.test/.*gemini-test:generateContent").mock(
        return_value=httpx.Response(200, json=text_body())
    )
    model = gemini()
    await model.ainvoke(QUESTION)
    assert route.call_count == 1
    assert model._identifying_params["base_url"] == "https://gemini-gateway.test/"
    # an explicit option beats the environment
    assert gemini(base_url="https://other.test/")._identifying_params["base_url"] == "https://other.test/"


def test_identifying_params_hold_what_changes_answers_only() -> None:
    params = gemini(thinking_level="low")._identifying_params
    assert params["provider"] == "google"
    assert params["model"] == MODEL
    assert params["base_url"].startswith("https://generativelanguage.googleapis.com")
    assert params["temperature"] == 0.0
    assert params["thinking_level"] == "low"
    assert gemini(timeout_s=5)._identifying_params == gemini(timeout_s=500)._identifying_params
    assert gemini(temperature=0.7)._identifying_params != gemini()._identifying_params
    assert "test-key" not in repr(gemini()) and "test-key" not in json.dumps(params)


def test_build_rejects_unknown_extra_fields() -> None:
    with pytest.raises(ValueError):
        build(MODEL, ModelOptions(extra={"not_a_config_field": 1}))


@pytest.mark.live
@pytest.mark.skipif(
    not (os.environ.get("GOOGLE_API_KEY") or os.environ.get("GEMINI_API_KEY")),
    reason="needs GOOGLE_API_KEY or GEMINI_API_KEY",
)
async def test_live_gemini() -> None:
    model = load_model(os.environ.get("MEDMIS_LIVE_GOOGLE_MODEL", "google/gemini-2.5-flash-lite"))
    reply = await model.ainvoke([HumanMessage("Which vitamin deficiency causes scurvy? Reply with one word.")])
    assert "c" in str(reply.content).lower()
    assert reply.usage_metadata and reply.usage_metadata["input_tokens"] > 0
