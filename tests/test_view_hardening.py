"""``medmis view`` against the real server on 127.0.0.1: bad parameters, foreign Host
headers (DNS rebinding) and a busy port."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from medmis.experiments.view import RunView, serve_in_thread


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    run = tmp_path_factory.mktemp("view") / "run"
    run.mkdir()
    records = [{"model": "m", "defender": "none", "protocol": p, "subset": "S", "item_id": f"i{i}",
                "target": None if p == "clean" else "B", "gold": "A", "choice": "A", "correct": True,
                "error": None, "content_type": None, "provenance": None, "trace_file": None}
               for i in range(3) for p in ("clean", "type1")]
    (run / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), "utf-8")
    view = RunView(run)
    server, _ = serve_in_thread(view)
    try:
        yield server.server_address[1], run
    finally:
        server.shutdown()
        server.server_close()
        view.close()


def _get(port: int, path: str, host: str | None = None) -> tuple[int, dict[str, object]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.putrequest("GET", path, skip_host=True)
        conn.putheader("Host", host if host is not None else f"127.0.0.1:{port}")
        conn.endheaders()
        response = conn.getresponse()
        body = response.read()
    finally:
        conn.close()
    assert body, f"{path}: empty reply"
    return response.status, json.loads(body) if body.startswith(b"{") else {"html": body.decode()}


@pytest.mark.parametrize("query", [
    "offset=99999999999999999999999", "offset=-1", "offset=1e3", "offset=abc", "offset=%C2%B9",
    "limit=0", "limit=501", "limit=x", "outcome=nope", "q=" + "x" * 2000, "model=a%00b",
    "q=%ff", "item=" + "%ff" * 3,
])
def test_bad_parameters_get_a_400_with_a_message(served: tuple[int, Path], query: str) -> None:
    port, _ = served
    status, body = _get(port, f"/api/cases?{query}")
    assert status == 400, (query, status, body)
    assert isinstance(body.get("error"), str) and body["error"]


def test_a_huge_offset_names_the_parameter_and_good_ones_still_work(served: tuple[int, Path]) -> None:
    port, _ = served
    status, body = _get(port, "/api/cases?offset=99999999999999999999999")
    assert status == 400 and "offset must be a whole number from 0 to" in str(body["error"])
    status, body = _get(port, "/api/cases?offset=4&limit=500")
    assert status == 200 and body["total"] == 6 and len(body["rows"]) == 2  # type: ignore[arg-type]
    status, body = _get(port, "/api/case?model=m&defender=none&protocol=clean&item_key=" + "k" * 5000)
    assert status == 400


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "[::1]:{port}", "LOCALHOST:{port}"])
def test_the_local_names_with_the_port_are_served(served: tuple[int, Path], host: str) -> None:
    port, _ = served
    assert _get(port, "/api/facets", host.format(port=port))[0] == 200


@pytest.mark.parametrize("host", ["evil.example:{port}", "evil.example", "127.0.0.1", "localhost:1",
                                  "127.0.0.1:{port}.evil.example", ""])
def test_a_foreign_host_header_is_refused(served: tuple[int, Path], host: str) -> None:
    port, _ = served
    for path in ("/", "/api/facets", "/api/cases", "/app.js"):
        status, body = _get(port, path, host.format(port=port))
        assert status == 403, (host, path, status)
        assert "answers only to 127.0.0.1" in str(body["error"])


def test_a_busy_port_is_one_line_and_exit_2(served: tuple[int, Path]) -> None:
    _, run = served
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "medmis.experiments.cli", "view", str(run), "--port",
                               str(port)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done
    assert done.stderr.strip().splitlines() == [f"medmis: port {port} is in use; pass --port"], done.stderr
    assert "Traceback" not in done.stderr
