"""The SDK clients' HTTP clients (agents/_http.py) against a real 127.0.0.1 server (no respx):
the SDKs' own transports under the toolkit's bounded clients."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import openai
import pytest

from medmis.agents import ModelOptions, aclose_transports, classify, load_model
from medmis.experiments.bench._fake_openai import FakeOpenAIServer
from medmis.tools import Httpx2BoundedAsyncClient


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_openai_model_sends_through_a_bounded_client_in_one_loop_then_another(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-http-00000000000000000000")

    async def ask(server: FakeOpenAIServer, chat: object) -> str:
        replies = await asyncio.gather(*(chat.ainvoke(f"question {i}") for i in range(20)))  # type: ignore[attr-defined]
        await aclose_transports()  # as a run does at its end
        return str(replies[-1].content)

    async def both() -> tuple[str, int]:
        async with FakeOpenAIServer(latency_s=0.0, reply="Final answer: B") as server:
            chat = load_model("openai/local", ModelOptions(base_url=server.base_url))
            assert isinstance(chat.http_async_client, Httpx2BoundedAsyncClient)  # type: ignore[attr-defined]
            return await ask(server, chat), server.requests

    assert asyncio.run(both()) == ("Final answer: B", 20)
    assert asyncio.run(both()) == ("Final answer: B", 20)  # a new loop, new clients: nothing stale


def test_a_refused_connection_through_the_sdk_reads_as_a_retryable_connection_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-http-00000000000000000000")
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


def test_a_client_left_open_by_an_ended_event_loop_does_not_fail_the_next_runs_close(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that ended without closing (an error, a test) leaves a client whose connections
    belong to its finished loop; the next run's aclose_transports must not raise on it
    ("Event loop is closed" failed two replica runs in the suite)."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-http-00000000000000000000")

    async def leave_open() -> None:
        async with FakeOpenAIServer(latency_s=0.0, reply="Final answer: B") as server:
            chat = load_model("openai/local", ModelOptions(base_url=server.base_url))
            await chat.ainvoke("question")  # a pooled connection stays open, unclosed

    asyncio.run(leave_open())
    asyncio.run(aclose_transports())  # another loop's close: no RuntimeError


def test_every_client_the_toolkit_makes_shares_one_ssl_context_per_family() -> None:
    # building a verifying context reads the CA bundle (about 50 ms): once per process, not per client
    import ssl

    from medmis.agents._http import (
        async_client,
        httpx2_async_client,
        httpx2_sync_client,
        sync_client,
    )
    from medmis.tools._bounded import BoundedClient, shared_ssl_context

    def context(client: Any) -> ssl.SSLContext:
        return client._transport._pool._ssl_context  # type: ignore[union-attr]

    old = [async_client(5.0), sync_client(5.0)]
    new = [httpx2_async_client(5.0), httpx2_sync_client(5.0)]
    assert {id(context(c)) for c in old} == {id(shared_ssl_context("httpx"))}
    assert {id(context(c)) for c in new} == {id(shared_ssl_context("httpx2"))}
    assert shared_ssl_context("httpx").verify_mode == ssl.CERT_REQUIRED and shared_ssl_context("httpx").check_hostname
    # a context the caller gives is kept
    mine = ssl.create_default_context()
    assert context(BoundedClient(deadline_s=None, verify=mine)) is mine
