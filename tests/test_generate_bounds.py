"""``medmis generate`` and ``generate pages`` bound and retry each request as ``medmis run`` does.

Before, neither took ``--model-timeout`` or ``--max-retries``: a server that drips its reply one
byte at a time held one generator call for minutes (363 s measured), the per-read timeout never
firing. Here a dripping server on 127.0.0.1 must be cut at ``--model-timeout``, and
``--max-retries`` decides how many requests it sees.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import clear_provider_env

from medmis.experiments.cli import main

ROOT = Path(__file__).resolve().parents[1]
# a long, well-formed head: dripped at 0.05 s a byte it takes ~10 s, far past a 1 s deadline
_SLOW_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Pad: " + b"p" * 150 + b"\r\n\r\n{}"


class _DripServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Drip)
        self.started = 0
        self.held: list[float] = []  # seconds each request held on, until the client hung up

    def settled(self) -> list[float]:
        """What each request held, once every request has ended (the last hang-up is noticed
        at the next byte)."""
        for _ in range(60):
            if len(self.held) == self.started:
                break
            time.sleep(0.05)
        return self.held


class _Drip(BaseHTTPRequestHandler):
    server: _DripServer

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.started += 1
        start = time.monotonic()
        try:
            for i in range(len(_SLOW_HEAD)):
                self.wfile.write(_SLOW_HEAD[i:i + 1])
                self.wfile.flush()
                time.sleep(0.05)
        except OSError:  # the client gave up: what we want
            pass
        self.server.held.append(time.monotonic() - start)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def drip(monkeypatch: pytest.MonkeyPatch) -> Iterator[_DripServer]:
    clear_provider_env(monkeypatch, "openai")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-drip-000000000000000000")
    server = _DripServer()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


# the command line and the generator calls its first item makes (generate: the stage-1 filter,
# which fails; pages: one per Type 1 case, its three wrong options)
COMMANDS = {
    "generate": ["generate", str(ROOT / "fixtures" / "generate" / "medqa_sample.jsonl")],
    "generate pages": ["generate", "pages", "--from-release", str(ROOT / "fixtures" / "medmisbench_sample.jsonl"),
                       "--styles", "guideline"],
}
CALLS = {"generate": 1, "generate pages": 3}


@pytest.mark.parametrize("retries", [0, 1])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_dripping_server_is_cut_at_the_model_timeout(
    command: str, retries: int, drip: _DripServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.jsonl"
    url = f"http://127.0.0.1:{drip.server_address[1]}/v1"
    code = main([*COMMANDS[command], "--generator", "openai/gen", "--model-base-url", url,
                 "--out", str(out), "--limit", "1", "--max-connections", "1",
                 "--model-timeout", "1", "--max-retries", str(retries)])
    assert code == 1, capsys.readouterr().err  # finished with an error for the one item
    # the server's own clock, so that imports do not count: each attempt ended at its deadline
    # (the full drip takes 8 s), and --max-retries decided how many there were
    held = drip.settled()
    assert len(held) == CALLS[command] * (retries + 1), held
    assert max(held) < 2.0, f"{command} held a request {max(held):.1f} s"
    outcomes = [json.loads(line) for line in out.with_name("out.generation.jsonl").read_text().splitlines()]
    assert len(outcomes) == CALLS[command]
    for outcome in outcomes:
        assert outcome["status"] == "error"
        assert "Timeout" in outcome["reason"], outcome  # the SDK's name for our deadline
