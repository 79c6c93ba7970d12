"""The SDK clients' HTTP transport (agents/_transport.py) and the OpenAI fast path's wire body.

The transport runs for real here against a 127.0.0.1 server (no respx): one aiohttp session
per event loop, httpx's own errors for a refused connection, the environment switch and the
proxy fallback. The fast path's request body is compared with what the openai SDK's own
``create()`` puts on the wire for the same payload.
"""

from __future__ import annotations

import asyncio
import gc
import json
import socket
import warnings
from typing import Any

import httpx
import openai
import pytest
import respx
from raw_http import RawServer

from medmis.agents import ModelOptions, aclose_transports, classify, load_model
from medmis.agents._openai import _wire_body
from medmis.agents._transport import LoopLocalAiohttpTransport, async_client, transport_kind
from medmis.experiments.bench._fake_openai import FakeOpenAIServer


def _transport(client: httpx.AsyncClient) -> Any:
    return client._transport


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_default_is_aiohttp_and_env_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEDMIS_HTTP_TRANSPORT", raising=False)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert transport_kind() == "aiohttp"
    assert isinstance(_transport(async_client(5)), LoopLocalAiohttpTransport)
    monkeypatch.setenv("MEDMIS_HTTP_TRANSPORT", "httpx")
    assert isinstance(_transport(async_client(5)), httpx.AsyncHTTPTransport)
    monkeypatch.setenv("MEDMIS_HTTP_TRANSPORT", "curl")
    with pytest.raises(ValueError, match="MEDMIS_HTTP_TRANSPORT"):
        transport_kind()


def test_a_proxy_in_the_environment_keeps_httpx_transport(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEDMIS_HTTP_TRANSPORT", raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    assert isinstance(_transport(async_client(5)), httpx.AsyncHTTPTransport)


def test_one_session_per_event_loop_and_closed_at_the_end() -> None:
    """The same model answers from two event loops in turn; closing leaves no open session."""

    async def serve_and_ask(client: httpx.AsyncClient) -> tuple[str, Any]:
        async with FakeOpenAIServer(latency_s=0.0, reply="Final answer: C") as server:
            response = await client.post(f"{server.base_url}/chat/completions", json={"model": "m", "messages": []})
            session = _transport(client)._per_loop[asyncio.get_running_loop()]
            await aclose_transports()
            assert session.closed
            return response.json()["choices"][0]["message"]["content"], session

    client = async_client(5)
    first, session_a = asyncio.run(serve_and_ask(client))
    second, session_b = asyncio.run(serve_and_ask(client))
    assert first == second == "Final answer: C"
    assert session_a is not session_b
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del session_a, session_b
        gc.collect()
    assert not [w for w in caught if "Unclosed" in str(w.message)]


def test_openai_model_over_the_real_transport(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEDMIS_HTTP_TRANSPORT", raising=False)

    async def ask() -> str:
        async with FakeOpenAIServer(latency_s=0.0, reply="Final answer: B") as server:
            chat = load_model("openai/local", ModelOptions(base_url=server.base_url))
            replies = await asyncio.gather(*(chat.ainvoke(f"question {i}") for i in range(20)))
            await aclose_transports()
            assert server.requests == 20
            return str(replies[-1].content)

    assert asyncio.run(ask()) == "Final answer: B"


def test_refused_connection_is_a_connect_error_not_a_timeout() -> None:
    url = f"http://127.0.0.1:{_free_port()}/v1/chat/completions"

    async def call() -> BaseException:
        client = async_client(5)
        try:
            await client.post(url, json={})
        except httpx.TransportError as exc:
            return exc
        finally:
            await aclose_transports()
        raise AssertionError("the request should have failed")

    exc = asyncio.run(call())
    assert type(exc) is httpx.ConnectError
    assert classify(exc)[0]  # retryable


def test_refused_connection_through_the_sdk_reads_as_a_connection_error() -> None:
    url = f"http://127.0.0.1:{_free_port()}/v1"

    async def call() -> BaseException:
        chat = load_model("openai/local", ModelOptions(base_url=url, timeout_s=5))
        try:
            await chat.ainvoke("hi")
        except Exception as exc:  # the test inspects what surfaced
            return exc
        finally:
            await aclose_transports()
        raise AssertionError("the call should have failed")

    exc = asyncio.run(call())
    assert isinstance(exc, openai.APIConnectionError)
    assert not isinstance(exc, openai.APITimeoutError)
    assert classify(exc)[0]  # retryable


PAYLOADS: list[dict[str, Any]] = [
    {"model": "m", "messages": [{"role": "user", "content": "Scurvy?"}], "temperature": 0.0, "stream": False},
    {
        "model": "m",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Which?"}],
        "max_tokens": 64,
        "seed": 3,
        "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}}},
        "extra_body": {"top_k": 20, "chat_template_kwargs": {"enable_thinking": False}},
        "stream": False,
    },
    {
        "model": "m",
        "messages": [
            {"role": "user", "content": "find"},
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "result"},
        ],
        "tools": [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}],
        "reasoning_effort": "none",
        "stream": False,
    },
]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_fast_path_body_equals_the_sdk_create_body(payload: dict[str, Any]) -> None:
    """What ``_wire_body`` posts is what ``chat.completions.create(**payload)`` would post."""
    reply = {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
             "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]}

    async def bodies() -> tuple[Any, Any]:
        with respx.mock(using="httpx") as mock:
            route = mock.post("http://sdk.test/v1/chat/completions").mock(return_value=httpx.Response(200, json=reply))
            client = openai.AsyncOpenAI(base_url="http://sdk.test/v1", api_key="sk-test", http_client=httpx.AsyncClient())
            await client.chat.completions.create(**payload)
            await client.post("/chat/completions", body=_wire_body(payload), cast_to=openai.types.chat.ChatCompletion)
            return json.loads(route.calls[0].request.content), json.loads(route.calls[1].request.content)

    via_create, via_post = asyncio.run(bodies())
    assert via_post == via_create


def _exchange(reply: bytes | None, *, stall_s: float = 0.0, timeout_s: float = 5) -> tuple[Any, list[bytes]]:
    async def go() -> tuple[Any, list[bytes]]:
        server = RawServer(reply, stall_s=stall_s)
        async with server as url:
            client = async_client(timeout_s)
            try:
                response = await client.post(f"{url}/v1/x", json={"q": "é"}, headers={"X-Trace": "1"})
                return response, server.requests
            except httpx.TransportError as exc:
                return exc, server.requests
            finally:
                await aclose_transports()

    return asyncio.run(go())


def test_request_goes_out_as_httpx_built_it_and_gzip_is_decoded_once() -> None:
    import gzip

    body = gzip.compress(json.dumps({"ok": "ü"}).encode())
    reply = (b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
             b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
    response, requests = _exchange(reply)
    assert response.status_code == 201 and response.reason_phrase == "Created"
    assert response.json() == {"ok": "ü"}
    sent = requests[0]
    head, _, payload = sent.partition(b"\r\n\r\n")
    assert json.loads(payload) == {"q": "é"}
    lines = head.lower().split(b"\r\n")
    assert b"x-trace: 1" in lines and b"content-type: application/json" in lines
    assert sum(line.startswith(b"content-length:") for line in lines) == 1
    assert not any(b"aiohttp" in line for line in lines)  # httpx's User-Agent, not aiohttp's


def test_a_hang_up_is_a_remote_protocol_error_and_a_stall_a_read_timeout() -> None:
    hung_up, _ = _exchange(None)
    assert type(hung_up) is httpx.RemoteProtocolError
    stalled, _ = _exchange(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", stall_s=1.0, timeout_s=0.2)
    assert isinstance(stalled, httpx.ReadTimeout)  # the read timeout or the request deadline, both 0.2 s
    assert classify(hung_up)[0] and classify(stalled)[0]
