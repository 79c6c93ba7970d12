"""The request deadline and the reply size cap, against real servers on 127.0.0.1.

A server that drips its reply one byte at a time never trips a per-read timeout; the deadline
(``--model-timeout``) must end the call anyway, for every provider. A reply
over the size cap must fail the call (not retried) without being read whole.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import tracemalloc
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from raw_http import RawServer
from test_decoded_caps import gzip_bomb

from medmis.agents import ModelOptions, aclose_transports, classify, load_model
from medmis.tools._bounded import BoundedAsyncClient, RequestDeadlineError, ResponseTooLargeError

PROVIDERS = ("openai", "google", "anthropic")
# a long, well-formed head: dripped at 0.05 s a byte it takes ~10 s, far past the 1 s deadline
_SLOW_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + b"X-Pad: " + b"p" * 150 + b"\r\n"


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-bounds-0000000000000000")
    monkeypatch.setenv("GOOGLE_API_KEY", "AIza-test-bounds-000000000000000000000")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-bounds-000000000000000")
    for name in ("OPENAI_BASE_URL", "GOOGLE_GEMINI_BASE_URL", "ANTHROPIC_BASE_URL",
                 "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


def _model(provider: str, url: str, **options: Any) -> Any:
    base = f"{url}/v1" if provider == "openai" else url
    name = {"openai": "gpt-test", "google": "gemini-test", "anthropic": "claude-test"}[provider]
    return load_model(f"{provider}/{name}", ModelOptions(base_url=base, **options))


async def _call(provider: str, server: RawServer, **options: Any) -> tuple[BaseException | None, float]:
    async with server as url:
        chat = _model(provider, url, **options)
        start = time.monotonic()
        try:
            # the outer bound only keeps a regression from hanging the suite
            await asyncio.wait_for(chat.ainvoke("hi"), timeout=15)
        except Exception as exc:
            return exc, time.monotonic() - start
        finally:
            await aclose_transports()
    return None, time.monotonic() - start


def _chain(exc: BaseException | None) -> list[BaseException]:
    out = []
    while exc is not None and len(out) < 10:
        out.append(exc)
        exc = exc.__cause__ or exc.__context__
    return out


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_dripping_server_is_cut_off_at_the_deadline(
    provider: str
) -> None:
    server = RawServer(_SLOW_HEAD + b"\r\n{}", drip_s=0.05)
    exc, elapsed = asyncio.run(_call(provider, server, timeout_s=1.0))
    assert not isinstance(exc, asyncio.TimeoutError | None), f"{provider}: {exc!r} after {elapsed:.1f} s"
    assert elapsed < 4, f"{provider} held the call {elapsed:.1f} s"
    assert any(isinstance(e, RequestDeadlineError) for e in _chain(exc)), repr(exc)
    assert classify(exc)[0]  # a timeout: retried, as the per-read timeout was
    assert server.sent < len(_SLOW_HEAD)  # the reply was still dripping when the call ended


def _big_head(length: int | None) -> bytes:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
    if length is not None:
        head += b"Content-Length: " + str(length).encode() + b"\r\n"
    return head + b"\r\n"


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "until-close"])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_reply_over_the_cap_fails_without_being_read(
    provider: str, declared: bool
) -> None:
    size = 50 * 1024 * 1024
    server = RawServer(_big_head(size if declared else None), filler=size)
    tracemalloc.start()
    try:
        exc, _ = asyncio.run(_call(provider, server, max_response_bytes=1024 * 1024))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(exc, ResponseTooLargeError), f"{provider}: {exc!r}"
    assert "larger than 1,048,576 bytes (the response size cap)" in str(exc)
    assert classify(exc) == (False, None)  # the same request gets the same reply: not retried
    assert peak < 16 * 1024 * 1024, f"peak {peak / 2**20:.0f} MiB"
    assert server.sent < size / 2, f"{server.sent / 2**20:.0f} MiB sent"


def test_the_default_cap_and_a_reply_under_it(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ModelOptions().max_response_bytes == 8 * 1024 * 1024
    body = b'{"ok": true}'

    async def go() -> httpx.Response:
        async with RawServer(_big_head(None) + body) as url, \
                BoundedAsyncClient(deadline_s=5, max_bytes=len(body), timeout=5) as client:
            return await client.get(url)

    assert asyncio.run(go()).json() == {"ok": True}


def test_model_options_refuse_a_cap_of_zero() -> None:
    with pytest.raises(ValueError):
        ModelOptions(max_response_bytes=0)


def _backend(kind: str, url: str) -> Any:
    if kind == "serper":
        from medmis.tools import SerperSearch

        return SerperSearch("serper-test-key", base_url=url, timeout=1.0)
    if kind == "jina":
        from medmis.tools import JinaReader

        return JinaReader("jina-test-key", base_url=url, timeout=1.0)
    from medmis.tools import TavilySearch

    return TavilySearch("tvly-test-key", base_url=url, timeout=1.0)


async def _use(kind: str, server: RawServer) -> tuple[BaseException | None, float]:
    async with server as url:
        backend = _backend(kind, url)
        start = time.monotonic()
        try:
            call = (backend.read("https://example.org/") if kind == "jina" else backend.search("q"))
            await asyncio.wait_for(call, timeout=15)
        except Exception as exc:
            return exc, time.monotonic() - start
        finally:
            await backend.aclose()
    return None, time.monotonic() - start


@pytest.mark.parametrize("kind", ["serper", "jina", "tavily"])
def test_web_backends_have_the_same_deadline_and_cap(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from medmis.tools import ToolError

    exc, elapsed = asyncio.run(_use(kind, RawServer(_SLOW_HEAD + b"\r\n{}", drip_s=0.05)))
    assert isinstance(exc, ToolError) and exc.kind == "timeout", repr(exc)
    assert elapsed < 4
    size = 50 * 1024 * 1024
    server = RawServer(_big_head(None), filler=size)
    exc, _ = asyncio.run(_use(kind, server))
    assert isinstance(exc, ToolError) and exc.kind == "content", repr(exc)
    assert "the response size cap" in str(exc)
    assert server.sent < size / 2


class _Huge(BaseHTTPRequestHandler):
    sent = 0
    gzip = False

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if self.gzip:
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Connection", "close")
        self.end_headers()
        if self.gzip:  # 4 MiB of zeros per segment: 50 MiB decoded in ~50 KB
            head, segment = gzip_bomb()
            blocks = [head, *[segment] * 12]
        else:
            blocks = [b" " * 65536] * (50 * 16)  # 50 MiB of JSON whitespace, no Content-Length
        try:
            for block in blocks:
                self.wfile.write(block)
                type(self).sent += len(block)
        except OSError:
            pass

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize("gzip", [False, True], ids=["plain", "gzip"])
def test_a_run_records_a_reply_over_the_cap_as_a_case_error(gzip: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    from test_no_secrets_on_disk import ITEMS

    from medmis.experiments.cli import main

    _Huge.sent, _Huge.gzip = 0, gzip
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Huge)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    data = tmp_path / "items.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ITEMS[:1]), encoding="utf-8")
    out = tmp_path / "run"
    try:
        code = main(["run", "--data", str(data), "--model", "openai/m", "--model-base-url",
                     f"http://127.0.0.1:{port}/v1", "--defender", "none",
                     "--protocol", "clean", "--out", str(out), "--max-response-mb", "1", "--no-progress"])
    finally:
        server.shutdown()
        server.server_close()
    assert code == 1  # finished with case errors
    (record,) = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    # one case error naming the server's host and port; counted decoded for a gzip reply
    assert record["error"] == (f"ResponseTooLargeError: the reply from http://127.0.0.1:{port}/v1/chat/completions "
                               "is larger than 1,048,576 bytes (the response size cap)")
    assert _Huge.sent < 25 * 2**20  # one attempt (not retried), stopped early
    with pytest.raises(SystemExit) as stop:
        main(["run", "--data", str(data), "--model", "openai/m", "--defender", "none",
              "--out", str(tmp_path / "other"), "--max-response-mb", "0"])
    assert stop.value.code == 2
    assert "--max-response-mb: expected a number of MiB above 0, got '0'" in capsys.readouterr().err
    assert not (tmp_path / "other").exists()


def _clients(library: str, **bounds: Any) -> Any:
    if library == "httpx2":
        from medmis.tools._bounded_httpx2 import Httpx2BoundedAsyncClient

        return Httpx2BoundedAsyncClient(timeout=5, **bounds)
    return BoundedAsyncClient(timeout=5, **bounds)


@pytest.mark.parametrize("library", ["httpx", "httpx2"])
def test_the_sdks_own_http_library_gets_the_same_deadline(library: str) -> None:
    # httpx2 is what the SDKs' default clients are made of: the bound must not depend on ours
    server = RawServer(_SLOW_HEAD + b"\r\n{}", drip_s=0.05)

    async def go() -> tuple[BaseException | None, float]:
        async with server as url, _clients(library, deadline_s=1.0) as client:
            start = time.monotonic()
            try:
                await asyncio.wait_for(client.get(url), timeout=15)
            except Exception as exc:
                return exc, time.monotonic() - start
        return None, time.monotonic() - start

    exc, elapsed = asyncio.run(go())
    assert isinstance(exc, RequestDeadlineError), repr(exc)
    assert elapsed < 3, f"{library} held the call {elapsed:.1f} s"
    if library == "httpx2":
        import httpx2

        assert isinstance(exc, httpx2.ReadTimeout)  # the SDK reports its own timeout


@pytest.mark.parametrize("library", ["httpx", "httpx2"])
def test_bounded_clients_ask_only_for_encodings_they_decode(library: str) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: zstd\r\nConnection: close\r\n\r\n"
    server = RawServer(head + b"(\xb5/\xfd not really zstd")

    async def go() -> BaseException | None:
        async with server as url, _clients(library, deadline_s=5) as client:
            try:
                await client.get(url)
            except Exception as exc:
                return exc
        return None

    exc = asyncio.run(go())
    assert b"\r\naccept-encoding: gzip, deflate\r\n" in server.requests[0].lower()
    assert type(exc).__name__ == "DecodingError", repr(exc)
    assert "content encoding 'zstd' is not read" in str(exc)


def _compress(body: bytes, encoding: str) -> bytes:
    if encoding == "gzip":
        return zlib.compress(body, wbits=16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        return zlib.compress(body)  # zlib-wrapped, as the RFC has it
    obj = zlib.compressobj(wbits=-zlib.MAX_WBITS)  # raw deflate, as some servers send it
    return obj.compress(body) + obj.flush()


@pytest.mark.parametrize("library", ["httpx", "httpx2"])
@pytest.mark.parametrize("encoding", ["gzip", "deflate", "raw-deflate"])
def test_a_compressed_reply_under_the_cap_is_decoded_once(library: str, encoding: str) -> None:
    body = json.dumps({"ok": "ü" * 5000}).encode()
    packed = _compress(body, encoding)
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: "
            + encoding.removeprefix("raw-").encode() + b"\r\nContent-Length: " + str(len(packed)).encode() + b"\r\n\r\n")

    async def go() -> Any:
        async with RawServer(head + packed) as url, _clients(library, deadline_s=5, max_bytes=len(body)) as client:
            return await client.get(url)

    response = asyncio.run(go())
    assert response.json() == {"ok": "ü" * 5000}
    assert "content-encoding" not in response.headers  # the body handed on is the decoded one
