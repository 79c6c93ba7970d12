"""The medmis command line: exit codes, one-line configuration errors, sub-commands."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from medmis.experiments.cli import main

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "fixtures" / "medmisbench_sample.jsonl"


def test_defenders_lists_every_builtin(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["defenders"]) == 0
    out = capsys.readouterr().out
    for name in ("none", "warning", "context_blind", "spotlight", "search_agent", "claim_verify",
                 "prior_reconcile", "isolate_vote", "escalate", "robustrag"):
        assert f"\n{name}" in "\n" + out
    assert "--defender-option search_agent.max_iterations=" in out
    assert "context_blind  [control, single call: --batch]" in out


def test_data_validate_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "validate", str(SAMPLE)]) == 0
    bad = tmp_path / "bad.jsonl"
    rows = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()[:3]]
    rows[1]["answer"] = "Z"
    rows[2]["question"] = ""
    bad.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    capsys.readouterr()
    assert main(["data", "validate", str(bad)]) == 2  # a data error: the exit-status table (docs/runs.md) says 2
    err = capsys.readouterr().err
    assert f"{bad}:2:" in err and f"{bad}:3:" in err
    # the installed command says the same
    done = subprocess.run([sys.executable, "-m", "medmis.experiments.cli", "data", "validate", str(bad)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr


def test_missing_key_is_one_line_without_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    code = main(["run", "--data", str(SAMPLE), "--limit", "1", "--model", "google/gemini-test",
                 "--defender", "none", "--out", str(tmp_path / "run"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "GOOGLE_API_KEY" in err and "Traceback" not in err


def test_unknown_defender_and_bad_option_are_config_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["run", "--data", str(SAMPLE), "--limit", "1", "--model", "mock/examinee",
            "--out", str(tmp_path / "run"), "--no-progress"]
    assert main([*base, "--defender", "nope"]) == 2
    assert "unknown defender 'nope'" in capsys.readouterr().err
    assert main([*base, "--defender", "search_agent", "--defender-option", "search_agent.max_iterations=x"]) == 2
    assert "invalid options for defender 'search_agent'" in capsys.readouterr().err


def test_tavily_without_key_stops_before_any_case(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("TAVILY_API_KEY", raising=False)
    code = main(["run", "--data", str(SAMPLE), "--limit", "1", "--model", "mock/examinee",
                 "--defender", "search_agent", "--search", "tavily", "--out", str(tmp_path / "run"),
                 "--no-progress"])
    assert code == 2 and "TAVILY_API_KEY" in capsys.readouterr().err
    assert not (tmp_path / "run" / "records.jsonl").exists()


def test_run_report_and_defender_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    code = main(["run", "--data", str(SAMPLE), "--subset", "MEDMISHLE", "--model", "mock/examinee",
                 "--defender", "none,search_agent", "--defender-option", "search_agent.max_iterations=2",
                 "--protocol", "clean,type1", "--out", str(out), "--no-progress"])
    assert code == 0
    records = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    assert {r["defender"] for r in records} == {"none", "search_agent[max_iterations=2]"}
    assert {r["protocol"] for r in records} == {"clean", "type1"}
    agent = next(r for r in records if r["defender"].startswith("search_agent"))
    assert agent["defender_options"]["max_iterations"] == 2
    (out / "report.md").unlink()
    assert main(["report", str(out)]) == 0
    assert (out / "report.md").exists()
    assert main(["report", str(tmp_path / "missing")]) == 2


def test_a_repeated_defender_flag_adds_its_defenders(tmp_path: Path) -> None:
    # before, the last --defender silently replaced the earlier ones
    out = tmp_path / "run"
    code = main(["run", "--data", str(SAMPLE), "--model", "mock/examinee", "--limit", "2",
                 "--defender", "none", "--defender", "warning,context_blind", "--protocol", "clean",
                 "--out", str(out), "--no-progress"])
    assert code == 0
    records = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    assert {r["defender"] for r in records} == {"none", "warning", "context_blind"}


def test_tools_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tools", "search", "first-line drug for anaphylaxis", "--max-results", "2"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["results"] and found["results"][0]["url"].startswith("https://medref.example/")
    assert main(["tools", "visit", found["results"][0]["url"], "--goal", "epinephrine"]) == 0
    page = json.loads(capsys.readouterr().out)["page"]
    assert "epinephrine" in page["text"].lower()
    # SSRF: loopback is refused, and the exit status says so
    assert main(["tools", "visit", "http://127.0.0.1:9/admin"]) == 1
    refused = json.loads(capsys.readouterr().out)
    assert refused["error"]["kind"] == "refused"
    # the contamination blocklist refuses the benchmark's own pages
    assert main(["tools", "visit", "https://huggingface.co/datasets/AI4HealthResearch/MedMisBench"]) == 1
    assert json.loads(capsys.readouterr().out)["error"]["kind"] == "refused"


def test_cache_commands_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cache = tmp_path / "cache"
    assert main(["tools", "search", "croup steeple sign", "--cache", "record", "--cache-dir", str(cache)]) == 0
    capsys.readouterr()
    assert main(["cache", "stats", "--cache-dir", str(cache)]) == 0
    assert json.loads(capsys.readouterr().out)["entries"] == {"search": 1}
    cassette = tmp_path / "c.jsonl"
    assert main(["cache", "export", "--cache-dir", str(cache), str(cassette)]) == 0
    fresh = tmp_path / "fresh"
    assert main(["cache", "import", "--cache-dir", str(fresh), str(cassette)]) == 0
    capsys.readouterr()
    assert main(["tools", "search", "croup steeple sign", "--cache", "replay", "--cache-dir", str(fresh)]) == 0
    assert json.loads(capsys.readouterr().out)["cache_hit"] is True
    assert main(["tools", "search", "never recorded", "--cache", "replay", "--cache-dir", str(fresh)]) == 1
    assert json.loads(capsys.readouterr().out)["error"]["kind"] == "replay_miss"
