"""The Anthropic adapter against the real anthropic client over respx-mocked httpx.

Response and error bodies follow the documented shape of ``POST /v1/messages`` (message
objects with ``text`` / ``thinking`` / ``tool_use`` blocks; ``{"type": "error", "error":
{...}}`` with 429 / 500 / 529 statuses).
"""

from __future__ import annotations

import json
import os
from typing import Any

import anthropic
import httpx
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
    message_text,
    provider_family,
    retry_async,
)
from medmis.agents._anthropic import AnthropicChat
from medmis.defenses import DefenderContext
from medmis.defenses._prompts import PAPER_STRUCTURED_OUTPUT
from medmis.tools import tool_schemas

MODEL = "claude-test"
URL = "https://api.anthropic.com/v1/messages"
QUESTION = [SystemMessage("You are a physician taking a board exam."), HumanMessage("Scurvy?")]


@pytest.fixture(autouse=True)
def fake_env(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.node.get_closest_marker("live"):
        return
    clear_provider_env(monkeypatch, "anthropic")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")


def message(content: list[dict[str, Any]], stop_reason: str = "end_turn", **usage: Any) -> dict[str, Any]:
    return {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "model": "claude-test-20260101",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 20, "output_tokens": 5, **usage},
    }


def text_body(text: str = "The answer is B.", **usage: Any) -> dict[str, Any]:
    return message([{"type": "text", "text": text}], **usage)


def error_body(kind: str, text: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": text}, "request_id": "req_011"}


def sent(route: respx.Route, index: int = -1) -> dict[str, Any]:
    return json.loads(route.calls[index].request.content)


def chat(**opts: Any) -> AnthropicChat:
    model = load_model(f"anthropic/{MODEL}", ModelOptions(**opts))
    assert isinstance(model, AnthropicChat)
    return model


async def test_text_answer_with_usage(respx_mock: respx.MockRouter) -> None:
    body = text_body(output_tokens=45, cache_read_input_tokens=4, cache_creation_input_tokens=0)
    route = respx_mock.post(URL).mock(return_value=httpx.Response(200, json=body))

    reply = await chat().ainvoke(QUESTION)

    assert reply.content == "The answer is B."
    usage = reply.usage_metadata
    assert usage is not None
    assert (usage["input_tokens"], usage["output_tokens"]) == (24, 45)  # cache reads count as input
    request = route.calls.last.request
    assert "sk-ant-test" in (request.headers.get("x-api-key", "") + request.headers.get("authorization", ""))
    assert request.headers["x-stainless-retry-count"] == "0"


async def test_request_body_follows_the_reference_shape(respx_mock: respx.MockRouter) -> None:
    route = respx_mock.post(URL).mock(return_value=httpx.Response(200, json=text_body()))

    await chat(max_output_tokens=2048, extra={"top_k": 20}).ainvoke(QUESTION)

    body = sent(route)
    assert body["model"] == MODEL
    assert body["system"] == "You are a physician taking a board exam."
    assert body["messages"] == [{"role": "user", "content": "Scurvy?"}]
    assert body["max_tokens"] == 2048 and body["temperature"] == 0
    assert body["top_k"] == 20  # extra goes into the body verbatim
    assert "thinking" not in body and "output_config" not in body  # only sent when set
    assert body.get("stream") in (None, False)


@pytest.mark.parametrize(
    ("opts", "thinking", "effort"),
    [
        ({"reasoning_effort": "medium", "thinking_budget": "adaptive", "temperature": 1.0},
         {"type": "adaptive"}, "medium"),  # the reference's Sonnet/Opus 4.6 setting
        ({"thinking_budget": 4096, "temperature": 1.0, "max_output_tokens": 8192},
         {"type": "enabled", "budget_tokens": 4096}, None),
        ({"thinking_budget": 0, "reasoning_effort": "max"}, {"type": "disabled"}, "max"),
        ({"reasoning_effort": "low"}, None, "low"),  # no thinking inferred from a model profile
    ],
)
async def test_thinking_and_effort_are_sent_as_given(
    respx_mock: respx.MockRouter, opts: dict[str, Any], thinking: Any, effort: str | None
) -> None:
    route = respx_mock.post(URL).mock(return_value=httpx.Response(200, json=text_body()))
    await chat(**opts).ainvoke(QUESTION)
    body = sent(route)
    assert body.get("thinking") == thinking
    assert body.get("output_config", {}).get("effort") == effort


@pytest.mark.parametrize(
    "opts",
    [
        {"reasoning_effort": "none"},  # OpenAI's, not Claude's
        {"reasoning_effort": "minimal"},
        {"thinking_budget": 512, "temperature": 1.0},  # under the API's floor
        {"thinking_budget": "adaptive"},  # temperature 0 with thinking: the API rejects it
        {"thinking_budget": 4096, "temperature": 1.0, "max_output_tokens": 2048},
        {"extra": {"structured_output": "tools"}},
    ],
)
def test_settings_the_api_refuses_fail_at_build(opts: dict[str, Any]) -> None:
    with pytest.raises(ModelConfigError) as info:
        chat(**opts)
    assert "\n" not in str(info.value) and str(info.value).startswith("anthropic:")


async def test_thinking_blocks_are_not_read_as_the_answer(respx_mock: respx.MockRouter) -> None:
    body = message([
        {"type": "thinking", "thinking": "Option A looks right at first.", "signature": "EqQBCg=="},
        {"type": "text", "text": '{"thinking_process": "...", "answer_letter": "C"}'},
    ], output_tokens=300)
    respx_mock.post(URL).mock(return_value=httpx.Response(200, json=body))
    reply = await chat(thinking_budget="adaptive", temperature=1.0).ainvoke(QUESTION)
    assert message_text(reply) == '{"thinking_process": "...", "answer_letter": "C"}'
    assert reply.usage_metadata and reply.usage_metadata["output_tokens"] == 300  # thinking billed


async def test_structured_output_is_prompt_only_by_default(respx_mock: respx.MockRouter) -> None:
    route = respx_mock.post(URL).mock(return_value=httpx.Response(200, json=text_body('{"answer_letter": "B"}')))
    reply = await chat().bind(structured_output=PAPER_STRUCTURED_OUTPUT).ainvoke(QUESTION)
    body = sent(route)
    assert "output_config" not in body and "tools" not in body and "tool_choice" not in body
    assert "parsed" not in reply.additional_kwargs


async def test_native_structured_output(respx_mock: respx.MockRouter) -> None:
    answer = {"thinking_process": "Vitamin C deficiency.", "answer_letter": "B"}
    route = respx_mock.post(URL).mock(return_value=httpx.Response(200, json=text_body(json.dumps(answer))))
    model = chat(extra={"structured_output": "native"})
    reply = await model.bind(structured_output=PAPER_STRUCTURED_OUTPUT).ainvoke(QUESTION)
    fmt = sent(route)["output_config"]["format"]
    assert fmt["type"] == "json_schema"
    assert fmt["schema"]["required"] == ["thinking_process", "answer_letter"]
    assert fmt["schema"]["additionalProperties"] is False
    assert reply.additional_kwargs["parsed"] == answer
    assert "structured_output" not in sent(route)  # the option is ours, never sent


def test_sync_path(respx_mock: respx.MockRouter) -> None:
    route = respx_mock.post(URL).mock(return_value=httpx.Response(200, json=text_body()))
    assert chat().invoke(QUESTION).content == "The answer is B."
    assert route.call_count == 1


async def test_429_with_retry_after_then_success(respx_mock: respx.MockRouter) -> None:
    route = respx_mock.post(URL).mock(
        side_effect=[
            httpx.Response(429, json=error_body("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit"),
                           headers={"retry-after": "7"}),
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


@pytest.mark.parametrize(("status", "kind"), [(529, "overloaded_error"), (500, "api_error")])
async def test_5xx_exhausted_is_recorded_as_an_error_step(
    respx_mock: respx.MockRouter, status: int, kind: str
) -> None:
    route = respx_mock.post(URL).mock(return_value=httpx.Response(status, json=error_body(kind, "Overloaded")))
    ctx = DefenderContext(model=chat(), retry=RetryPolicy(max_retries=2, base_delay=0))

    with pytest.raises(anthropic.APIStatusError) as info:
        await ctx.generate(QUESTION)

    assert classify(info.value)[0] is True
    assert route.call_count == 3
    step = ctx.trace[-1]
    assert step.kind == "model" and step.error is not None and "Overloaded" in step.error


async def test_bad_request_is_not_retried(respx_mock: respx.MockRouter) -> None:
    body = error_body("invalid_request_error", "max_tokens: must be greater than thinking.budget_tokens")
    route = respx_mock.post(URL).mock(return_value=httpx.Response(400, json=body))
    ctx = DefenderContext(model=chat(), retry=RetryPolicy(max_retries=3, base_delay=0))
    with pytest.raises(anthropic.BadRequestError):
        await ctx.generate(QUESTION)
    assert route.call_count == 1


async def test_connection_failure_is_retryable(respx_mock: respx.MockRouter) -> None:
    route = respx_mock.post(URL).mock(
        side_effect=[httpx.ConnectError("connection refused"), httpx.Response(200, json=text_body())]
    )
    ctx = DefenderContext(model=chat(), retry=RetryPolicy(max_retries=2, base_delay=0))
    reply = await ctx.generate(QUESTION)
    assert reply.content == "The answer is B." and route.call_count == 2


@pytest.mark.parametrize(
    "response",
    [
        httpx.Response(200, text="<html>502 bad gateway</html>", headers={"content-type": "text/html"}),
        httpx.Response(200, text='{"content": [', headers={"content-type": "application/json"}),
        httpx.Response(200, json={"type": "message", "content": "not blocks"}),
    ],
    ids=["html", "truncated-json", "wrong-shape"],
)
async def test_malformed_body_is_retryable(respx_mock: respx.MockRouter, response: httpx.Response) -> None:
    respx_mock.post(URL).mock(return_value=response)
    with pytest.raises(MalformedResponseError) as info:
        await chat().ainvoke(QUESTION)
    assert classify(info.value) == (True, None)


async def test_refusal_is_blocked(respx_mock: respx.MockRouter) -> None:
    route = respx_mock.post(URL).mock(return_value=httpx.Response(200, json=message([], stop_reason="refusal")))
    ctx = DefenderContext(model=chat(), retry=RetryPolicy(max_retries=3, base_delay=0))
    with pytest.raises(BlockedResponseError):
        await ctx.generate(QUESTION)
    assert route.call_count == 1


async def test_tool_call_round_trip(respx_mock: respx.MockRouter) -> None:
    tool_use = {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "search_web",
                "input": {"query": "scurvy vitamin"}}
    route = respx_mock.post(URL).mock(
        side_effect=[
            httpx.Response(200, json=message(
                [{"type": "text", "text": "I will search."}, tool_use], stop_reason="tool_use"
            )),
            httpx.Response(200, json=text_body("Vitamin C. Answer: B")),
        ]
    )
    model = chat().bind_tools(tool_schemas())

    first = await model.ainvoke(QUESTION)

    assert [(c["name"], c["args"], c["id"]) for c in first.tool_calls] == [
        ("search_web", {"query": "scurvy vitamin"}, "toolu_01A09q90qw90lq917835lq9")
    ]
    tools = sent(route, 0)["tools"]
    assert [t["name"] for t in tools] == ["search_web", "visit_web"]
    assert tools[0]["input_schema"]["properties"]["query"]["type"] == "string"

    result = ToolMessage(content="[1] Scurvy - vitamin C deficiency", tool_call_id=tool_use["id"])
    final = await model.ainvoke([*QUESTION, first, result])

    assert final.content == "Vitamin C. Answer: B"
    messages = sent(route)["messages"]
    assert messages[1]["role"] == "assistant"
    assert any(b.get("type") == "tool_use" and b["id"] == tool_use["id"] for b in messages[1]["content"])
    (block,) = [b for b in messages[2]["content"] if b.get("type") == "tool_result"]
    assert messages[2]["role"] == "user"
    assert block["tool_use_id"] == tool_use["id"]
    assert "vitamin C deficiency" in json.dumps(block["content"])


def test_missing_key_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(MissingKeyError) as info:
        load_model(f"anthropic/{MODEL}")
    assert "\n" not in str(info.value) and "ANTHROPIC_API_KEY" in str(info.value)


async def test_base_url_env_var_and_option(respx_mock: respx.MockRouter, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "https://llm-gateway.test")
    route = respx_mock.post("https://llm-gateway.test/v1/messages").mock(
        return_value=httpx.Response(200, json=text_body())
    )
    model = chat()
    await model.ainvoke(QUESTION)
    assert route.call_count == 1
    assert model._identifying_params["base_url"] == "https://llm-gateway.test"
    assert chat(base_url="http://127.0.0.1:8080")._identifying_params["base_url"] == "http://127.0.0.1:8080"


def test_client_settings_and_identifying_params() -> None:
    model = chat(timeout_s=5)
    assert model.max_retries == 0
    assert provider_family(model) == "anthropic"
    params = model._identifying_params
    assert (params["provider"], params["model"], params["base_url"]) == ("anthropic", MODEL, "https://api.anthropic.com")
    assert chat(timeout_s=5)._identifying_params == chat(timeout_s=500)._identifying_params
    assert chat(reasoning_effort="low")._identifying_params != chat(reasoning_effort="high")._identifying_params
    assert (chat(thinking_budget=0)._identifying_params
            != chat(thinking_budget="adaptive", temperature=1.0)._identifying_params)
    assert "sk-ant-test" not in json.dumps(params, default=str)


@pytest.mark.live
@pytest.mark.skipif(not os.environ.get("ANTHROPIC_API_KEY"), reason="needs ANTHROPIC_API_KEY")
async def test_live_anthropic() -> None:
    model = load_model(os.environ.get("MEDMIS_LIVE_ANTHROPIC_MODEL", "anthropic/claude-haiku-4-5"))
    reply = await model.ainvoke([HumanMessage("Which vitamin deficiency causes scurvy? Reply with one word.")])
    assert "c" in message_text(reply).lower()
    assert reply.usage_metadata and reply.usage_metadata["input_tokens"] > 0


def test_cli_flags_reach_the_adapter(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from pathlib import Path

    from medmis.experiments.cli import build_parser, main

    args = build_parser().parse_args(["run", "--data", "d", "--model", "anthropic/m", "--defender", "none",
                                      "--out", "o", "--reasoning-effort", "xhigh", "--thinking-budget", "adaptive"])
    assert (args.reasoning_effort, args.thinking_budget) == ("xhigh", "adaptive")
    assert build_parser().parse_args(["run", "--data", "d", "--model", "m/x", "--defender", "none", "--out", "o",
                                      "--thinking-budget", "2048"]).thinking_budget == 2048
    data = Path(__file__).resolve().parents[1] / "fixtures" / "medmisbench_sample.jsonl"
    code = main(["run", "--data", str(data), "--limit", "1", "--model", f"anthropic/{MODEL}", "--defender", "none",
                 "--reasoning-effort", "none", "--out", str(tmp_path / "run"), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "not a Claude effort" in err[0]
