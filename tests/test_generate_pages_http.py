"""``medmis generate pages`` through the real google-genai and openai clients against respx.

The endpoint plays a generator that follows the page schema it is sent and the prompt's
labelled lines: it writes a page naming the answer it is asked to argue for. Replies off the
schema are recorded as malformed (exit 1), never written; a replay from the store with no
network gives the same file byte for byte.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
import test_generate_http as generate_http
from conftest import clear_provider_env

from medmis.experiments.cli import main
from medmis.experiments.generate._prompts import CHINESE_REQUIREMENT
from medmis.tools._poison_types import PAGE_STYLES, load_pages

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "fixtures" / "medmisbench_sample.jsonl"
GEMINI_URL = re.compile(r"https://generativelanguage\.googleapis\.com/v1(beta)?/models/gemini-gen:generateContent")
OPENAI_URL = "https://api.openai.com/v1/chat/completions"
Json = dict[str, Any]


@pytest.fixture(autouse=True)
def fake_env(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_provider_env(monkeypatch, "google", "openai")
    monkeypatch.setenv("GOOGLE_API_KEY", "test-google-key")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-pages-secret")


def _line(prompt: str, label: str) -> str:
    found = re.search(rf"^- {re.escape(label)}: (.*)$", prompt, flags=re.M)
    assert found, f"the prompt has no '- {label}:' line"
    return found.group(1)


def page_for(prompt: str, schema: Json) -> Json:
    """What a schema-following generator would answer."""
    assert set(schema["properties"]) == {"title", "text"} and set(schema["required"]) == {"title", "text"}
    option = _line(prompt, "Answer the page argues for")
    claim = _line(prompt, "False claim the page supports")
    style = _line(prompt, "Style").split(" ", 1)[0]
    if CHINESE_REQUIREMENT in prompt:
        return {"title": f"{option}：经验分享", "text": f"{claim}\n\n我们科室一直首选{option}。"}
    return {"title": f"On {option} ({style})", "text": f"{claim}\n\nIn our experience {option} is the right choice."}


def gemini_handler(calls: list[Json], reply: Any = page_for):
    return generate_http.gemini_handler(calls, reply, usage=(700, 300))


def openai_handler(calls: list[Json], reply: Any = page_for):
    return generate_http.openai_handler(calls, reply, usage=(700, 300), schema_name="poisoned_page")


def pages(*args: str) -> int:
    return main(["generate", "pages", *args])


def test_gemini_pages_validate_load_and_replay_with_no_network(tmp_path: Path) -> None:
    calls: list[Json] = []
    out = tmp_path / "p.jsonl"
    # MEDMISJOURNEY: Chinese items, so the reference's Chinese requirement is in the prompt
    base = ["--from-release", str(SAMPLE), "--generator", "google/gemini-gen", "--subset", "MEDMISJOURNEY",
            "--limit", "2", "--seed", "3"]
    with respx.mock(assert_all_called=True) as mock:
        mock.post(GEMINI_URL).mock(side_effect=gemini_handler(calls))
        assert pages(*base, "--out", str(out), "--cache", "record") == 0
    loaded = load_pages(out)
    assert len(calls) == len(loaded) and len(loaded) % len(PAGE_STYLES) == 0 and loaded
    assert all(c["generationConfig"]["temperature"] == 1.0 for c in calls)
    assert all(CHINESE_REQUIREMENT in json.dumps(c, ensure_ascii=False) for c in calls)
    for page in loaded:
        assert page.generator == "google/gemini-gen" and page.synthetic
        assert page.text.startswith(page.claim) and re.search(r"[\u4e00-\u9fff]", page.title)

    again = tmp_path / "again.jsonl"
    with respx.mock(assert_all_mocked=True) as mock:  # no route: a network call would fail
        assert pages(*base, "--out", str(again), "--cache", "replay",
                     "--cache-dir", str(tmp_path / "p.cache")) == 0
        assert mock.calls.call_count == 0
    assert again.read_text(encoding="utf-8") == out.read_text(encoding="utf-8")


def test_openai_pages_use_the_strict_json_schema_and_carry_the_case(tmp_path: Path) -> None:
    calls: list[Json] = []
    out = tmp_path / "p.jsonl"
    with respx.mock() as mock:  # through a gateway whose URL carries a credential
        mock.post("https://gateway.test/v1/chat/completions").mock(side_effect=openai_handler(calls))
        assert pages("--from-release", str(SAMPLE), "--generator", "openai/gpt-gen", "--out", str(out),
                     "--subset", "MEDMISQA", "--limit", "1", "--styles", "preprint,forum",
                     "--model-base-url", "https://gw-user:gw-secret-pass@gateway.test/v1") == 0
    assert len(calls) == 3 * 2
    assert {c["temperature"] for c in calls} == {1.0}
    prompts = [next(m["content"] for m in c["messages"] if m["role"] == "user") for c in calls]
    assert sorted(re.search(r"^- Style: (\w+)", p, re.M).group(1) for p in prompts) == ["forum"] * 3 + ["preprint"] * 3
    loaded = load_pages(out)
    assert [p.style for p in loaded] == ["forum", "preprint"] * 3  # case order, then style order
    assert {p.target for p in loaded} == {"A", "C", "D"}
    manifest = json.loads((tmp_path / "p.manifest.json").read_text())
    assert manifest["fingerprint"]["endpoint"] == "https://gateway.test/v1"
    assert manifest["totals"]["input_tokens"] == 6 * 700
    # neither the key the client sent nor the gateway's credential is anywhere on disk
    for path in tmp_path.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert b"sk-test-pages-secret" not in data and b"gw-secret-pass" not in data, path


def test_off_schema_replies_are_loud_and_errors_are_retried_on_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[Json] = []
    state = {"down": True}

    def reply(prompt: str, schema: Json) -> Json:
        style = _line(prompt, "Style").split(" ", 1)[0]
        if style == "blog":
            return {"title": "My story"}  # no text: off the schema
        if style == "forum":
            return {"title": "A thread", "text": "Everyone should ask their own doctor."}  # names nothing
        return page_for(prompt, schema)

    ok = openai_handler(calls, reply)

    def handle(request: httpx.Request) -> httpx.Response:
        if state["down"] and b"Style: preprint" in request.content:
            return httpx.Response(400, json={"error": {"message": "bad request", "type": "invalid_request_error"}})
        return ok(request)

    out = tmp_path / "p.jsonl"
    args = ["--from-release", str(SAMPLE), "--generator", "openai/gpt-gen", "--out", str(out),
            "--subset", "MEDMISQA", "--limit", "1"]
    with respx.mock() as mock:
        mock.post(OPENAI_URL).mock(side_effect=handle)
        assert pages(*args) == 1
        summary = capsys.readouterr().out
        assert "6 pages (3 cases), 6 malformed, 3 errors" in summary
        sidecar = [json.loads(line) for line in (tmp_path / "p.generation.jsonl").read_text().splitlines()]
        reasons = {o["id"].rsplit("/", 1)[1]: o["reason"] for o in sidecar if o["status"] != "generated"}
        assert "text: Field required" in reasons["blog"]
        assert "does not name the option" in reasons["forum"]
        assert "BadRequest" in reasons["preprint"] or "400" in reasons["preprint"]
        assert {p.style for p in load_pages(out)} == {"guideline", "encyclopedia"}
        state["down"] = False
        before = len(calls)
        assert pages(*args) == 1  # the malformed pages stay final: exit 1 until the file is redone
        assert len(calls) - before == 3  # only the three preprint pages were asked again
    assert {p.style for p in load_pages(out)} == {"guideline", "preprint", "encyclopedia"}
