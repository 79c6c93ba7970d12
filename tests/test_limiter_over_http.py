"""``medmis run`` through the real openai client against a local server that rate-limits a burst.

The server on 127.0.0.1 answers 429 with ``Retry-After: 1`` to its first eight requests (the
whole first wave of a run at eight connections), then answers like a model (50 ms each). The run must end with no errors, hold
every request back for the server's second, fall to half the connections and climb back to the
ceiling, and say so on its progress lines.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from conftest import clear_provider_env

from medmis.agents import ModelOptions
from medmis.experiments.harness import DefenderConfig, Harness, RunConfig
from medmis.experiments.records import read_records

DATA = Path(__file__).resolve().parents[1] / "fixtures" / "medmisbench_sample.jsonl"
CEILING = 8
RETRY_AFTER_S = 1


class RateLimitedModel:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.in_flight = 0
        self.limited: list[float] = []  # arrival times of the 429s
        self.served: list[tuple[float, int]] = []  # (arrival, requests in flight then)

    def arrive(self) -> tuple[bool, float]:
        with self.lock:
            now = time.monotonic()
            if len(self.limited) < CEILING:
                self.limited.append(now)
                return False, now
            self.in_flight += 1
            self.served.append((now, self.in_flight))
            return True, now

    def leave(self) -> None:
        with self.lock:
            self.in_flight -= 1


def reply(body: dict[str, Any]) -> dict[str, Any]:
    user = next(m["content"] for m in body["messages"] if m["role"] == "user")
    first = re.search(r"^Options:\n(\S+?):", user, re.M)
    letter = first.group(1) if first else "A"
    text = json.dumps({"thinking_process": "Weighing the options.", "answer_letter": letter})
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1_760_000_000, "model": "served-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "refusal": None},
                     "logprobs": None, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 300, "completion_tokens": 60, "total_tokens": 360},
    }  # fmt: skip


@pytest.fixture
def server() -> Iterator[tuple[str, RateLimitedModel]]:
    model = RateLimitedModel()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            ok, _ = model.arrive()
            if not ok:
                payload = json.dumps({"error": {"message": "rate limited", "type": "rate_limit"}}).encode()
                self.send_response(429)
                self.send_header("Retry-After", str(RETRY_AFTER_S))
            else:
                try:
                    time.sleep(0.05)
                    payload = json.dumps(reply(body)).encode()
                finally:
                    model.leave()
                self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    class Server(ThreadingHTTPServer):
        request_queue_size = 64  # the default backlog of 5 drops a wave of 8 connects (SYN retry: 1 s+)

    httpd = Server(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", model
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_429_burst_lowers_concurrency_honours_retry_after_and_recovers(
    server: tuple[str, RateLimitedModel], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    base_url, model = server
    clear_provider_env(monkeypatch, "openai")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    out = tmp_path / "run"
    config = RunConfig(
        data=str(DATA), models=["openai/served-model"], model_options=ModelOptions(base_url=base_url),
        defenders=[DefenderConfig(name="none")], out=str(out), progress=True, write_report=False,
        max_connections=CEILING,
    )  # the report is left out: it is not what is tested and would double the test's time
    harness = Harness(config, argv=["medmis", "run"])
    result = asyncio.run(harness.run())
    err = capsys.readouterr().err
    records = read_records(out / "records.jsonl")
    assert result.new_records == len(records) == 90 and all(r.error is None for r in records)
    limiter = harness.limiter
    assert (limiter.rate_limited, limiter.decreases, limiter.lowest, limiter.limit) == (CEILING, 1, CEILING // 2, CEILING)
    # the manifest keeps what the limiter did
    figures = json.loads((out / "manifest.json").read_text(encoding="utf-8"))["concurrency"]
    assert figures["ceiling"] == figures["final"] == CEILING
    assert (figures["lowest"], figures["rate_limited"], figures["decreases"]) == (CEILING // 2, CEILING, 1)
    assert figures["waited_s"] >= 0  # how long new calls were held back depends on timing

    # the whole first wave was refused; nothing was sent again before the server's second
    assert len(model.limited) == CEILING
    first_success = min(t for t, _ in model.served)
    assert first_success - max(model.limited) >= RETRY_AFTER_S - 0.02

    # half the connections after the burst, the ceiling again later
    in_flight = [n for _, n in sorted(model.served)]
    assert max(in_flight[:CEILING // 2]) <= CEILING // 2
    assert max(in_flight[40:]) > CEILING // 2

    lines = [line for line in err.splitlines() if line.startswith("medmis run:")]
    assert any(f"conc {CEILING // 2 + 2}/{CEILING} throttled ({CEILING} x 429)" in line for line in lines), lines
    assert lines[-1].endswith(f"conc {CEILING}/{CEILING}"), lines
