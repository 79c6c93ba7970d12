"""Credentials in every form they travel in stay off disk: raw, base64 and percent-encoded.

A ``user:pass@`` base URL goes out as ``Authorization: Basic base64(user:pass)``. The server
here (a real one on 127.0.0.1, behind the real OpenAI SDK) echoes that header, the key's
base64 and the password's percent-encoding in its replies and in its 401 bodies. A run, its
report, a review pack with its forms and a ``medmis generate`` must write none of them.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote

import pytest
from test_no_secrets_on_disk import ITEMS, JsonHandler

from medmis.experiments.cli import main
from medmis.tools import configured_secrets, json_needs_redaction, redact

ROOT = Path(__file__).resolve().parents[1]
KEY = "zq-echoing-gateway-5e1d9c3b7a"
USER = "gw-user"
PASSWORD = "hunter2/gate@way-pw"  # characters a URL must percent-encode
PAIR = f"{USER}:{PASSWORD}"
BASIC = base64.b64encode(PAIR.encode()).decode()
OK_CALLS = 6


def _forms() -> dict[str, str]:
    return {
        "key": KEY, "password": PASSWORD, "pair": PAIR,
        "basic": BASIC, "basic-unpadded": BASIC.rstrip("="),
        "key-base64": base64.b64encode(KEY.encode()).decode().rstrip("="),
        "password-urlencoded": quote(PASSWORD, safe=""), "pair-urlencoded": quote(PAIR, safe=""),
    }


class _Echo(JsonHandler):
    calls = 0
    lock = threading.Lock()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with self.lock:
            type(self).calls += 1
            ok = type(self).calls <= OK_CALLS
        sent = self.headers.get("Authorization", "")
        echo = (f"auth={sent} key64={_forms()['key-base64']} "
                f"next=https://proxy.example/?u={_forms()['password-urlencoded']}")
        if ok:
            content = json.dumps({"answer": "B", "reason": f"vitamin C ({echo})"})
            self._send(200, {
                "id": "c1", "object": "chat.completion", "created": 1, "model": "m",
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": content}}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            })
            return
        self._send(401, {"error": {"message": f"Incorrect API key provided: {KEY}. {echo}",
                                   "type": "invalid_request_error", "code": "invalid_api_key"}})


@pytest.fixture
def echo_server() -> Iterator[int]:
    _Echo.calls = 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _leaks(paths: list[Path]) -> list[str]:
    found = []
    for path in paths:
        blob = path.read_bytes()
        found += [f"{name} in {path.name}" for name, value in _forms().items() if value.encode() in blob]
    return found


def _url(port: int) -> str:
    return f"http://{USER}:{quote(PASSWORD, safe='')}@127.0.0.1:{port}/v1"


def test_a_run_its_report_and_a_review_pack_hold_no_form_of_the_credentials(
    echo_server: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    data = tmp_path / "items.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ITEMS), encoding="utf-8")
    out = tmp_path / "run"
    code = main([
        "run", "--data", str(data), "--model", "openai/gateway-model", "--model-base-url", _url(echo_server),
        "--defender", "none", "--out", str(out), "--max-connections", "1", "--max-retries", "0",
        "--no-progress",
    ])
    assert code == 1 and _Echo.calls > OK_CALLS  # answers and 401s were both served
    assert main(["report", str(out)]) == 0
    assert "Incorrect API key" in (out / "records.jsonl").read_text(encoding="utf-8")
    traces = list((out / "traces").glob("*.jsonl"))
    assert any("vitamin C (auth=Basic ***" in p.read_text(encoding="utf-8") for p in traces)
    written = [p for p in out.rglob("*") if p.is_file()]
    assert {p.name for p in written} >= {"manifest.json", "records.jsonl", "report.html"}
    assert any(p.parent.name == "traces" for p in written)
    assert _leaks(written) == []

    # a run folder written before the masking (as an older medmis left it), reviewed by a
    # process that knows the URL from the environment: the pack and its forms are masked
    monkeypatch.setenv("OPENAI_BASE_URL", _url(echo_server))
    for path in traces:
        text = path.read_text(encoding="utf-8")
        path.write_text(text.replace("vitamin C (", f"vitamin C (Basic {BASIC} u={quote(PASSWORD, safe='')} "),
                        encoding="utf-8")
    assert _leaks(traces)
    pack = tmp_path / "pack"
    assert main(["review", "sample", str(out), "--n", "1", "--out", str(pack), "--dual", "0"]) == 0
    assert main(["review", "form", str(pack)]) == 0
    packed = [p for p in pack.rglob("*") if p.is_file()]
    assert any(p.suffix == ".html" for p in packed)
    assert _leaks(packed) == []


def test_generate_writes_no_form_of_the_credentials(
    echo_server: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    _Echo.calls = OK_CALLS  # every call is a 401 echoing the key and the Basic credential
    out = tmp_path / "gen" / "OUT.jsonl"
    code = main(["generate", str(ROOT / "fixtures" / "generate" / "medqa_sample.jsonl"), "--out", str(out),
                 "--generator", "openai/gen-model", "--model-base-url", _url(echo_server), "--limit", "2"])
    assert code == 1
    log = out.with_name("OUT.generation.jsonl").read_text(encoding="utf-8")
    assert "Incorrect API key" in log
    manifest = json.loads(out.with_name("OUT.manifest.json").read_text(encoding="utf-8"))
    assert manifest["fingerprint"]["base_url"] == f"http://127.0.0.1:{echo_server}/v1"
    assert _leaks([p for p in out.parent.rglob("*") if p.is_file()]) == []


def test_every_form_is_known_and_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"https://{USER}:{quote(PASSWORD, safe='')}@gw.example/")
    known = configured_secrets()
    for name, value in _forms().items():
        text = f"echo: {value} (end)"
        assert json_needs_redaction(json.dumps({"m": text}), known), name
        assert value not in redact(text), name


def test_a_basic_credential_is_masked_by_shape_and_words_are_not() -> None:
    assert redact(f"Authorization: Basic {base64.b64encode(b'someone:else-entirely').decode()}", []) \
        == "Authorization: Basic ***"
    assert redact("basic science says basic life support", []) == "basic science says basic life support"
    assert not json_needs_redaction(json.dumps({"t": "basic science and basic life support"}), [])
