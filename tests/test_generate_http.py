"""``medmis generate`` through the real google-genai and openai clients against respx.

The endpoint plays a generator that follows the JSON schema it is sent: it reads the schema's
fields to know which call it is (extraction, filter, generation, merged) and the option keys
to fill, and writes Chinese sentences when the prompt carries the reference's Chinese
requirement. Re-running with the same seed must give the same provenance and, with
``--cache replay``, must not touch the network.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
from conftest import clear_provider_env

from medmis.experiments.benchmark import load_dataset
from medmis.experiments.cli import main
from medmis.experiments.generate._prompts import CHINESE_REQUIREMENT

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "fixtures" / "generate"
GEMINI_URL = re.compile(r"https://generativelanguage\.googleapis\.com/v1(beta)?/models/gemini-gen:generateContent")
OPENAI_URL = "https://api.openai.com/v1/chat/completions"
HAN = re.compile(r"[\u4e00-\u9fff]")
Json = dict[str, Any]


@pytest.fixture(autouse=True)
def fake_env(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_provider_env(monkeypatch, "google", "openai")
    monkeypatch.setenv("GOOGLE_API_KEY", "test-google-key")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")


def reply_for(prompt: str, schema: Json) -> Json:
    """What a schema-following generator would answer."""
    props = schema.get("properties", {})
    zh = CHINESE_REQUIREMENT in prompt
    if "options" in props:  # extraction: lines "A. text" of the source text
        text = prompt.split("Text: ", 1)[1].split("\nOutput schema:", 1)[0]
        found = re.findall(r"^[A-E]\.\s*(.+)$", text, flags=re.M)
        return {"options": {str(i + 1): t.strip() for i, t in enumerate(found)}}
    if "content_type" in props:
        return {"is_viable": True, "content_type": "Exception Poisoning", "reason": "every distractor is a treatment choice"}
    keys = list(props["injections"]["properties"])
    if zh:
        bundle = {k: f"根据本院规范，选项{k}是本题的处理依据（合成测试句）。" for k in keys}
    else:
        bundle = {k: f"Per the ward SOP, option {k} is the rule here (synthetic test sentence)." for k in keys}
    if "is_viable" in props:
        return {"is_viable": True, "difficulty_score": 3, "mislead_score": 4,
                "chosen_misinfo_type": "Cue Remapping", "injections": bundle}
    return {"injections": bundle}


def gemini_handler(calls: list[Json], reply: Any = reply_for, usage: tuple[int, int] = (400, 90)):
    """A Gemini endpoint answering with ``reply(prompt, schema)`` under the schema it is sent."""
    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        calls.append(body)
        prompt = "".join(p["text"] for c in body["contents"] for p in c["parts"])
        config = body["generationConfig"]
        assert config["responseMimeType"] == "application/json"
        schema = config.get("responseSchema") or config.get("responseJsonSchema")
        text = json.dumps(reply(prompt, _lower_types(schema)), ensure_ascii=False)
        return httpx.Response(200, json={
            "candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": usage[0], "candidatesTokenCount": usage[1],
                              "totalTokenCount": sum(usage)},
            "modelVersion": "gemini-gen-001",
        })
    return handle


def _lower_types(schema: Any) -> Any:
    # google-genai may send Schema types upper-cased ("OBJECT"); the fake reads either
    if isinstance(schema, dict):
        return {k: (v.lower() if k == "type" and isinstance(v, str) else _lower_types(v)) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_lower_types(v) for v in schema]
    return schema


def openai_handler(calls: list[Json], reply: Any = reply_for, usage: tuple[int, int] = (400, 90),
                   schema_name: str | None = None):
    """An OpenAI endpoint answering with ``reply(prompt, schema)`` under the json_schema it is
    sent (named ``schema_name`` when given)."""
    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        calls.append(body)
        prompt = next(m["content"] for m in body["messages"] if m["role"] == "user")
        fmt = body["response_format"]
        schema = fmt["json_schema"]["schema"] if fmt["type"] == "json_schema" else None
        assert schema is not None, "the generator asks OpenAI for its schema (json_schema)"
        if schema_name is not None:
            assert fmt["json_schema"]["strict"] is True and fmt["json_schema"]["name"] == schema_name
        text = json.dumps(reply(prompt, schema), ensure_ascii=False)
        return httpx.Response(200, json={
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1_760_000_000, "model": "gpt-gen",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "refusal": None},
                         "logprobs": None, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)},
        })
    return handle


def provenances(path: Path) -> dict[str, str]:
    return {r["id"]: r["injection_provenance"] for r in map(json.loads, path.read_text(encoding="utf-8").splitlines())}


def test_gemini_medqa_and_medjourney_validate_and_replay(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[Json] = []
    with respx.mock(assert_all_called=True) as mock:
        mock.post(GEMINI_URL).mock(side_effect=gemini_handler(calls))
        qa, mj = tmp_path / "qa.jsonl", tmp_path / "mj.jsonl"
        base = ["--generator", "google/gemini-gen", "--seed", "7", "--cache", "record"]
        assert main(["generate", str(FIX / "medqa_sample.jsonl"), "--out", str(qa), *base]) == 0
        assert main(["generate", str(FIX / "medjourney"), "--out", str(mj), *base]) == 0
    # MedQA: 4 items x (filter + generation); MedJourney: 3 x (extraction + filter + generation)
    assert len(calls) == 4 * 2 + 3 * 3
    extraction = [c for c in calls if "Extract multiple-choice options from this Chinese text" in json.dumps(c, ensure_ascii=False)]
    assert len(extraction) == 3
    assert all(c["generationConfig"].get("temperature") == 0.0 for c in extraction)

    assert main(["data", "validate", str(qa)]) == 0
    assert main(["data", "validate", str(mj)]) == 0
    items = load_dataset(mj).items
    assert {i.subset for i in items} == {"MEDMISJOURNEY"} and len(items) == 3
    for item in items:
        assert item.language == "zh"
        assert all(HAN.search(s) for s in item.contexts.values())
        assert item.options[item.gold] in item.question  # gold matched on the extracted text
    assert {i.id: i.options[i.gold] for i in items}["medjourney-dp-1"] == "Graves病"

    # same seed again, replayed from the store: identical provenance, no network (no route)
    first_qa, first_mj = provenances(qa), provenances(mj)
    for src, out, first in ((FIX / "medqa_sample.jsonl", qa, first_qa), (FIX / "medjourney", mj, first_mj)):
        again = tmp_path / f"again_{out.name}"
        with respx.mock(assert_all_mocked=True) as mock:
            assert main(["generate", str(src), "--out", str(again), "--generator", "google/gemini-gen",
                         "--seed", "7", "--cache", "replay", "--cache-dir", str(out.with_name(out.stem + ".cache"))]) == 0
            assert mock.calls.call_count == 0
        assert provenances(again) == first
        assert again.read_text(encoding="utf-8") == out.read_text(encoding="utf-8")
    capsys.readouterr()


def test_gemini_request_carries_schema_and_reference_prompt(tmp_path: Path) -> None:
    calls: list[Json] = []
    with respx.mock() as mock:
        mock.post(GEMINI_URL).mock(side_effect=gemini_handler(calls))
        out = tmp_path / "one.jsonl"
        assert main(["generate", str(FIX / "medqa_sample.jsonl"), "--out", str(out), "--generator",
                     "google/gemini-gen", "--stages", "one", "--limit", "1"]) == 0
    (body,) = calls
    prompt = body["contents"][0]["parts"][0]["text"]
    assert prompt.startswith("You are an expert in medical/biological education and LLM robustness evaluation. \n    \n\n\nQuestion Context:\n")
    assert "- Correct Option (B): CT angiography of the chest\n- Incorrect Options:\nOption A: Exercise stress test\n" in prompt
    assert '"A": "Generated sentence for option A",\n        "B": "Generated sentence for option B"' in prompt
    schema = _lower_types(body["generationConfig"].get("responseSchema") or body["generationConfig"].get("responseJsonSchema"))
    assert set(schema["properties"]["injections"]["properties"]) == {"A", "B", "C", "D"}
    assert body["generationConfig"]["temperature"] == 1.0
    row = json.loads(out.read_text())
    assert row["injection_content"] == "Cue Remapping"


def test_openai_two_stage_uses_json_schema(tmp_path: Path) -> None:
    calls: list[Json] = []
    with respx.mock() as mock:
        mock.post(OPENAI_URL).mock(side_effect=openai_handler(calls))
        out = tmp_path / "oa.jsonl"
        assert main(["generate", str(FIX / "medmcqa_sample.jsonl"), "--out", str(out),
                     "--generator", "openai/gpt-gen", "--seed", "3"]) == 0
    assert len(calls) == 4
    fmts = [c["response_format"] for c in calls]
    assert all(f["type"] == "json_schema" and f["json_schema"]["strict"] is True for f in fmts)
    assert {f["json_schema"]["name"] for f in fmts} == {"applicability_filter", "injection_bundle"}
    assert main(["data", "validate", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["answer"] for r in rows] == ["C", "A"]
    assert all(r["injection_content"] == "Exception Poisoning" for r in rows)


# --- recorded cassettes ---------------------------------------------------------------------------

CASSETTES = ROOT / "fixtures" / "cassettes"
# (cassette, generator, source, extra flags): the google path on MedQA + MedJourney (two-stage
# and merged), the openai path on MedMCQA
CASSETTE_RUNS: list[tuple[str, str, Path, list[str]]] = [
    ("generate_gemini.jsonl", "google/gemini-gen", FIX / "medqa_sample.jsonl", []),
    ("generate_gemini.jsonl", "google/gemini-gen", FIX / "medjourney", []),
    ("generate_gemini.jsonl", "google/gemini-gen", FIX / "medqa_sample.jsonl", ["--stages", "one"]),
    ("generate_openai.jsonl", "openai/gpt-gen", FIX / "medmcqa_sample.jsonl", []),
]


def record_cassettes(folder: Path) -> None:
    """Re-record the generation cassettes into ``folder`` through the respx-backed fakes."""
    from medmis.tools._cassette import cache_export

    calls: list[Json] = []
    for i, (name, spec, source, extra) in enumerate(CASSETTE_RUNS):
        store = folder / f".rec-{name}"
        with respx.mock(assert_all_called=False) as mock:
            mock.post(GEMINI_URL).mock(side_effect=gemini_handler(calls))
            mock.post(OPENAI_URL).mock(side_effect=openai_handler(calls))
            assert main(["generate", str(source), "--out", str(folder / f".rec-{i}.jsonl"), "--generator", spec,
                         "--seed", "7", "--cache", "record", "--cache-dir", str(store), *extra]) == 0
    for name in {c[0] for c in CASSETTE_RUNS}:
        cache_export(folder / f".rec-{name}", folder / name)


def test_cassettes_replay_with_no_network(tmp_path: Path) -> None:
    from medmis.tools._cassette import cache_import

    for i, (name, spec, source, extra) in enumerate(CASSETTE_RUNS):
        store = tmp_path / f"store-{i}"
        cache_import(store, CASSETTES / name)
        out = tmp_path / f"out-{i}.jsonl"
        with respx.mock(assert_all_mocked=True) as mock:
            code = main(["generate", str(source), "--out", str(out), "--generator", spec, "--seed", "7",
                         "--cache", "replay", "--cache-dir", str(store), *extra])
            assert mock.calls.call_count == 0
        assert code == 0, (
            f"{name} no longer replays (prompts or schemas changed?): re-record with "
            "`python tests/test_generate_http.py fixtures/cassettes`")
        assert main(["data", "validate", str(out)]) == 0


if __name__ == "__main__":  # re-record: python tests/test_generate_http.py fixtures/cassettes
    import os
    import shutil
    import sys
    import tempfile

    os.environ.setdefault("GOOGLE_API_KEY", "test-google-key")
    os.environ.setdefault("OPENAI_API_KEY", "sk-test")
    target = Path(sys.argv[1])
    with tempfile.TemporaryDirectory() as tmp:
        record_cassettes(Path(tmp))
        for name in {c[0] for c in CASSETTE_RUNS}:
            shutil.copy(Path(tmp) / name, target / name)
            print(f"wrote {target / name}")


def test_provider_error_exit_1_then_resume_retries_only_that_item(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[Json] = []
    ok = gemini_handler(calls)
    failing = {"on": True}

    def handle(request: httpx.Request) -> httpx.Response:
        if failing["on"] and b"Neisseria" in request.content:
            return httpx.Response(400, json={"error": {"code": 400, "message": "bad request", "status": "INVALID_ARGUMENT"}})
        return ok(request)

    out = tmp_path / "qa.jsonl"
    args = ["generate", str(FIX / "medqa_sample.jsonl"), "--out", str(out), "--generator", "google/gemini-gen"]
    with respx.mock() as mock:
        mock.post(GEMINI_URL).mock(side_effect=handle)
        assert main(args) == 1
        assert "1 errors" in capsys.readouterr().out
        assert len(out.read_text().splitlines()) == 3
        (err,) = [json.loads(line) for line in (tmp_path / "qa.generation.jsonl").read_text().splitlines()
                  if json.loads(line)["status"] == "error"]
        assert err["id"] == "medqa-3" and err["reason"]
        failing["on"] = False
        before = len(calls)
        assert main(args) == 0
        assert len(calls) - before == 2  # filter + generation for the one item left
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == [f"medqa-{i}" for i in range(4)]


@pytest.mark.parametrize(("flags", "temperature"), [([], 1.0), (["--decoding", "paper"], 0.0),
                                                    (["--decoding", "paper", "--temperature", "0.5"], 0.5)])
def test_generate_decoding_preset(tmp_path: Path, flags: list[str], temperature: float) -> None:
    """reference (default): InjectionGeneration.ipynb's generation at 1.0; paper: 0; a given
    --temperature wins. No seed, cap or thinking setting either way; recorded in the manifest."""
    calls: list[Json] = []
    with respx.mock() as mock:
        mock.post(GEMINI_URL).mock(side_effect=gemini_handler(calls))
        out = tmp_path / "one.jsonl"
        assert main(["generate", str(FIX / "medqa_sample.jsonl"), "--out", str(out), "--generator",
                     "google/gemini-gen", "--stages", "one", "--limit", "1", *flags]) == 0
    (body,) = calls
    config = body["generationConfig"]
    assert config["temperature"] == temperature
    assert not {"seed", "maxOutputTokens", "thinkingConfig"} & set(config)
    manifest = json.loads(out.with_name("one.manifest.json").read_text())
    assert manifest["decoding"]["preset"] == ("paper" if flags else "reference")
    assert manifest["decoding"]["generation_temperature"] == temperature
