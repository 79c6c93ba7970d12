"""``langchain:<provider>:<model>`` specs: LangChain's own integrations, built by
``init_chat_model``, against a local HTTP server on 127.0.0.1.

These models keep their integration's transport (``httpx2`` for langchain-anthropic and
langchain-openai), which respx does not see, so the provider API is served for real by a small
scripted server started here. Bodies follow the documented shapes of Anthropic's
``POST /v1/messages`` and OpenAI's ``POST /v1/chat/completions``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from conftest import clear_provider_env
from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage

from medmis.agents import (
    ModelConfigError,
    ModelOptions,
    RetryPolicy,
    classify,
    load_model,
    provider_family,
    retry_async,
)
from medmis.defenses import DefenderContext
from medmis.experiments.cli import main
from medmis.tools import tool_schemas

QUESTION = [SystemMessage("You are a physician taking a board exam."), HumanMessage("Scurvy?")]
Json = dict[str, Any]


@dataclass
class Server:
    """Answers each POST with the next scripted (status, headers, body) and keeps the requests."""

    url: str
    script: list[tuple[int, dict[str, str], Json]] = field(default_factory=list)
    requests: list[tuple[str, dict[str, str], Json]] = field(default_factory=list)

    def bodies(self) -> list[Json]:
        return [body for _, _, body in self.requests]


@pytest.fixture
def server() -> Iterator[Server]:
    state = Server(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            state.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            status, headers, reply = state.script.pop(0)
            data = json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(autouse=True)
def fake_env(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_provider_env(monkeypatch, "anthropic", "openai")
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")


def claude_message(content: list[Json], stop_reason: str = "end_turn") -> Json:
    return {
        "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-test",
        "content": content, "stop_reason": stop_reason, "stop_sequence": None,
        "usage": {"input_tokens": 20, "output_tokens": 5},
    }  # fmt: skip


def claude_text(text: str = "The answer is B.") -> Json:
    return claude_message([{"type": "text", "text": text}])


def openai_text(text: str = "The answer is B.") -> Json:
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1_760_000_000, "model": "gpt-test",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "refusal": None},
                     "logprobs": None, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
    }  # fmt: skip


def claude(server: Server, **opts: Any) -> Any:
    return load_model("langchain:anthropic:claude-test", ModelOptions(base_url=server.url, **opts))


@pytest.mark.parametrize(
    ("spec", "reply", "path", "family"),
    [
        ("langchain:anthropic:claude-test", claude_text(), "/v1/messages", "anthropic"),
        ("langchain:openai:gpt-test", openai_text(), "/v1/chat/completions", "openai"),
    ],
)
async def test_text_answer_through_init_chat_model(
    server: Server, spec: str, reply: Json, path: str, family: str
) -> None:
    server.script.append((200, {}, reply))
    base = server.url + ("/v1" if "openai" in spec else "")
    model = load_model(spec, ModelOptions(base_url=base, max_output_tokens=300))

    answer = await model.ainvoke(QUESTION)

    assert answer.content == "The answer is B."
    assert answer.usage_metadata and answer.usage_metadata["input_tokens"] == 20
    ((got_path, headers, body),) = server.requests
    assert got_path == path
    assert body["model"] in ("claude-test", "gpt-test") and body["temperature"] == 0
    assert 300 in (body.get("max_tokens"), body.get("max_completion_tokens"))
    assert headers.get("x-stainless-retry-count") == "0"  # the SDK does not retry
    assert provider_family(model) == family  # where the paper preset puts its instruction


async def test_tool_call_and_tool_result(server: Server) -> None:
    tool_use = {"type": "tool_use", "id": "toolu_01", "name": "search_web", "input": {"query": "scurvy"}}
    server.script += [
        (200, {}, claude_message([tool_use], stop_reason="tool_use")),
        (200, {}, claude_text("Vitamin C. Answer: B")),
    ]
    model = claude(server).bind_tools(tool_schemas())

    first = await model.ainvoke(QUESTION)
    assert [(c["name"], c["args"], c["id"]) for c in first.tool_calls] == [("search_web", {"query": "scurvy"}, "toolu_01")]
    final = await model.ainvoke([*QUESTION, first, ToolMessage("[1] Scurvy: vitamin C", tool_call_id="toolu_01")])

    assert final.content == "Vitamin C. Answer: B"
    first_body, second_body = server.bodies()
    assert [t["name"] for t in first_body["tools"]] == ["search_web", "visit_web"]
    (result,) = [b for b in second_body["messages"][-1]["content"] if b.get("type") == "tool_result"]
    assert result["tool_use_id"] == "toolu_01" and "vitamin C" in json.dumps(result["content"])


async def test_429_then_success(server: Server) -> None:
    error = {"type": "error", "error": {"type": "rate_limit_error", "message": "rate limited"}}
    server.script += [(429, {"retry-after": "3"}, error), (200, {}, claude_text())]
    sleeps: list[float] = []

    async def fake_sleep(delay: float) -> None:
        sleeps.append(delay)

    model = claude(server)
    reply = await retry_async(lambda: model.ainvoke(QUESTION), RetryPolicy(max_retries=2), sleep=fake_sleep)

    assert reply.content == "The answer is B."
    assert len(server.requests) == 2 and sleeps == [3.0]


async def test_5xx_exhausted_is_an_error_step(server: Server) -> None:
    error = {"type": "error", "error": {"type": "api_error", "message": "Internal server error"}}
    server.script += [(503, {}, error)] * 3
    ctx = DefenderContext(model=claude(server), retry=RetryPolicy(max_retries=2, base_delay=0))

    with pytest.raises(Exception) as info:
        await ctx.generate(QUESTION)

    assert classify(info.value)[0] is True
    assert len(server.requests) == 3
    assert ctx.trace[-1].error is not None and "Internal server error" in ctx.trace[-1].error


def test_missing_integration_is_one_clear_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ModelConfigError) as info:
        load_model("langchain:mistralai:mistral-large-latest")
    message = str(info.value)
    assert "\n" not in message and "pip install langchain-mistralai" in message

    data = Path(__file__).resolve().parents[1] / "fixtures" / "medmisbench_sample.jsonl"
    code = main(["run", "--data", str(data), "--limit", "1", "--model", "langchain:mistralai:m",
                 "--defender", "none", "--out", str(tmp_path / "run"), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "langchain-mistralai" in err[0]


@pytest.mark.parametrize("spec", ["langchain:anthropic", "langchain:", "langchain/claude"])
def test_malformed_langchain_specs(spec: str) -> None:
    with pytest.raises(ValueError):
        load_model(spec)
