"""One run per folder (fingerprint, lock) and honest exit codes (issue: runs that fail loudly)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import interrupt_run

from medmis.experiments.cli import main
from medmis.experiments.harness._fingerprint import compare_fingerprints
from medmis.experiments.harness._lock import RunLock
from medmis.experiments.records import read_records

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "fixtures" / "medmisbench_sample.jsonl"


def run_args(out: Path, *extra: str) -> list[str]:
    return ["run", "--data", str(SAMPLE), "--limit", "3", "--model", "mock/examinee",
            "--defender", "none", "--out", str(out), "--no-progress", *extra]


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished ``run_args`` run, made once for the module; the tests that resume it take copies."""
    out = tmp_path_factory.mktemp("finished") / "run"
    assert main(run_args(out)) == 0
    return out


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_a_seed_change_on_resume_exits_2_naming_the_seed(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         finished: Path) -> None:
    out = shutil.copytree(finished, tmp_path / "run")  # as main(run_args(out)) leaves it
    before = (out / "records.jsonl").read_text()
    capsys.readouterr()
    assert main(run_args(out, "--seed", "5")) == 2
    line = one_line(capsys.readouterr().err)
    assert "seed: 0 -> 5" in line and "choose a new --out" in line and "--accept-change seed" in line
    assert (out / "records.jsonl").read_text() == before  # nothing appended


@pytest.mark.parametrize(("flag", "field"), [
    (["--prompt", "toolkit"], "prompt"),
    (["--protocol", "clean,type1"], "protocols"),
    (["--type1-targets", "all"], "type1_targets"),
    (["--temperature", "0.7"], "model_options"),
    (["--limit", "2"], "limit"),
])
def test_other_item_level_changes_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: list[str], field: str, finished: Path,
) -> None:
    out = shutil.copytree(finished, tmp_path / "run")  # as main(run_args(out)) leaves it
    capsys.readouterr()
    args = run_args(out, *flag)
    if flag[0] == "--limit":
        args[args.index("--limit") + 1] = flag[1]
        args = args[:-2]
    assert main(args) == 2
    assert f"{field}:" in one_line(capsys.readouterr().err)


def test_other_data_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], finished: Path) -> None:
    out = shutil.copytree(finished, tmp_path / "run")  # as main(run_args(out)) leaves it
    other = tmp_path / "other.jsonl"
    lines = SAMPLE.read_text(encoding="utf-8").splitlines()
    other.write_text("\n".join(reversed(lines)) + "\n", encoding="utf-8")
    capsys.readouterr()
    args = run_args(out)
    args[args.index("--data") + 1] = str(other)
    assert main(args) == 2
    assert "data_sha256:" in one_line(capsys.readouterr().err)


def test_adding_a_defender_or_model_is_allowed_and_said(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        finished: Path) -> None:
    out = shutil.copytree(finished, tmp_path / "run")  # as main(run_args(out)) leaves it
    capsys.readouterr()
    args = run_args(out)
    args[args.index("--defender") + 1] = "none,warning"
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "adding defender(s) warning" in err
    manifest = json.loads((out / "manifest.json").read_text())
    assert set(manifest["fingerprint"]["defenders"]) == {"none", "warning"}
    # resuming only the first defender is fine too (the folder keeps both)
    assert main(run_args(out)) == 0
    assert "nothing to do: 18 records complete" in capsys.readouterr().out
    manifest = json.loads((out / "manifest.json").read_text())
    assert set(manifest["fingerprint"]["defenders"]) == {"none", "warning"}


def test_other_defender_options_make_a_new_label_which_is_added(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    base = ["run", "--data", str(SAMPLE), "--limit", "2", "--model", "mock/examinee", "--out", str(out),
            "--no-progress", "--defender", "isolate_vote"]
    assert main(base) == 0
    capsys.readouterr()
    assert main([*base, "--defender-option", "isolate_vote.margin=2"]) == 0
    assert "adding defender(s) isolate_vote[margin=2]" in capsys.readouterr().err


def test_accept_change_mixes_on_purpose_and_is_recorded(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        finished: Path) -> None:
    out = shutil.copytree(finished, tmp_path / "run")  # as main(run_args(out)) leaves it
    assert main(run_args(out, "--seed", "5", "--accept-change", "seed,model_options")) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["fingerprint"]["seed"] == 5
    (entry,) = manifest["accepted_changes"]
    assert entry["changes"]["seed"] == [0, 5]
    capsys.readouterr()
    assert main(run_args(out, "--accept-change", "sed")) == 2
    assert "unknown field(s) sed" in one_line(capsys.readouterr().err)


def test_compare_fingerprints_lists_every_difference() -> None:
    old = {"seed": 0, "prompt": "paper@1", "models": ["mock/a"],
           "defenders": {"none": {"name": "none", "options": {}}}, "model_options": {"temperature": 0.0}}
    new = {"seed": 1, "prompt": "paper@1", "models": ["mock/a", "mock/b"],
           "defenders": {"none": {"name": "none", "options": {"x": 1}}, "warning": {"name": "warning", "options": {}}},
           "model_options": {"temperature": 0.5}}
    diff = compare_fingerprints(old, new)
    assert set(diff.changed) == {"seed", "model_options", "defender none"}
    assert diff.changed["model_options"] == ({"temperature": 0.0}, {"temperature": 0.5})
    assert diff.added_models == ["mock/b"] and diff.added_defenders == ["warning"]
    assert set(diff.blocking(["seed", "defenders"])) == {"model_options"}


def test_base_url_credentials_stay_out_of_the_fingerprint(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert main(run_args(out, "--model-base-url", "http://user:pw@127.0.0.1:9/v1?key=abc")) == 0
    fp = json.loads((out / "manifest.json").read_text())["fingerprint"]
    assert fp["model_options"]["base_url"] == "http://127.0.0.1:9/v1"


def test_a_second_process_on_the_folder_exits_2_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "run"
    medmis = [sys.executable, "-m", "medmis.experiments.cli"]
    # 9 cases x 1 s: time for the second interpreter to start and reach the lock on a loaded machine
    slow = [*run_args(out), "--model-option", "latency_s=1.0", "--max-connections", "1"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    first = subprocess.Popen([*medmis, *slow], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=env)
    try:
        deadline = time.monotonic() + 60
        while not (out / "records.jsonl").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (out / "records.jsonl").exists()
        second = subprocess.run([*medmis, *slow], capture_output=True, text=True, env=env, timeout=60)
        assert second.returncode == 2
        line = one_line(second.stderr)
        assert "in use by another medmis run" in line and f"pid {first.pid}" in line
    finally:
        _, stderr = first.communicate(timeout=120)
    assert first.returncode == 0, stderr
    records = read_records(out / "records.jsonl", dedupe=False)
    assert len(records) == len({r.key for r in records}) == 9


def test_lock_is_exclusive_within_a_process_and_released(tmp_path: Path) -> None:
    tmp_path.mkdir(exist_ok=True)
    with RunLock(tmp_path), pytest.raises(Exception, match="in use by another medmis run"):
        RunLock(tmp_path).acquire()
    with RunLock(tmp_path):  # released on exit
        pass


def test_all_cases_failing_exits_1_with_a_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    args = run_args(out, "--model-option", "fault_rate=1.0", "--max-retries", "0")
    assert main(args) == 1
    line = one_line(capsys.readouterr().err)
    assert line.startswith("medmis: 9 of 9 cases failed (9 TransientModelError)")
    assert "--retry-errors" in line
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["outcome"]["exit_code"] == 1 and manifest["outcome"]["case_errors"] == 9
    # the suggested command redoes them (the fault is on first attempts only)
    fixed = [a for a in args if a != "0"]
    fixed[fixed.index("--max-retries")] = "--max-retries=2"
    assert main([*fixed, "--retry-errors"]) == 0
    assert json.loads((out / "manifest.json").read_text())["outcome"]["exit_code"] == 0


def test_tmp_names_are_unique_per_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from medmis.experiments.reporting import _report

    seen: list[str] = []
    real_replace = os.replace

    def spy(src: str | Path, dst: str | Path) -> None:
        seen.append(Path(src).name)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    _report._write_text(tmp_path / "x.md", "hi")
    assert seen == [f"x.md.{os.getpid()}.tmp"]


def test_ctrl_c_exits_3_and_the_manifest_says_interrupted(tmp_path: Path) -> None:
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "medmis.experiments.cli",
           *run_args(out, "--model-option", "latency_s=0.2", "--max-connections", "1")]
    cmd[cmd.index("--limit") + 1] = "8"
    code, stderr = interrupt_run(cmd, out / "records.jsonl")
    assert code == 3, stderr
    assert "stopped early: interrupted" in stderr and "Traceback" not in stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["stopped"] == "interrupted" and manifest["outcome"]["exit_code"] == 3
    # the same command resumes and finishes; the stop note goes away
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert "stopped" not in manifest and manifest["outcome"]["status"] == "finished"


def test_progress_off_a_terminal_is_plain_periodic_lines() -> None:
    import io

    from medmis.experiments.harness._progress import RunProgress

    stream = io.StringIO()
    progress = RunProgress(40, enabled=True, stream=stream, interval_s=3600)
    for i in range(40):
        progress.advance(f"clean acc {i}%")
    progress.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 10  # every tenth of the work
    assert lines[0] == "medmis run: 4/40 cases | clean acc 3%"
    assert lines[-1].startswith("medmis run: 40/40 cases")
    assert "\x1b" not in stream.getvalue() and "\r" not in stream.getvalue()


def test_a_manifest_from_before_fingerprints_still_guards_the_seed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], finished: Path,
) -> None:
    out = shutil.copytree(finished, tmp_path / "run")  # as main(run_args(out)) leaves it
    path = out / "manifest.json"
    manifest = json.loads(path.read_text())
    del manifest["fingerprint"]
    path.write_text(json.dumps(manifest))
    capsys.readouterr()
    assert main(run_args(out, "--seed", "3")) == 2
    assert "seed: 0 -> 3" in one_line(capsys.readouterr().err)
    assert main(run_args(out)) == 0  # the same settings resume, and the fingerprint is written
    assert "fingerprint" in json.loads(path.read_text())


@pytest.mark.parametrize("knob", ["marked_factor", "warning_factor"])
def test_a_changed_examinee_knob_is_refused_on_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], knob: str
) -> None:
    """The simulated examinee's form knobs are ordinary model options: recorded in the
    manifest's fingerprint and refused when they change (issue 23)."""
    out = tmp_path / "run"
    assert main(run_args(out, "--model-option", f"{knob}=0.7")) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["fingerprint"]["model_options"]["extra"][knob] == 0.7
    before = (out / "records.jsonl").read_text()
    capsys.readouterr()
    assert main(run_args(out, "--model-option", f"{knob}=1.0")) == 2
    line = one_line(capsys.readouterr().err)
    assert "model_options:" in line and knob in line
    assert (out / "records.jsonl").read_text() == before
