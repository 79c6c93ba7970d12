"""Every registered defender end to end through the real google-genai and openai clients.

Each provider's endpoint is a respx route whose handler reads the request body the SDK built,
turns it back into LangChain messages and tool schemas, lets ``FakeExaminee`` answer, and
replies in the provider's documented response shape (``chat.completion`` for OpenAI,
``GenerateContentResponse`` for Gemini). So the defenders, the adapters and the SDKs run
unchanged, tool calls and tool results included, and nothing but the transport is fake.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import respx
from conftest import clear_provider_env
from fakes import available
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
)

from medmis.agents import ModelOptions, ScriptedChatModel, load_model, message_text
from medmis.defenses import DefenderContext, create_defender, list_defenders
from medmis.defenses.testing import FakeExaminee, FakeToolset, toy_case, toy_item

PROTOCOLS = ("clean", "type1", "type2")
DEFENDERS = available(sorted(spec.name for spec in list_defenders()))
# defenders that bind search_web / visit_web to the model itself on a case with context
# (the other tool users search through the context, without model tool calls)
MODEL_TOOL_USERS = {"search_agent"}

Json = dict[str, Any]


@pytest.fixture(autouse=True)
def fake_env(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_provider_env(monkeypatch, "google", "openai")
    monkeypatch.setenv("GOOGLE_API_KEY", "test-google-key")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")


# --- shared between both wires ----------------------------------------------------------------


def pick(obj: Json, camel: str) -> Any:
    """``obj[camel]`` or its snake_case twin: the SDKs write either, and the APIs accept both."""
    snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in camel)
    return obj.get(camel, obj.get(snake))


def text_of(content: Any) -> str:
    """Text of a chat-completions ``content`` (a string, null, or a list of parts)."""
    if content is None or isinstance(content, str):
        return content or ""
    return "".join(p.get("text", "") for p in content if p.get("type") == "text")


def ai_turn(text: str, calls: list[tuple[str | None, str, Json]]) -> AIMessage:
    return AIMessage(
        content=text,
        tool_calls=[ToolCall(id=i, name=n, args=a, type="tool_call") for i, n, a in calls],
    )


def function_tool(name: str, description: str, parameters: Json | None) -> Json:
    """A tool schema in the OpenAI shape, the one ``FakeExaminee`` is given by the scripted model."""
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters or {}},
    }


@dataclass
class Wire:
    """The examinee behind a mocked endpoint, and what crossed the wire.

    ``call_ids=False`` leaves function calls without ids, as the Gemini Developer API does;
    the adapter must then pair results with calls by name.
    """

    examinee: FakeExaminee
    call_ids: bool = True
    requests: list[list[BaseMessage]] = field(default_factory=list)
    replies: list[AIMessage] = field(default_factory=list)

    def answer(self, messages: list[BaseMessage], tools: list[Json]) -> tuple[AIMessage, int, int]:
        """The examinee's reply and the (distinct) usage block to send with it."""
        out = self.examinee(messages, tools)
        reply = out if isinstance(out, AIMessage) else AIMessage(content=out)
        if not self.call_ids:
            reply = ai_turn(
                message_text(reply), [(None, c["name"], c["args"]) for c in reply.tool_calls]
            )
        n = len(self.replies)
        self.requests.append(messages)
        self.replies.append(reply)
        return reply, *self.usage(n)

    @staticmethod
    def usage(n: int) -> tuple[int, int]:
        return 1000 + n, 10 + n

    def tool_results(self) -> list[int]:
        """Indices of the requests carrying tool results; checks that every result answers a
        call this wire issued earlier and that every issued call was answered."""
        issued = {
            (j, c["id"], c["name"], json.dumps(c["args"], sort_keys=True))
            for j, r in enumerate(self.replies)
            for c in r.tool_calls
        }
        answered: set[tuple[int, str | None, str, str]] = set()
        carrying = []
        for i, messages in enumerate(self.requests):
            results = [(k, m) for k, m in enumerate(messages) if isinstance(m, ToolMessage)]
            for k, result in results:
                call = answered_call(messages[:k], result)
                key = (call["id"], call["name"], json.dumps(call["args"], sort_keys=True))
                earlier = [c for c in issued if c[0] < i and c[1:] == key]
                assert earlier, f"request {i}: result {result!r} answers a call never issued"
                answered.update(earlier)
            if results:
                carrying.append(i)
        assert answered == issued, f"calls left unanswered: {issued - answered}"
        return carrying

    def final_reply(self, raw: str) -> int:
        return max(i for i, r in enumerate(self.replies) if message_text(r) == raw)


def answered_call(before: list[BaseMessage], result: ToolMessage) -> ToolCall:
    """The call in the latest assistant turn that ``result`` refers to (by id, else by name)."""
    turn = next(m for m in reversed(before) if isinstance(m, AIMessage) and m.tool_calls)
    if result.tool_call_id:
        matches = [c for c in turn.tool_calls if c["id"] == result.tool_call_id]
    else:
        matches = [c for c in turn.tool_calls if c["name"] == result.name]
    assert len(matches) == 1, f"{result!r} does not refer to one call of {turn.tool_calls}"
    return matches[0]


# --- OpenAI chat completions ------------------------------------------------------------------


def openai_messages(body: Json) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    for m in body["messages"]:
        role, text = m["role"], text_of(m.get("content"))
        if role in ("system", "developer"):
            out.append(SystemMessage(text))
        elif role == "user":
            out.append(HumanMessage(text))
        elif role == "assistant":
            calls = [
                (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
                for c in m.get("tool_calls") or []
            ]
            out.append(ai_turn(text, calls))
        elif role == "tool":
            out.append(ToolMessage(text, tool_call_id=m["tool_call_id"]))
        else:
            raise AssertionError(f"unexpected chat-completions role {role!r}")
    return out


def openai_tools(body: Json) -> list[Json]:
    return [
        function_tool(f["name"], f.get("description", ""), f.get("parameters"))
        for f in (t["function"] for t in body.get("tools") or [])
    ]


def openai_body(reply: AIMessage, n_in: int, n_out: int) -> Json:
    message: Json = {"role": "assistant", "content": message_text(reply) or None, "refusal": None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": json.dumps(c["args"])},
            }
            for c in reply.tool_calls
        ]
    finish = "tool_calls" if reply.tool_calls else "stop"
    return {
        "id": f"chatcmpl-{n_in}",
        "object": "chat.completion",
        "created": 1_760_000_000,
        "model": "gpt-test-2025-01-01",
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": {"prompt_tokens": n_in, "completion_tokens": n_out, "total_tokens": n_in + n_out},
        "system_fingerprint": "fp_test",
    }


# --- Gemini generateContent -------------------------------------------------------------------


def gemini_messages(body: Json) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    system = pick(body, "systemInstruction")
    if system:
        out.append(SystemMessage("".join(p.get("text", "") for p in system["parts"])))
    for content in body["contents"]:
        parts = content["parts"]
        text = "".join(p.get("text", "") for p in parts if not p.get("thought"))
        calls = [fc for p in parts if (fc := pick(p, "functionCall"))]
        responses = [fr for p in parts if (fr := pick(p, "functionResponse"))]
        if content["role"] == "model":
            out.append(
                ai_turn(text, [(fc.get("id"), fc["name"], fc.get("args") or {}) for fc in calls])
            )
        elif responses:
            out.extend(gemini_result(fr) for fr in responses)
        else:
            out.append(HumanMessage(text))
    return out


def gemini_result(response: Json) -> ToolMessage:
    payload = response["response"]
    status = "error" if "error" in payload else "success"
    text = payload.get("error", payload.get("result", json.dumps(payload)))
    return ToolMessage(
        str(text), tool_call_id=response.get("id") or "", name=response["name"], status=status
    )


def gemini_tools(body: Json) -> list[Json]:
    return [
        function_tool(
            d["name"],
            d.get("description", ""),
            pick(d, "parametersJsonSchema") or d.get("parameters"),
        )
        for tool in body.get("tools") or []
        for d in pick(tool, "functionDeclarations") or []
    ]


def gemini_body(reply: AIMessage, n_in: int, n_out: int) -> Json:
    text = message_text(reply)
    parts: list[Json] = [{"text": text}] if text else []
    parts += [{"functionCall": {"name": c["name"], "args": c["args"]}} for c in reply.tool_calls]
    return {
        "candidates": [
            {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}
        ],
        "usageMetadata": {
            "promptTokenCount": n_in,
            "candidatesTokenCount": n_out,
            "totalTokenCount": n_in + n_out,
        },
        "modelVersion": "gemini-test-001",
        "responseId": f"resp-{n_in}",
    }


# --- the two endpoints ------------------------------------------------------------------------


@dataclass(frozen=True)
class Provider:
    spec: str
    base_url: str
    url: str  # regex of the endpoint the SDK posts to
    messages: Callable[[Json], list[BaseMessage]]
    tools: Callable[[Json], list[Json]]
    body: Callable[[AIMessage, int, int], Json]
    call_ids: bool


PROVIDERS = {
    "openai": Provider(
        "openai/gpt-test",
        "https://openai.test/v1",
        r"https://openai\.test/v1/chat/completions",
        openai_messages,
        openai_tools,
        openai_body,
        call_ids=True,
    ),
    "google": Provider(
        "google/gemini-test",
        "https://gemini.test",
        r"https://gemini\.test/v1(beta)?/models/gemini-test:generateContent",
        gemini_messages,
        gemini_tools,
        gemini_body,
        call_ids=False,
    ),
}


def with_logprobs(request: Json, response: Json, reply: AIMessage) -> Json:
    """The response with the sampled tokens' log-probabilities when the request asked for them,
    in each API's shape (``calibrate`` asks: OpenAI ``logprobs``, Gemini ``responseLogprobs``)."""
    tokens = message_text(reply).split() or [""]
    if request.get("logprobs") is True:
        response["choices"][0]["logprobs"] = {
            "content": [{"token": t, "logprob": -0.1, "bytes": None, "top_logprobs": []} for t in tokens],
            "refusal": None,
        }
    elif pick(request.get("generationConfig") or {}, "responseLogprobs") is True:
        response["candidates"][0]["logprobsResult"] = {
            "chosenCandidates": [{"token": t, "logProbability": -0.1} for t in tokens]
        }
    return response


def handler(provider: Provider, wire: Wire) -> Callable[[httpx.Request], httpx.Response]:
    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        reply, n_in, n_out = wire.answer(provider.messages(body), provider.tools(body))
        return httpx.Response(200, json=with_logprobs(body, provider.body(reply, n_in, n_out), reply))

    return handle


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("name", DEFENDERS)
@pytest.mark.parametrize("provider", sorted(PROVIDERS))
async def test_defender_over_http(
    provider: str, name: str, protocol: str, respx_mock: respx.MockRouter
) -> None:
    p = PROVIDERS[provider]
    item = toy_item()
    wire = Wire(FakeExaminee(item, tool_turns=2), call_ids=p.call_ids)
    route = respx_mock.post(url__regex=p.url).mock(side_effect=handler(p, wire))
    model = load_model(p.spec, ModelOptions(base_url=p.base_url))
    ctx = DefenderContext(model=model, model_spec=p.spec, tools=FakeToolset())

    answer = await create_defender(name)(toy_case(item, protocol), ctx)

    assert answer.error is None
    assert answer.choice in item.options, answer.raw
    assert answer.llm_calls == route.call_count == len(wire.requests) > 0
    # every model step's usage is the usage block of one response, each response counted once
    steps = [s for s in answer.trace if s.kind == "model"]
    assert all(s.usage and s.usage.input_tokens and s.usage.output_tokens for s in steps)
    assert sorted((s.usage.input_tokens, s.usage.output_tokens) for s in steps if s.usage) == [
        wire.usage(n) for n in range(len(wire.replies))
    ]
    carrying = wire.tool_results()
    if name in MODEL_TOOL_USERS and protocol == "type1":
        assert carrying, "the model's tool calls never came back as tool results"
        assert answer.tool_calls > 0
        assert wire.final_reply(answer.raw) > carrying[0], (
            "the final answer preceded the tool results"
        )

    # the wire is transparent: the same defender over the scripted model does the same work
    scripted = ScriptedChatModel(outputs=FakeExaminee(item, tool_turns=2))
    ctx = DefenderContext(model=scripted, model_spec="mock/fake", tools=FakeToolset())
    direct = await create_defender(name)(toy_case(item, protocol), ctx)
    assert (answer.choice, answer.llm_calls, answer.tool_calls) == (
        direct.choice,
        direct.llm_calls,
        direct.tool_calls,
    )
