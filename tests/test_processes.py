"""Runs whose calls are shared by forked processes (``--processes``; harness/_caseloop.py).

The runs go through the real openai SDK to a fake OpenAI-compatible server in its own process,
and each run is its own interpreter (the CLI, or a small driver script): a fork needs a
process with no other thread, which a test process (pytest, a server thread) need not be.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import interrupt_run

from medmis.agents import AdaptiveLimiter
from medmis.experiments.bench._fake_openai import serve_in_processes
from medmis.experiments.harness import DefenderConfig, Harness, RunConfig, _caseloop
from medmis.experiments.harness._caseloop import (
    connection_shares,
    merge_limiter_summaries,
    resolve_processes,
)

SAMPLE = Path(__file__).resolve().parents[1] / "fixtures" / "medmisbench_sample.jsonl"
CASES = 90  # 30 sample items x clean, type1, type2
ENV = {**os.environ, "OPENAI_API_KEY": "sk-test-placeholder-key-0000", "MEDMIS_REPORT_WORKER": "0"}


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with serve_in_processes(1, 0.01) as (base_url,):
        yield base_url


def run_cli(out: Path, url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "medmis.experiments.cli", "run", "--data", str(SAMPLE),
           "--model", "openai/served-model", "--model-base-url", url, "--defender", "none",
           "--out", str(out), "--no-progress", "--max-retries", "0", *extra]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=ENV)


def records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]


def answers(out: Path) -> dict[tuple[str, str, str | None], tuple[str | None, bool | None]]:
    rows = records(out)
    found = {(r["item_id"], r["protocol"], r["target"]): (r["choice"], r["correct"]) for r in rows}
    assert len(found) == len(rows), "a case was written twice"
    return found


def concurrency(out: Path) -> dict[str, Any]:
    return json.loads((out / "manifest.json").read_text())["concurrency"]


def no_process_left(out: Path) -> bool:
    """No process still runs with this run folder on its command line (a forked helper keeps
    its parent's)."""
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if str(out).encode() in (proc / "cmdline").read_bytes():
                    return False
            except OSError:
                continue
    return True


# --------------------------------------------------------------------------- whole runs


def test_two_processes_write_every_case_once_and_the_same_answers(tmp_path: Path, url: str) -> None:
    one = run_cli(tmp_path / "one", url, "--processes", "1", "--max-connections", "8")
    two = run_cli(tmp_path / "two", url, "--processes", "2", "--max-connections", "8")
    assert one.returncode == 0 and two.returncode == 0, one.stderr + two.stderr
    assert f"{CASES} new records" in two.stdout
    assert answers(tmp_path / "two") == answers(tmp_path / "one") and len(answers(tmp_path / "one")) == CASES
    # the parent wrote every helper's trace too, one line per case
    traces = (tmp_path / "two" / "traces" / "openai_served-model__none.jsonl").read_text().splitlines()
    assert sorted(json.loads(t)["item_id"] for t in traces) == sorted(r["item_id"] for r in records(tmp_path / "two"))
    # the ceiling is split, not doubled; the manifest says how many processes shared it
    assert concurrency(tmp_path / "two")["processes"] == 2 and concurrency(tmp_path / "two")["ceiling"] == 8
    assert "processes" not in concurrency(tmp_path / "one") and concurrency(tmp_path / "one")["ceiling"] == 8
    assert json.loads((tmp_path / "two" / "manifest.json").read_text())["outcome"]["status"] == "finished"
    assert no_process_left(tmp_path / "two")


def test_a_resume_with_two_processes_runs_only_what_is_missing(tmp_path: Path, url: str) -> None:
    out = tmp_path / "run"
    first = run_cli(out, url, "--processes", "2", "--limit", "10")
    assert first.returncode == 0, first.stderr
    assert len(records(out)) == 30
    again = run_cli(out, url, "--processes", "2", "--accept-change", "limit")
    assert again.returncode == 0, again.stderr
    assert f"{CASES - 30} new records, {CASES} in total" in again.stdout
    assert len(answers(out)) == CASES
    # the resume forked its helper too (its read of the records left no thread behind)
    assert concurrency(out)["processes"] == 2 and "one process" not in again.stderr, again.stderr


DRIVER = textwrap.dedent("""
    import asyncio, json, os, sys
    from medmis.agents import ModelOptions
    from medmis.experiments.harness import DefenderConfig, Harness, RunConfig

    data, url, out, mode = sys.argv[1:5]
    parent = os.getpid()

    class Driven(Harness):
        async def run_case(self, spec, defender, case):
            if mode == "die" and os.getpid() != parent:
                os._exit(7)  # a helper dies on the first case it takes
            if mode == "stopped-holding-the-counter" and os.getpid() != parent:
                import signal
                self._loop._counter._lock.acquire()  # as if stopped inside take()
                os.kill(os.getpid(), signal.SIGSTOP)
            return await super().run_case(spec, defender, case)

    config = RunConfig(data=data, models=["openai/served-model"], out=out,
                       model_options=ModelOptions(base_urls=(url,)), defenders=[DefenderConfig(name="none")],
                       processes=2, max_connections=4, max_retries=0, progress=False, write_report=False,
                       helper_timeout_s=2)
    stop = (lambda stats: "enough" if stats.done >= 5 else None) if mode == "stop" else None
    if mode.startswith("disk-full"):  # the parent's third write of a case run by a helper / by itself fails
        from medmis.experiments.harness import _caseloop
        real, real_receive, writes, receiving = _caseloop.CaseLoop._write, _caseloop.CaseLoop._receive, [], []

        def write(self, *args):
            if bool(receiving) == (mode == "disk-full-helper"):
                writes.append(1)
                if len(writes) == 3:
                    print(f"written before the failure: {self.written}", file=sys.stderr)
                    raise OSError(28, "No space left on device")
            return real(self, *args)

        def receive(self, helper):
            receiving.append(1)
            try:
                return real_receive(self, helper)
            finally:
                receiving.pop()

        _caseloop.CaseLoop._write, _caseloop.CaseLoop._receive = write, receive
    notes = []
    result = asyncio.run(Driven(config, notice=notes.append, stop_when=stop).run())
    print(json.dumps({"new": result.new_records, "stopped": result.stats.stopped_reason, "notes": notes,
                      "code": int(result.outcome.code)}))
""")


def drive(tmp_path: Path, url: str, mode: str) -> dict[str, Any]:
    out = tmp_path / mode
    done = subprocess.run([sys.executable, "-c", DRIVER, str(SAMPLE), url, str(out), mode],
                          capture_output=True, text=True, timeout=60, env=ENV)
    assert done.returncode == 0, done.stderr
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "out": out}


def test_a_helper_that_dies_has_its_cases_run_by_the_parent_and_is_named(tmp_path: Path, url: str) -> None:
    got = drive(tmp_path, url, "die")
    assert got["new"] == CASES and len(answers(got["out"])) == CASES
    assert any("ended early (exit code 7)" in note for note in got["notes"]), got["notes"]
    assert no_process_left(got["out"])


def test_a_helper_stopped_while_it_holds_the_counter_does_not_hang_the_run(tmp_path: Path, url: str) -> None:
    got = drive(tmp_path, url, "stopped-holding-the-counter")
    # the parent waits LOCK_WAIT_S for the counter, then runs what the helpers left
    assert got["new"] == CASES and len(answers(got["out"])) == CASES
    assert any("sent nothing for 2 s: stopped or hung; killed" in note for note in got["notes"]), got["notes"]
    assert no_process_left(got["out"])


@pytest.mark.parametrize("whose", ["helper", "parent"])
def test_a_failed_write_stops_every_process_and_is_raised(tmp_path: Path, url: str, whose: str) -> None:
    out = tmp_path / "disk-full"
    done = subprocess.run([sys.executable, "-c", DRIVER, str(SAMPLE), url, str(out), f"disk-full-{whose}"],
                          capture_output=True, text=True, timeout=60, env=ENV)
    # (the driver calls the harness, not the CLI: the failure comes out as an exception)
    assert done.returncode == 1 and "[Errno 28 ENOSPC] No space left on device" in done.stderr, done.stderr
    assert "WriteFailed: cannot write" in done.stderr, done.stderr
    before = int(done.stderr.split("written before the failure: ")[1].split()[0])
    assert 2 <= before < CASES and len(records(out)) == before  # nothing written after it
    assert no_process_left(out)


def test_a_stop_closes_the_queue_of_every_process(tmp_path: Path, url: str) -> None:
    got = drive(tmp_path, url, "stop")
    assert got["stopped"] == "enough"
    # the cases in flight when the rule fired are finished and written, no new one starts
    assert 5 <= got["new"] <= 5 + 4 and len(answers(got["out"])) == got["new"]
    assert concurrency(got["out"])["processes"] == 2
    assert no_process_left(got["out"])


def test_ctrl_c_of_the_parent_ends_its_helpers_and_the_run_resumes(tmp_path: Path) -> None:
    # (one process: tests/test_run_folder.py)
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "medmis.experiments.cli", "run", "--data", str(SAMPLE), "--limit", "8",
           "--model", "mock/examinee", "--model-option", "latency_s=0.2", "--defender", "none",
           "--out", str(out), "--no-progress", "--max-connections", "2", "--processes", "2"]  # fmt: skip
    code, stderr = interrupt_run(cmd, out / "records.jsonl")  # the parent only
    assert code == 3 and "Traceback" not in stderr, stderr
    assert no_process_left(out)
    assert concurrency(out)["processes"] == 2
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert len(answers(out)) == 24


def test_helpers_keep_ignoring_ctrl_c_when_the_run_ignores_it(tmp_path: Path) -> None:
    import signal

    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "medmis.experiments.cli", "run", "--data", str(SAMPLE), "--limit", "6",
           "--model", "mock/examinee", "--model-option", "latency_s=0.1", "--defender", "none",
           "--out", str(out), "--no-progress", "--max-connections", "2", "--processes", "2"]  # fmt: skip
    # as `cmd &` in a script: SIGINT ignored, and a Ctrl-C reaches the whole group
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    deadline = time.monotonic() + 60
    while not (out / "records.jsonl").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "ended early" not in stderr, stderr
    assert len(answers(out)) == 18 and concurrency(out)["processes"] == 2


def children(pid: int) -> list[tuple[int, bytes]]:
    """The processes whose parent is ``pid``: (pid, command line)."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append((int(proc.name), (proc / "cmdline").read_bytes()))
            except (OSError, IndexError, ValueError):
                continue
    return found


def gone(pids: list[int], within_s: float = 10.0) -> bool:
    """Whether every one of ``pids`` has ended (and been reaped) within ``within_s``."""
    deadline = time.monotonic() + within_s
    while any(Path(f"/proc/{pid}").exists() for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def start_run(out: Path, *extra: str) -> tuple[subprocess.Popen[str], int | None, list[int]]:
    """``medmis run --processes 2`` with its report worker, once it has written 3 records:
    the process, its helper's pid (None with one process) and the worker's family."""
    import signal

    cmd = [sys.executable, "-m", "medmis.experiments.cli", "run", "--data", str(SAMPLE), "--limit", "10",
           "--model", "mock/examinee", "--model-option", "latency_s=0.1", "--defender", "none",
           "--out", str(out), "--no-progress", "--max-connections", "2", *extra]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "MEDMIS_REPORT_WORKER": "1"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    records = out / "records.jsonl"
    while not (records.exists() and len(records.read_text().splitlines()) >= 3):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.02)
    kids = children(proc.pid)
    workers = [pid for pid, cmdline in kids if b"reporting._worker" in cmdline]
    helpers = [pid for pid, _ in kids if pid not in workers]
    assert len(workers) == 1 and len(helpers) <= 1, kids
    family = workers + [pid for pid, _ in children(workers[0])]  # the worker and its plot child
    return proc, (helpers[0] if helpers else None), family


def finish(proc: subprocess.Popen[str], timeout_s: float = 60) -> tuple[int, str]:
    """Its exit code and stderr, or the test fails (and the whole group is killed) after ``timeout_s``."""
    import signal

    try:
        _, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"medmis run still running {timeout_s:g} s later (hung)")
    return proc.returncode, stderr


def pipes(pid: int) -> dict[int, str]:
    found = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            if (target := os.readlink(f"/proc/{pid}/fd/{fd}")).startswith("pipe:"):
                found[int(fd)] = target
    return found


def test_a_stopped_helper_is_killed_and_its_cases_run_by_the_parent(tmp_path: Path) -> None:
    import signal

    out = tmp_path / "run"
    proc, helper, family = start_run(out, "--processes", "2", "--helper-timeout", "2")
    assert helper is not None
    # a helper holds no pipe but its own and the run's stdout/stderr: not the worker's stdin
    worker_stdin = os.readlink(f"/proc/{family[0]}/fd/0")
    held = pipes(helper)
    assert worker_stdin not in held.values() and len({fd for fd in held if fd > 2}) == 1, held
    os.kill(helper, signal.SIGSTOP)
    code, stderr = finish(proc)
    assert code == 0, stderr
    assert f"call process {helper} sent nothing for 2 s: stopped or hung; killed" in stderr
    assert len(answers(out)) == 30  # every case once: the stopped one's run by the parent
    assert gone([helper, *family]) and no_process_left(out)


@pytest.mark.parametrize(("signame", "processes"), [("SIGINT", 2), ("SIGTERM", 2), ("SIGTERM", 1)])
def test_a_signal_stops_the_run_at_once_with_its_report_and_no_process_left(
        tmp_path: Path, signame: str, processes: int) -> None:
    import signal

    out = tmp_path / "run"
    proc, helper, family = start_run(out, "--processes", str(processes), "--helper-timeout", "600")
    if helper is not None:
        os.kill(helper, signal.SIGSTOP)  # a stopped helper does not hold the shutdown up
    proc.send_signal(getattr(signal, signame))  # the parent only, as `kill` would
    code, stderr = finish(proc, timeout_s=30)
    assert code == 3 and "stopped early: interrupted" in stderr and "Traceback" not in stderr, stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["outcome"]["status"] == "stopped early" and manifest["stopped"] == "interrupted"
    # the report is written at once, and says the run is incomplete
    assert (out / "report.md").read_text().startswith("Incomplete run: stopped early (interrupted)")
    assert "interrupted" in json.loads((out / "verdict.json").read_text())["incomplete"]
    assert gone([*([helper] if helper else []), *family]) and no_process_left(out)
    again = subprocess.run(proc.args, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and len(answers(out)) == 30, again.stderr


def test_sigterm_stops_an_ablation_with_its_report(tmp_path: Path) -> None:
    import signal

    out = tmp_path / "out"
    config = tmp_path / "ablation.toml"
    config.write_text(textwrap.dedent(f"""
        name = "t"
        data = "{SAMPLE.as_posix()}"
        limit = 10
        out = "{out.as_posix()}"
        max_connections = 2
        model_options = {{ extra = {{ latency_s = 0.1 }} }}

        [[models]]
        spec = "mock/examinee"

        [[defenders]]
        name = "none"
    """), encoding="utf-8")
    proc = subprocess.Popen([sys.executable, "-m", "medmis.experiments.cli", "ablate", str(config), "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    while not ((out / "records.jsonl").exists() and len((out / "records.jsonl").read_text().splitlines()) >= 3):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    code, stderr = finish(proc, timeout_s=30)
    assert code == 3 and "stopped early: interrupted" in stderr and "Traceback" not in stderr, stderr
    assert json.loads((out / "manifest.json").read_text())["outcome"]["status"] == "stopped early"
    assert (out / "report.md").read_text().startswith("Incomplete run: stopped early (interrupted)")


# --------------------------------------------------------------------------- the rules


def test_auto_uses_one_process_per_core_only_for_remote_models_and_enough_work(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_caseloop, "usable_cores", lambda: 2)
    assert resolve_processes("auto", jobs=1224, connections=32, remote=True) == 2
    assert resolve_processes("auto", jobs=1224, connections=32, remote=False) == 1  # simulated models
    assert resolve_processes("auto", jobs=200, connections=32, remote=True) == 1  # < 128 cases each
    assert resolve_processes("auto", jobs=1224, connections=8, remote=True) == 1  # < 8 connections each
    monkeypatch.setattr(_caseloop, "usable_cores", lambda: 16)
    assert resolve_processes("auto", jobs=100_000, connections=256, remote=True) == 4  # at most 4
    monkeypatch.setattr(_caseloop, "usable_cores", lambda: 1)
    assert resolve_processes("auto", jobs=100_000, connections=256, remote=True) == 1
    # a number is taken as given, within the connections and the cases
    assert resolve_processes(3, jobs=1000, connections=8, remote=False) == 3
    assert resolve_processes(3, jobs=2, connections=8, remote=True) == 2
    assert resolve_processes(3, jobs=1000, connections=1, remote=True) == 1


def test_connections_are_split_and_limiters_summed() -> None:
    assert connection_shares(32, 2) == [16, 16] and connection_shares(9, 2) == [5, 4]
    assert sum(connection_shares(7, 3)) == 7
    a, b = AdaptiveLimiter(16), AdaptiveLimiter(16)
    b.limit, b.lowest, b.rate_limited, b.decreases, b.waited_s = 8, 8, 3, 1, 2.5
    merged = merge_limiter_summaries([a.summary(), b.summary()])
    assert merged == {"ceiling": 32, "final": 24, "lowest": 24, "rate_limited": 3, "decreases": 1,
                      "waited_s": 2.5, "processes": 2}
    assert merge_limiter_summaries([a.summary()]) == a.summary()


def test_no_fork_while_another_thread_lives(tmp_path: Path) -> None:
    config = RunConfig(data=str(SAMPLE), models=["openai/m"], defenders=[DefenderConfig(name="none")],
                       out=str(tmp_path / "o"), processes=2, max_connections=8)
    harness = Harness(config)
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert harness._processes(1000) == 1
    finally:
        stop.set()
        thread.join()
    if _caseloop.fork_ready():  # (a test process may hold threads of C libraries)
        assert harness._processes(1000) == 2
    # a caller's tools may hold a store connection: never forked
    assert Harness(config, tools=object())._processes(1000) == 1


def test_a_number_of_processes_that_cannot_be_honoured_is_said(tmp_path: Path) -> None:
    config = RunConfig(data=str(SAMPLE), models=["openai/m"], defenders=[DefenderConfig(name="none")],
                       out=str(tmp_path / "o"), processes=2, max_connections=8)
    notes: list[str] = []
    assert Harness(config, tools=object(), notice=notes.append)._processes(1000) == 1
    assert notes == ["--processes 2: running in one process (the caller's tools cannot cross a fork)"]
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert Harness(config, notice=notes.append)._processes(1000) == 1
    finally:
        stop.set()
        thread.join()
    assert "other thread(s) alive in this process" in notes[-1], notes


def test_processes_flag_takes_auto_or_a_whole_number(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from medmis.experiments.cli import main

    for bad in ("0", "two", "-1"):
        with pytest.raises(SystemExit) as exited:
            main(["run", "--data", str(SAMPLE), "--model", "mock/examinee", "--defender", "none",
                  "--out", str(tmp_path / "o"), "--processes", bad])
        assert exited.value.code == 2
        assert "--processes: expected auto or a whole number" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
