"""A tiny OpenAI-compatible chat server on 127.0.0.1 for benchmarks and tests.

It answers ``POST /v1/chat/completions`` after a fixed latency with a fixed reply and
documented-shape JSON (id, choices, usage). Written on asyncio streams so it needs no web
framework; HTTP/1.1 keep-alive is supported because the openai client reuses connections.

``python -m medmis.experiments.bench._fake_openai --latency 0.1`` serves it from a separate process (it
prints its base URL and the request count on exit), so a benchmark does not charge the
server's CPU to the harness it measures. ``--capacity N`` lets it work on at most N requests
at once, the rest waiting their turn, like an inference server's batch limit: N / latency
requests per second at most. Its listen backlog is large so that many concurrent connects
are queued rather than refused.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class FakeOpenAIServer:
    latency_s: float = 0.1
    reply: str = "Reasoning about the options.\nFinal answer: A"
    host: str = "127.0.0.1"
    port: int = 0
    requests: int = 0
    max_in_flight: int = 0
    capacity: int | None = None
    """Requests processed at once at most (None: no limit); the others queue."""
    backlog: int = 4096
    status: int = 200
    """The HTTP status of every answer; tests set 429 or 5xx to play a failing server."""
    headers: dict[str, str] = field(default_factory=dict)
    """Extra response headers (e.g. ``Retry-After`` with a 429)."""
    bodies: list[dict] | None = None
    """When a list, each request's JSON body is appended to it."""
    _in_flight: int = 0
    _slots: asyncio.Semaphore | None = field(default=None, repr=False)
    _server: asyncio.base_events.Server | None = field(default=None, repr=False)
    _writers: set[asyncio.StreamWriter] = field(default_factory=set, repr=False)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    async def __aenter__(self) -> FakeOpenAIServer:
        if self.capacity is not None:
            self._slots = asyncio.Semaphore(self.capacity)
        self._server = await asyncio.start_server(self._handle, self.host, self.port, backlog=self.backlog)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
            for writer in list(self._writers):  # idle keep-alive connections
                writer.close()
            await self._server.wait_closed()

    async def _work(self) -> None:
        self._in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self._in_flight)
        try:
            await asyncio.sleep(self.latency_s)
        finally:
            self._in_flight -= 1

    def _answer(self, payload: dict) -> dict:
        if self.status != 200:
            return {"error": {"message": f"fake server answering {self.status}", "type": "server_error"}}
        return {
            "id": f"chatcmpl-{self.requests}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": payload.get("model", "fake"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": self.reply},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
        }

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            for _ in range(100_000):  # bounded keep-alive loop
                request_line = await reader.readline()
                if not request_line:
                    break
                headers: dict[str, str] = {}
                for _ in range(200):
                    line = await reader.readline()
                    if line in (b"\r\n", b"\n", b""):
                        break
                    name, _, value = line.decode("latin-1").partition(":")
                    headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
                payload = json.loads(body or b"{}")
                self.requests += 1
                if self.bodies is not None:
                    self.bodies.append(payload)
                if self._slots is not None:
                    async with self._slots:
                        await self._work()
                else:
                    await self._work()
                data = json.dumps(self._answer(payload)).encode()
                reason = "OK" if self.status == 200 else "Error"
                extra = "".join(f"{k}: {v}\r\n" for k, v in self.headers.items())
                writer.write(
                    f"HTTP/1.1 {self.status} {reason}\r\nContent-Type: application/json\r\n{extra}".encode()
                    + f"Content-Length: {len(data)}\r\n\r\n".encode()
                    + data
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()



@contextmanager
def serve_in_processes(n: int, latency: float, *, capacity: int | None = None,
                       stats: list[dict[str, int]] | None = None) -> Iterator[list[str]]:
    """``n`` servers, each in its own process (its CPU is not charged to the client measured);
    yields their base URLs; on exit their ``requests``/``max_in_flight`` figures go to ``stats``."""
    extra = ["--capacity", str(capacity)] if capacity is not None else []
    procs = [
        subprocess.Popen([sys.executable, "-m", "medmis.experiments.bench._fake_openai", "--latency", str(latency), *extra],
                         stdout=subprocess.PIPE, text=True)
        for _ in range(n)
    ]
    try:
        yield [p.stdout.readline().strip() for p in procs]  # type: ignore[union-attr]
    finally:
        for p in procs:
            p.send_signal(signal.SIGINT)
        for p in procs:
            try:
                tail = p.communicate(timeout=30)[0].strip().splitlines()
            except subprocess.TimeoutExpired:
                # a server slow to stop (a loaded machine) must not hide the bench's own
                # outcome or error: it is ended and its figures are left out
                p.kill()
                p.communicate()
                tail = []
            figures = {k: int(v) for k, v in (kv.split("=") for kv in tail[-1].split())} if tail else {}
            if stats is not None:
                stats.append(figures)

async def _serve(latency: float, port: int, capacity: int | None = None) -> None:
    async with FakeOpenAIServer(latency_s=latency, port=port, capacity=capacity) as server:
        print(server.base_url, flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            print(f"requests={server.requests} max_in_flight={server.max_in_flight}", flush=True)


def main() -> None:
    import argparse
    import contextlib

    parser = argparse.ArgumentParser(description="OpenAI-compatible test server on 127.0.0.1")
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--capacity", type=int, default=None,
                        help="requests processed at once (the rest queue), as a GPU server's batch limit")
    args = parser.parse_args()
    if args.capacity is not None and args.capacity < 1:
        parser.error("--capacity must be at least 1")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args.latency, args.port, args.capacity))


if __name__ == "__main__":
    main()
