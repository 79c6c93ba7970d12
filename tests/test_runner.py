"""The paired harness: records, traces, manifest, resume, retries, errors, secrets."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from langchain_core.messages import BaseMessage

from medmis.agents import ModelOptions, ScriptedChatModel, TransientModelError, load_model
from medmis.experiments.bench._fake_openai import FakeOpenAIServer
from medmis.experiments.harness import DefenderConfig, Harness, RunConfig, scrub_argv
from medmis.experiments.records import read_records

ROOT = Path(__file__).resolve().parents[1]

ITEMS = [
    {
        "id": f"RUN-{i}",
        "subset": "MEDMISQA",
        "question": f"Runner test question {i}?",
        "answer": "B",
        "opa": "alpha",
        "opb": "beta",
        "opc": "gamma",
        "injecta": f"False sentence {i} for alpha.",
        "injectb": f"True sentence {i} for beta.",
        "injectc": f"False sentence {i} for gamma.",
        "injection_content": "Cue Remapping",
        "injection_provenance": "Neutral False Statement",
    }
    for i in range(4)
]


@pytest.fixture
def data_file(tmp_path: Path) -> Path:
    path = tmp_path / "items.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ITEMS), encoding="utf-8")
    return path


def follower(messages: list[BaseMessage], tools: list) -> str:
    """Answers B on clean; follows a lone false sentence (the weakest possible examinee)."""
    text = str(messages[-1].content)
    if "False sentence" in text and "True sentence" not in text:
        return "The context says so.\nFinal answer: " + ("A" if "for alpha" in text else "C")
    return "Reasoning.\nFinal answer: B"


def make_config(data: Path, out: Path, **kw) -> RunConfig:
    base = dict(
        data=str(data),
        models=["mock/scripted"],
        defenders=[DefenderConfig(name="none"), DefenderConfig(name="warning")],
        out=str(out),
        progress=False,
        max_retries=2,
        retry_base_delay=0.0,
    )
    base.update(kw)
    return RunConfig(**base)


async def test_run_records_traces_manifest_and_report(data_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    model = ScriptedChatModel(outputs=follower)
    result = await Harness(make_config(data_file, out), model_factory=lambda s: model).run()
    records = read_records(out / "records.jsonl")
    assert result.new_records == len(records) == 2 * 4 * 3
    keys = {r.key for r in records}
    assert len(keys) == len(records)
    none_t1 = [r for r in records if r.defender == "none" and r.protocol == "type1"]
    assert all(r.target in {"A", "C"} and r.choice == r.target and r.correct is False for r in none_t1)
    assert all(r.correct for r in records if r.protocol in ("clean", "type2"))
    # clean runs first (its own phase)
    protocols = [json.loads(line)["protocol"] for line in (out / "records.jsonl").read_text().splitlines()]
    assert protocols.index("type1") > max(i for i, p in enumerate(protocols) if p == "clean")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["seed"] == 0 and manifest["dataset"]["sha256"]
    assert manifest["versions"]["langgraph"]
    assert manifest["simulated"] is True
    # every record points to its trace file, whose steps keep the exact messages sent
    trace_lines = (out / records[0].trace_file).read_text().splitlines()  # type: ignore[operator]
    trace = json.loads(trace_lines[0])
    model_steps = [s for s in trace["steps"] if s["kind"] == "model"]
    assert model_steps and model_steps[0]["input"][0]["role"] == "system"
    assert "Question:" in model_steps[0]["input"][1]["content"]
    # the harness writes records, traces and the manifest; reports are the caller's (layering)
    assert not (out / "report.md").exists()
    from medmis.experiments.reporting import write_report

    write_report(out, figures=False)
    for name in ("metrics.json", "metrics.csv", "report.md"):
        assert (out / name).exists()


async def test_rerun_resumes_without_duplicates(data_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    model = ScriptedChatModel(outputs=follower)
    await Harness(make_config(data_file, out), model_factory=lambda s: model).run()
    calls = len(model.calls)
    again = await Harness(make_config(data_file, out), model_factory=lambda s: model).run()
    assert again.new_records == 0
    assert len(model.calls) == calls
    lines = (out / "records.jsonl").read_text().splitlines()
    assert len(lines) == 24


async def test_torn_last_line_is_redone_once(data_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    model = ScriptedChatModel(outputs=follower)
    await Harness(make_config(data_file, out, write_report=False), model_factory=lambda s: model).run()
    path = out / "records.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    torn = lines[-1][: len(lines[-1]) // 2]
    path.write_text("".join(lines[:-1]) + torn)
    result = await Harness(make_config(data_file, out, write_report=False), model_factory=lambda s: model).run()
    assert result.new_records == 1
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(records) == 24
    assert len({(r["defender"], r["protocol"], r["item_id"], r["target"]) for r in records}) == 24


async def test_errors_are_recorded_not_graded_and_retry_errors_fixes_them(data_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    broken = ScriptedChatModel(outputs=lambda m, t: TransientModelError("upstream 503"))
    cfg = make_config(data_file, out, defenders=[DefenderConfig(name="none")], write_report=False)
    await Harness(cfg, model_factory=lambda s: broken).run()
    records = read_records(out / "records.jsonl")
    assert len(records) == 12
    assert all(r.error and "upstream 503" in r.error for r in records)
    assert all(r.choice is None and r.correct is None for r in records)
    assert len(broken.calls) == 12 * 3  # first attempt + max_retries=2, bounded
    # a plain re-run keeps the failed keys; --retry-errors redoes exactly those
    again = await Harness(cfg, model_factory=lambda s: broken).run()
    assert again.new_records == 0
    fixed = ScriptedChatModel(outputs=follower)
    cfg_retry = cfg.model_copy(update={"retry_errors": True})
    result = await Harness(cfg_retry, model_factory=lambda s: fixed).run()
    assert result.new_records == 12
    records = read_records(out / "records.jsonl")
    assert len(records) == 12 and not any(r.error for r in records)


async def test_transient_failure_then_success_is_not_an_error(data_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    seen: set[str] = set()

    def flaky(messages: list[BaseMessage], tools: list) -> object:
        key = str(messages[-1].content)
        if key not in seen:
            seen.add(key)
            return TransientModelError("rate limited", retry_after=0)
        return follower(messages, tools)

    model = ScriptedChatModel(outputs=flaky)
    cfg = make_config(data_file, out, defenders=[DefenderConfig(name="none")], write_report=False)
    await Harness(cfg, model_factory=lambda s: model).run()
    records = read_records(out / "records.jsonl")
    assert len(records) == 12 and not any(r.error for r in records)


async def test_api_key_never_written_and_concurrency_bounded(
    data_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-test-THIS-MUST-NOT-LEAK-0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    out = tmp_path / "run"
    async with FakeOpenAIServer(latency_s=0.02) as server:
        opts = ModelOptions(base_url=server.base_url)
        cfg = make_config(
            data_file, out, models=["openai/test-model"], model_options=opts, max_connections=3,
            defenders=[DefenderConfig(name="none")],
        )
        argv = ["medmis", "run", "--api-key", secret, f"--token={secret}"]
        await Harness(cfg, model_factory=lambda s: load_model(s, opts), argv=argv).run()
    assert server.requests == 12
    assert 1 < server.max_in_flight <= 3
    for path in out.rglob("*"):
        if path.is_file():
            assert secret not in path.read_text(encoding="utf-8", errors="replace"), path


def test_scrub_argv_masks_secret_flags() -> None:
    assert scrub_argv(["run", "--api-key", "abc", "--token=xyz", "--seed", "3"]) == [
        "run", "--api-key", "***", "--token=***", "--seed", "3",
    ]


def test_kill_and_resume_ends_with_one_record_per_key(data_file: Path, tmp_path: Path) -> None:
    """SIGKILL a real `medmis run` mid-way, then re-run the same command to completion."""
    out = tmp_path / "run"
    cmd = [
        sys.executable, "-m", "medmis.experiments.cli", "run", "--data", str(data_file),
        "--model", "mock/examinee", "--model-option", "latency_s=0.15",
        "--model-option", f"answer_key={data_file}",
        "--defender", "none,warning", "--out", str(out), "--max-connections", "2", "--no-progress",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    path = out / "records.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_text().splitlines()) >= 5:
            break
        if proc.poll() is not None:
            pytest.fail(f"run ended before it could be killed: {proc.stderr.read().decode()}")  # type: ignore[union-attr]
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    partial = len(path.read_text().splitlines())
    assert 5 <= partial < 24
    # simulate the torn write a kill can leave behind
    with path.open("a") as fh:
        fh.write('{"model": "mock/examinee", "defender": "no')
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in path.read_text().splitlines()]
    keys = [(r["defender"], r["protocol"], r["item_id"], r["target"]) for r in records]
    assert len(keys) == len(set(keys)) == 24
