"""The OpenAI adapter against the real openai client over respx-mocked httpx.

Response bodies follow the documented shape of ``POST /v1/chat/completions``.
"""

from __future__ import annotations

import json
import os
from typing import Any

import httpx
import openai
import pytest
import respx
from conftest import clear_provider_env
from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage

from medmis.agents import (
    BlockedResponseError,
    MalformedResponseError,
    MissingKeyError,
    ModelConfigError,
    ModelOptions,
    RetryPolicy,
    classify,
    load_model,
    retry_async,
)
from medmis.agents._openai import PLACEHOLDER_KEY, OpenAIChat
from medmis.defenses import DefenderContext
from medmis.tools import tool_schemas

MODEL = "gpt-test"
URL = "https://api.openai.com/v1/chat/completions"
QUESTION = [SystemMessage("You are a physician taking a board exam."), HumanMessage("Scurvy?")]


@pytest.fixture(autouse=True)
def fake_env(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.node.get_closest_marker("live"):
        return  # live tests need the real environment
    clear_provider_env(monkeypatch, "openai")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")


def completion(message: dict[str, Any], finish_reason: str = "stop", **usage: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_760_000_000,
        "model": "gpt-test-2025-01-01",
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25, **usage},
        "system_fingerprint": "fp_test",
    }


def text_body(text: str = "The answer is B.", **usage: Any) -> dict[str, Any]:
    return completion({"role": "assistant", "content": text, "refusal": None}, **usage)


def error_body(message: str, code: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "requests", "param": None, "code": code}}


def sent(route: respx.Route, index: int = -1) -> dict[str, Any]:
    return json.loads(route.calls[index].request.content)


def chat(**opts: Any) -> OpenAIChat:
    model = load_model(f"openai/{MODEL}", ModelOptions(**opts))
    assert isinstance(model, OpenAIChat)
    return model


async def test_text_answer_with_usage(respx_mock: respx.MockRouter) -> None:
    body = text_body(
        completion_tokens=45,
        total_tokens=65,
        completion_tokens_details={"reasoning_tokens": 40},
        prompt_tokens_details={"cached_tokens": 4},
    )
    route = respx_mock.post(URL).mock(return_value=httpx.Response(200, json=body))

    reply = await chat().ainvoke(QUESTION)

    assert reply.content == "The answer is B."
    usage = reply.usage_metadata
    assert usage is not None
    assert (usage["input_tokens"], usage["output_tokens"], usage["total_tokens"]) == (20, 45, 65)
    assert usage.get("output_token_details", {}).get("reasoning") == 40
    assert reply.response_metadata["finish_reason"] == "stop"
    assert route.calls.last.request.headers["authorization"] == "Bearer sk-test"


async def test_request_body(respx_mock: respx.MockRouter) -> None:
    route = respx_mock.post(URL).mock(return_value=httpx.Response(200, json=text_body()))

    await chat(max_output_tokens=256, seed=7, extra={"top_k": 20}).ainvoke(QUESTION)

    body = sent(route)
    assert body["model"] == MODEL
    assert body["messages"] == [
        {"role": "system", "content": "You are a physician taking a board exam."},
        {"role": "user", "content": "Scurvy?"},
    ]
    assert body["temperature"] == 0
    assert body["seed"] == 7
    assert body["max_completion_tokens"] == 256
    assert body["top_k"] == 20  # extra goes into the body verbatim
    assert body["stream"] is False
    assert "reasoning_effort" not in body  # only sent when set


async def test_structured_request_body(respx_mock: respx.MockRouter) -> None:
    # the format goes out at the body's top level with the rest, exactly once; a format the
    # user put in ``extra`` still wins; the model's own extra_body is left as it was
    from medmis.agents._capabilities import STRUCTURED_OUTPUT_KWARG

    route = respx_mock.post(URL).mock(return_value=httpx.Response(200, json=text_body('{"answer_letter": "B"}')))
    schema = {"name": "answer", "schema": {"type": "object", "properties": {"a": {"type": "string"}}}, "strict": True}
    model = chat(extra={"top_k": 20})
    for _ in range(2):
        reply = await model.ainvoke(QUESTION, **{STRUCTURED_OUTPUT_KWARG: schema})
        assert reply.content == '{"answer_letter": "B"}'
        body = sent(route)
        assert body["response_format"] == {"type": "json_schema", "json_schema": schema}
        assert (body["top_k"], body["stream"], body["messages"][1]) == (20, False, {"role": "user", "content": "Scurvy?"})
        assert "extra_body" not in body
    assert model.extra_body == {"top_k": 20}
    await model.ainvoke(QUESTION)
    assert "response_format" not in sent(route)  # an unstructured call sends none

    override = {"type": "json_object"}
    await chat(extra={"response_format": override}).ainvoke(QUESTION, **{STRUCTURED_OUTPUT_KWARG: schema})
    assert sent(route)["response_format"] == override


@pytest.mark.parametrize("effort", ["none", "minimal", "low", "medium", "high", "xhigh"])
async def test_reasoning_effort_is_sent_when_set(respx_mock: respx.MockRouter, effort: str) -> None:
    # "none" is the paper's GPT-5.4 setting: it must reach the API, not read as "unset"
    route = respx_mock.post(URL).mock(return_value=httpx.Response(200, json=text_body()))
    await chat(reasoning_effort=effort).ainvoke(QUESTION)
    assert sent(route)["reasoning_effort"] == effort


def test_claude_only_effort_is_refused() -> None:
    with pytest.raises(ModelConfigError) as info:
        chat(reasoning_effort="max")
    assert "\n" not in str(info.value) and "xhigh" in str(info.value)


def test_sync_path(respx_mock: respx.MockRouter) -> None:
    route = respx_mock.post(URL).mock(return_value=httpx.Response(200, json=text_body()))
    assert chat().invoke(QUESTION).content == "The answer is B."
    assert route.call_count == 1


async def test_429_with_retry_after_then_success(respx_mock: respx.MockRouter) -> None:
    route = respx_mock.post(URL).mock(
        side_effect=[
            httpx.Response(429, json=error_body("Rate limit reached", "rate_limit_exceeded"),
                           headers={"Retry-After": "7"}),
            httpx.Response(200, json=text_body()),
        ]
    )
    sleeps: list[float] = []

    async def fake_sleep(delay: float) -> None:
        sleeps.append(delay)

    model = chat()
    reply = await retry_async(
        lambda: model.ainvoke(QUESTION), RetryPolicy(max_retries=3, base_delay=0.01), sleep=fake_sleep
    )

    assert reply.content == "The answer is B."
    assert route.call_count == 2  # the SDK itself did not retry
    assert sleeps == [7.0]


async def test_503_exhausted_is_recorded_as_an_error_step(respx_mock: respx.MockRouter) -> None:
    route = respx_mock.post(URL).mock(
        return_value=httpx.Response(503, json=error_body("The server is overloaded", "server_error"))
    )
    ctx = DefenderContext(model=chat(), retry=RetryPolicy(max_retries=2, base_delay=0))

    with pytest.raises(openai.InternalServerError) as info:
        await ctx.generate(QUESTION)

    assert classify(info.value)[0] is True
    assert route.call_count == 3
    step = ctx.trace[-1]
    assert step.kind == "model" and step.error is not None
    assert "overloaded" in step.error


@pytest.mark.parametrize(
    "response",
    [
        httpx.Response(200, text="<html>502 bad gateway</html>", headers={"content-type": "text/html"}),
        httpx.Response(200, text='{"choices": [', headers={"content-type": "application/json"}),
        httpx.Response(200, json={"object": "chat.completion"}),
        httpx.Response(200, json={"choices": []}),
        httpx.Response(200, json={"error": {"message": "upstream provider failed"}}),
    ],
    ids=["html", "truncated-json", "no-choices", "empty-choices", "error-in-200"],
)
async def test_malformed_body_is_retryable(respx_mock: respx.MockRouter, response: httpx.Response) -> None:
    respx_mock.post(URL).mock(return_value=response)
    with pytest.raises(MalformedResponseError) as info:
        await chat().ainvoke(QUESTION)
    assert classify(info.value) == (True, None)


async def test_content_filter_is_blocked(respx_mock: respx.MockRouter) -> None:
    body = completion({"role": "assistant", "content": None}, finish_reason="content_filter")
    route = respx_mock.post(URL).mock(return_value=httpx.Response(200, json=body))
    ctx = DefenderContext(model=chat(), retry=RetryPolicy(max_retries=3, base_delay=0))
    with pytest.raises(BlockedResponseError):
        await ctx.generate(QUESTION)
    assert route.call_count == 1


async def test_tool_call_round_trip(respx_mock: respx.MockRouter) -> None:
    tool_call = {
        "id": "call_abc123",
        "type": "function",
        "function": {"name": "search_web", "arguments": json.dumps({"query": "scurvy vitamin"})},
    }
    route = respx_mock.post(URL).mock(
        side_effect=[
            httpx.Response(200, json=completion(
                {"role": "assistant", "content": None, "tool_calls": [tool_call]}, finish_reason="tool_calls"
            )),
            httpx.Response(200, json=text_body("Vitamin C. Answer: B")),
        ]
    )
    model = chat().bind_tools(tool_schemas())

    first = await model.ainvoke(QUESTION)

    assert first.tool_calls == [
        {"name": "search_web", "args": {"query": "scurvy vitamin"}, "id": "call_abc123", "type": "tool_call"}
    ]
    assert [t["function"]["name"] for t in sent(route, 0)["tools"]] == ["search_web", "visit_web"]

    result = ToolMessage(content="[1] Scurvy - vitamin C deficiency", tool_call_id="call_abc123")
    final = await model.ainvoke([*QUESTION, first, result])

    assert final.content == "Vitamin C. Answer: B"
    messages = sent(route)["messages"]
    assert messages[2]["role"] == "assistant"
    assert messages[2]["tool_calls"][0]["id"] == "call_abc123"
    assert messages[3] == {
        "role": "tool",
        "tool_call_id": "call_abc123",
        "content": "[1] Scurvy - vitamin C deficiency",
    }


def test_missing_key_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(MissingKeyError) as info:
        load_model(f"openai/{MODEL}")
    message = str(info.value)
    assert "\n" not in message and "OPENAI_API_KEY" in message


async def test_local_server_needs_no_key(respx_mock: respx.MockRouter, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    route = respx_mock.post("http://localhost:8000/v1/chat/completions").mock(
        return_value=httpx.Response(200, json=text_body())
    )
    model = chat(base_url="http://localhost:8000/v1", max_output_tokens=64)

    await model.ainvoke(QUESTION)

    request = route.calls.last.request
    assert request.headers["authorization"] == f"Bearer {PLACEHOLDER_KEY}"
    body = json.loads(request.content)
    assert body["max_tokens"] == 64 and "max_completion_tokens" not in body  # the name every server knows
    assert model._identifying_params["base_url"] == "http://localhost:8000/v1"


async def test_base_url_env_var_is_honoured(respx_mock: respx.MockRouter, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "https://llm-gateway.test/v1")
    route = respx_mock.post("https://llm-gateway.test/v1/chat/completions").mock(
        return_value=httpx.Response(200, json=text_body())
    )
    model = chat()
    await model.ainvoke(QUESTION)
    assert route.calls.last.request.headers["authorization"] == "Bearer sk-test"  # a real key wins
    assert model._identifying_params["base_url"] == "https://llm-gateway.test/v1"
    # an explicit option beats the environment
    assert chat(base_url="http://127.0.0.1:11434/v1")._identifying_params["base_url"] == "http://127.0.0.1:11434/v1"


def test_client_settings_and_identifying_params() -> None:
    model = chat(timeout_s=5)
    assert model.max_retries == 0
    assert model.request_timeout == 5
    params = model._identifying_params
    assert params["provider"] == "openai"
    assert params["model"] == MODEL
    assert params["base_url"] == "https://api.openai.com/v1"
    assert params["temperature"] == 0.0
    assert chat(timeout_s=5)._identifying_params == chat(timeout_s=500)._identifying_params
    assert chat(seed=1)._identifying_params != chat(seed=2)._identifying_params
    assert "sk-test" not in json.dumps(params, default=str)


@pytest.mark.live
@pytest.mark.skipif(not os.environ.get("OPENAI_API_KEY"), reason="needs OPENAI_API_KEY")
async def test_live_openai() -> None:
    model = load_model(os.environ.get("MEDMIS_LIVE_OPENAI_MODEL", "openai/gpt-4.1-nano"))
    reply = await model.ainvoke([HumanMessage("Which vitamin deficiency causes scurvy? Reply with one word.")])
    assert "c" in str(reply.content).lower()
    assert reply.usage_metadata and reply.usage_metadata["input_tokens"] > 0
