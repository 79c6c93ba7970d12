"""What a plug-in's code can do to a run stays in its case (issue 31): a defender that never
returns meets the case deadline (``--case-timeout``), ``SystemExit`` or ``KeyboardInterrupt``
raised in ``solve`` is a case error, at import one line and exit 2; only a real signal stops
a run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from medmis.experiments.cli import main

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "fixtures" / "medmisbench_sample.jsonl"

PLUGIN = '''
import asyncio

from medmis.defenses import CaseView, DefenderContext, DefenderOptions, SolveFn, answer_from_reply, defender
from medmis.experiments.benchmark import Answer, render_prompt

CALLS = [0]


@defender("misbehaves_once", single_call=True)
def misbehaves_once(opts: DefenderOptions) -> SolveFn:
    """Its first case: {what}; the others are answered."""
    async def solve(case: CaseView, ctx: DefenderContext) -> Answer:
        CALLS[0] += 1
        if CALLS[0] == 1:
            {first}
        reply = await ctx.generate(render_prompt(case), name="answer")
        return answer_from_reply(reply, case, ctx)

    return solve
'''

MISBEHAVIOUR = {
    "hangs": ("awaits forever", "await asyncio.Event().wait()"),
    "system_exit": ("SystemExit(5)", "raise SystemExit(5)"),
    "keyboard_interrupt": ("KeyboardInterrupt", "raise KeyboardInterrupt"),
    # in a task it starts: asyncio re-raises it out of the event loop unless the task is guarded
    "system_exit_in_a_task": ("SystemExit(5) in a gathered task",
                              "async def sub():\n                raise SystemExit(5)\n"
                              "            await asyncio.gather(sub(), asyncio.sleep(0))"),
}


def medmis(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "medmis.experiments.cli", *args], capture_output=True,
                          text=True, env=env, timeout=timeout, cwd=ROOT)


def run_args(out: Path, plugin: Path, *extra: str) -> list[str]:
    return ["run", "--data", str(SAMPLE), "--limit", "3", "--model", "mock/examinee", "--defender",
            "misbehaves_once", "--protocol", "clean,type1", "--out", str(out), "--no-progress",
            "--plugin", str(plugin), *extra]


def one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize(("kind", "error"), [
    ("hangs", "CaseTimeout: no answer within the case deadline of 1 s (--case-timeout)"),
    ("system_exit", "DefenderExit: the defender raised SystemExit(5); only a signal stops a run"),
    ("keyboard_interrupt", "DefenderExit: the defender raised KeyboardInterrupt; only a signal stops a run"),
    ("system_exit_in_a_task", "DefenderExit: the defender raised SystemExit(5); only a signal stops a run"),
])
def test_a_misbehaving_defender_is_one_case_error_and_the_run_completes(tmp_path: Path, kind: str,
                                                                         error: str) -> None:
    what, first = MISBEHAVIOUR[kind]
    plugin = tmp_path / "defense.py"
    plugin.write_text(PLUGIN.replace("{what}", what).replace("{first}", first))
    out = tmp_path / "run"
    start = time.monotonic()
    done = medmis(*run_args(out, plugin, "--case-timeout", "1"), timeout=90)
    took = time.monotonic() - start
    assert done.returncode == 1, done.stderr  # finished, with a case error (not 3: not interrupted)
    records = [json.loads(x) for x in (out / "records.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(records) == 6  # every case of the run
    errors = [r for r in records if r["error"]]
    assert [r["error"] for r in errors] == [error]
    assert errors[0]["choice"] is None and errors[0]["correct"] is None  # never graded
    assert all(r["choice"] for r in records if not r["error"])
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert "interrupted" not in json.dumps(manifest.get("outcome", {}))
    if kind == "hangs":
        assert took < 60


# the command's own checks run in this process (``main``); the misbehaving defenders above run
# in a child, whose exit status and stderr are what they are about


def test_the_case_timeout_flag_and_config_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from medmis.experiments.ablation._config import AblationConfig  # noqa: F401 - the key exists
    from medmis.experiments.harness._config import DEFAULT_CASE_TIMEOUT_S, RunConfig

    assert RunConfig(data="d", models=["m"], defenders=[], out="o").case_timeout_s == DEFAULT_CASE_TIMEOUT_S == 1800
    with pytest.raises(SystemExit) as usage:  # a usage error: argparse's exit 2
        main(["run", "--data", str(SAMPLE), "--model", "mock/examinee", "--defender", "none",
              "--out", str(tmp_path / "x"), "--case-timeout", "0"])
    assert usage.value.code == 2 and "--case-timeout" in one_line(capsys.readouterr().err)
    assert not (tmp_path / "x").exists()


def test_the_case_timeout_is_not_part_of_the_fingerprint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    args = ["run", "--data", str(SAMPLE), "--limit", "1", "--model", "mock/examinee", "--defender", "none",
            "--protocol", "clean", "--out", str(out), "--no-progress"]
    assert main(args) == 0
    capsys.readouterr()
    # another deadline: the same run, nothing to do
    assert main([*args, "--case-timeout", "60"]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("raised", ["KeyboardInterrupt", "SystemExit(5)"])
def test_an_exit_raised_at_plugin_import_is_one_line_exit_2(tmp_path: Path, raised: str) -> None:
    plugin = tmp_path / "bad.py"
    plugin.write_text(f"raise {raised}\n")
    out = tmp_path / "run"
    done = medmis(*run_args(out, plugin))
    assert done.returncode == 2, done.stderr
    line = one_line(done.stderr)
    assert line.startswith(f"medmis: plug-in {plugin}: failed to import: {raised.split('(')[0]}"), line
    assert not out.exists()


@pytest.mark.parametrize("raised", ["KeyboardInterrupt", "SystemExit(5)"])
def test_an_exit_raised_by_an_entry_point_plugin_at_import_is_one_line_exit_2(tmp_path: Path, raised: str) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "exiting_plugin_mod.py").write_text(f"raise {raised}\n")
    dist = site / "exiting_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: exiting-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[medmis.defenders]\nexiting_def = exiting_plugin_mod\n")
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
    out = tmp_path / "run"
    done = medmis("run", "--data", str(SAMPLE), "--limit", "1", "--model", "mock/examinee", "--defender",
                  "exiting_def", "--protocol", "clean", "--out", str(out), "--no-progress", env=env)
    assert done.returncode == 2, done.stderr
    lines = [ln for ln in done.stderr.splitlines() if not ln.startswith("medmis: warning:")]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("medmis: defender 'exiting_def': plug-in entry point exiting_def"), lines[0]
    assert raised.split("(")[0] in lines[0]
    assert not out.exists()


def test_a_real_signal_inside_a_defender_still_stops_the_run(tmp_path: Path) -> None:
    """SIGTERM to a background run (SIGINT ignored) while a defender's code runs arrives there
    as KeyboardInterrupt: it stops the run (exit 3), it is not that case's error."""
    import signal

    marker = tmp_path / "inside"
    plugin = tmp_path / "defense.py"
    plugin.write_text(PLUGIN.replace("{what}", "blocks in its own code").replace(
        "{first}", f"import pathlib, time; pathlib.Path({str(marker)!r}).touch(); time.sleep(60)"))
    out = tmp_path / "run"
    env = {**os.environ}
    proc = subprocess.Popen([sys.executable, "-m", "medmis.experiments.cli", *run_args(out, plugin)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert marker.exists(), proc.communicate(timeout=5)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 3, err
    assert "stopped early: interrupted" in err
    records = (out / "records.jsonl").read_text(encoding="utf-8") if (out / "records.jsonl").exists() else ""
    assert "DefenderExit" not in records


def test_an_ablation_config_sets_the_case_deadline(tmp_path: Path) -> None:
    what, first = MISBEHAVIOUR["hangs"]
    (tmp_path / "defense.py").write_text(PLUGIN.replace("{what}", what).replace("{first}", first))
    out = tmp_path / "out"
    config = tmp_path / "grid.toml"
    config.write_text(f"""
name = "deadline"
data = "{SAMPLE.as_posix()}"
limit = 2
protocols = ["clean"]
out = "{out.as_posix()}"
plugins = ["defense.py"]
case_timeout = 1

[[models]]
spec = "mock/examinee"

[[defenders]]
name = "misbehaves_once"
""", encoding="utf-8")
    done = medmis("ablate", str(config), "--no-progress", timeout=90)
    assert done.returncode == 1, done.stderr
    records = [json.loads(x) for x in (out / "records.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(records) == 2
    assert [r["error"] for r in records if r["error"]] == [
        "CaseTimeout: no answer within the case deadline of 1 s (--case-timeout)"]
