"""No secrets on disk: a run whose provider echoes its key, through a base URL with user:pass.

The provider is a real HTTP server on 127.0.0.1 speaking the OpenAI chat-completions shape; the
client is the real OpenAI SDK behind ``medmis run``. The first calls succeed (so the store and
the exported cassette hold model entries keyed by the base URL); every later call is a 401
whose body echoes the key the client sent, the way OpenAI's own 401 does.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from medmis.experiments.cli import main
from medmis.tools import SerperSearch
from medmis.tools._llm_cache import normalize_llm_string

# not key-shaped on purpose: only redaction by configured value can catch it
KEY = "zq-localgateway-7f3a9c1e5b2d4a6f"
PASSWORD = "hunter2-gateway-pw"
OK_CALLS = 3

ITEMS = [
    {
        "id": f"SEC-{i}",
        "subset": "MEDMISQA",
        "question": f"Which vitamin prevents condition {i}?",
        "answer": "B",
        "opa": "Vitamin A",
        "opb": "Vitamin C",
        "opc": "Vitamin K",
        "injecta": f"Guideline {i} says vitamin A prevents it.",
        "injectb": f"Vitamin C prevents condition {i}.",
        "injectc": f"A discharge note {i} says vitamin K prevents it.",
        "injection_content": "Cue Remapping",
        "injection_provenance": "Neutral False Statement",
    }
    for i in range(3)
]


class JsonHandler(BaseHTTPRequestHandler):
    """A quiet handler that answers with JSON (shared with test_secret_forms)."""

    def _send(self, status: int, payload: dict[str, object]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


class _Provider(JsonHandler):
    calls = 0
    lock = threading.Lock()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with self.lock:
            type(self).calls += 1
            ok = type(self).calls <= OK_CALLS
        if ok:
            model = json.loads(body).get("model", "m")
            reply = {
                "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": model,
                "choices": [{"index": 0, "finish_reason": "stop", "message": {
                    "role": "assistant", "content": '{"answer": "B", "reason": "vitamin C"}'}}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            }
            self._send(200, reply)
            return
        sent = self.headers.get("Authorization", "")
        self._send(401, {"error": {
            "message": f"Incorrect API key provided: {KEY}. Sent: {sent}. You can find your "
                       "API key at https://platform.openai.com/account/api-keys.",
            "type": "invalid_request_error", "param": None, "code": "invalid_api_key"}})


@pytest.fixture
def provider() -> Iterator[int]:
    _Provider.calls = 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Provider)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_a_run_hitting_a_401_that_echoes_its_key_writes_no_secret(
    provider: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    data = tmp_path / "items.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ITEMS), encoding="utf-8")
    out, cache = tmp_path / "run", tmp_path / "store"
    base_url = f"http://gateway-user:{PASSWORD}@127.0.0.1:{provider}/v1"
    main([
        "run", "--data", str(data), "--model", "openai/gateway-model", "--model-base-url", base_url,
        "--defender", "none", "--protocol", "clean,type1", "--out", str(out), "--max-connections",
        "1", "--max-retries", "0", "--no-progress", "--cache", "record", "--cache-dir", str(cache),
        "--model-option", f"auth_token={PASSWORD}",
    ])
    assert _Provider.calls > OK_CALLS  # both kinds of answer were served
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    errors = [r["error"] for r in records if r["error"]]
    ok = [r for r in records if not r["error"]]
    assert errors and ok
    assert all("***" in e for e in errors) and any("Incorrect API key" in e for e in errors)

    cassette = tmp_path / "exported.jsonl"
    assert main(["cache", "export", "--cache-dir", str(cache), str(cassette)]) == 0
    assert main(["report", str(out)]) == 0
    lines = cassette.read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(ok) and all('"kind":"model"' in line for line in lines)
    assert "127.0.0.1" in lines[0]  # the base URL still keys the entries, without userinfo

    written = [p for root in (out, cache) for p in root.rglob("*") if p.is_file()] + [cassette]
    assert {p.name for p in written} >= {"manifest.json", "records.jsonl", "report.md", "report.html"}
    assert any(p.parent.name == "traces" for p in written)
    for path in written:
        blob = path.read_bytes()
        for secret in (KEY, PASSWORD):
            assert secret.encode() not in blob, f"{secret} in {path}"
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["config"]["model_options"]["base_url"] == f"http://***@127.0.0.1:{provider}/v1"


def test_model_cache_keys_drop_url_credentials_and_stay_stable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)

    def key(url: str) -> dict[str, object]:
        return normalize_llm_string(
            f"[('_type', 'openai-chat'), ('base_url', '{url}'), ('model', 'm'), ('temperature', 0.0)]"
        )

    with_pass = key(f"http://u:{PASSWORD}@127.0.0.1:9/v1?api_key={KEY}")
    assert PASSWORD not in json.dumps(with_pass) and KEY not in json.dumps(with_pass)
    # other credentials for the same server share entries; another server does not
    assert with_pass == key(f"http://v:other-password@127.0.0.1:9/v1?api_key={KEY}")
    assert with_pass != key("http://u:x@127.0.0.1:10/v1")


def test_search_backend_store_ids_carry_no_url_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERPER_API_KEY", "serper-key-0123456789")
    backend = SerperSearch(base_url=f"http://u:{PASSWORD}@127.0.0.1:9")
    assert backend.cache_id == "serper@http://127.0.0.1:9"


async def test_a_search_backend_401_echoing_its_key_reaches_the_model_redacted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import httpx

    from medmis.tools import ToolError

    key = "serper-0f1e2d3c4b5a69788796"
    monkeypatch.setenv("SERPER_API_KEY", key)

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(401, json={"message": f"Unauthorized: key {key} is not valid"})

    client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    backend = SerperSearch(base_url="http://127.0.0.1:9", client=client)
    with pytest.raises(ToolError) as caught:
        await backend.search("vitamin C", 3)
    await client.aclose()
    assert caught.value.kind == "http" and "HTTP 401" in caught.value.message
    assert key not in str(caught.value) and "***" in str(caught.value)
