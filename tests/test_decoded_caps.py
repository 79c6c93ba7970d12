"""A gzip bomb against every HTTP client the toolkit configures: the cap counts decoded bytes.

The clients: each provider's model (both transports, async and sync), a ``langchain:`` model,
the SDKs' own client classes on the bounded ``httpx2`` client (what they use once the
toolkit's transport is gone), Serper, Tavily and Jina Reader.

A 4 MB gzip body of zeros inflates to 4 GiB. httpx decodes a reply one network chunk at a
time, whole, so before the cap counted decoded bytes such a reply took the process to
gigabytes (a MemoryError at 4.18 GB on a model call) and past its deadline. Here each client
meets the bomb on 127.0.0.1 in a child process, whose peak RSS is read at the end: every
call must end as an error naming the server's host and port, within its deadline, and the
child must stay far below what the decoded body would take.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

DEADLINE_S = 10.0  # far above what a capped call takes (~0.2 s): headroom for a loaded machine
MAX_RSS_MB = 300
_ZEROS = 4 * 1024 * 1024


def gzip_bomb() -> tuple[bytes, bytes]:
    """The head of a gzip stream of zeros and a segment that repeats it by another 4 MiB.

    Each segment ends in a full flush, which resets the compressor, so the next 4 MiB of
    zeros compress to the same bytes: any length of bomb is streamed without computing it.
    """
    c = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    head = c.compress(bytes(_ZEROS)) + c.flush(zlib.Z_FULL_FLUSH)
    segment = c.compress(bytes(_ZEROS)) + c.flush(zlib.Z_FULL_FLUSH)
    return head, segment


class _Bomb(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    head = segment = b""
    segments = 1023  # 4 GiB decoded, about 4 MB on the wire
    sent = 0

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Connection", "close")  # no length: the body runs until we hang up
        self.end_headers()
        try:
            self.wfile.write(self.head)
            for _ in range(self.segments):
                self.wfile.write(self.segment)
                type(self).sent += len(self.segment)
        except OSError:  # the client hung up: what we want
            pass

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def bomb_url() -> Iterator[str]:
    _Bomb.head, _Bomb.segment = gzip_bomb()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Bomb)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


# Runs in a child so that its peak RSS is this workload's alone. The address-space limit only
# keeps a regression from taking the shared machine's memory: it fails with MemoryError first.
_CHILD = r"""
import asyncio, json, os, resource, sys, time

url, deadline = sys.argv[1], float(sys.argv[2])
resource.setrlimit(resource.RLIMIT_AS, (3 * 2**29, 3 * 2**29))

from medmis.agents import ModelOptions, RetryPolicy, aclose_transports, load_model, retry_async
from medmis.tools import JinaReader, SerperSearch, TavilySearch


def chat(spec, base):
    return load_model(spec, ModelOptions(base_url=base, timeout_s=deadline))


async def ask(model):
    try:
        # as the harness calls a model: under the run's retry policy (the cap is not retried)
        await retry_async(lambda: model.ainvoke("hi"), RetryPolicy())
    finally:
        await aclose_transports()


async def ask_sync(model):
    model.invoke("hi")  # the SDK's synchronous client


def sdk_default(provider):
    # the SDK's own client class on the bounded httpx2 client (its default is an httpx2 one)
    import anthropic, openai
    from medmis.tools._bounded_httpx2 import Httpx2BoundedAsyncClient

    http = Httpx2BoundedAsyncClient(deadline_s=deadline, timeout=deadline)
    if provider == "openai":
        return openai.AsyncOpenAI(api_key="sk-test", base_url=url + "/v1", http_client=http, max_retries=0)
    return anthropic.AsyncAnthropic(api_key="sk-ant-test", base_url=url, http_client=http, max_retries=0)


async def ask_sdk(client):
    if hasattr(client, "chat"):
        call = lambda: client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    else:
        call = lambda: client.messages.create(model="m", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    await retry_async(call, RetryPolicy())


async def use(tool, call):
    try:
        await call(tool)
    finally:
        await tool.aclose()


# what each case makes (imports and SDK clients: not timed) and what it then calls (timed)
cases = {}
cases["openai"] = (lambda: chat("openai/m", url + "/v1"), ask)
cases["google"] = (lambda: chat("google/m", url), ask)
cases["anthropic"] = (lambda: chat("anthropic/m", url), ask)
cases["openai/sync"] = (lambda: chat("openai/m", url + "/v1"), ask_sync)
cases["langchain:openai"] = (lambda: chat("langchain:openai:m", url + "/v1"), ask)
cases["openai-sdk/httpx2"] = (lambda: sdk_default("openai"), ask_sdk)
cases["anthropic-sdk/httpx2"] = (lambda: sdk_default("anthropic"), ask_sdk)
cases["serper"] = (lambda: SerperSearch("k", base_url=url, timeout=deadline), lambda s: use(s, lambda s: s.search("q")))
cases["tavily"] = (lambda: TavilySearch("k", base_url=url, timeout=deadline), lambda s: use(s, lambda s: s.search("q")))
cases["jina"] = (lambda: JinaReader("k", base_url=url, timeout=deadline),
                 lambda j: use(j, lambda j: j.read("https://example.org/")))

def peak_rss_mb():
    # VmHWM, not getrusage's ru_maxrss: Linux keeps ru_maxrss across execve, so the child would
    # report the pytest worker's size at fork (it grows with every test run before this one)
    with open("/proc/self/status") as status:
        kb = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    return kb / 1024


results = []
for name, (make, call) in cases.items():
    made = make()
    start = time.monotonic()
    error = None
    try:
        # the outer bound only keeps a regression from hanging the suite
        asyncio.run(asyncio.wait_for(call(made), 60))
    except BaseException as exc:
        error = f"{type(exc).__name__}: {exc}"
    results.append({"case": name, "error": error, "elapsed": time.monotonic() - start,
                    "rss_mb": peak_rss_mb()})
print(json.dumps(results))
"""


def test_a_gzip_bomb_ends_every_call_as_an_error_within_its_deadline_and_memory(bomb_url: str) -> None:
    env = {k: v for k, v in os.environ.items()
           if not k.upper().endswith(("_PROXY", "_BASE_URL"))}
    env.update(OPENAI_API_KEY="sk-test-bomb-00000000000000000000", GOOGLE_API_KEY="AIza-test-bomb-0000000000000000",
               ANTHROPIC_API_KEY="sk-ant-test-bomb-0000000000000000")
    done = subprocess.run([sys.executable, "-c", _CHILD, bomb_url, str(DEADLINE_S)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    where = bomb_url.removeprefix("http://")
    for result in results:
        case, error = result["case"], result["error"] or ""
        assert where in error, f"{case}: {error!r} does not name {where}"
        assert "larger than 8,388,608 bytes" in error, f"{case}: {error!r}"
        assert result["elapsed"] < DEADLINE_S, f"{case} took {result['elapsed']:.1f} s"
        assert result["rss_mb"] < MAX_RSS_MB, f"{case}: peak RSS {result['rss_mb']:.0f} MB"
    assert len(results) == 10
