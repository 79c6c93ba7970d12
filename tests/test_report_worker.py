"""``medmis run``'s report worker: the same report as in-process, and never a hidden failure."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from medmis.experiments.cli import main
from medmis.experiments.reporting import ReportWorker, worker_enabled

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "fixtures" / "medmisbench_sample.jsonl"

pytestmark = pytest.mark.report_worker


def _run(out: Path) -> int:
    return main(["run", "--data", str(SAMPLE), "--limit", "4", "--model", "mock/examinee",
                 "--defender", "none,warning", "--out", str(out), "--no-progress"])


def _comparable(run: Path) -> tuple[str, Any]:
    report = (run / "report.md").read_text(encoding="utf-8").replace(str(run), "RUN").replace(run.name, "RUN")
    metrics = json.loads((run / "metrics.json").read_text(encoding="utf-8"))

    def strip(node: Any) -> Any:  # latencies are measured, not computed
        if isinstance(node, dict):
            return {k: strip(v) for k, v in node.items() if not k.startswith("latency")}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    lines = [line for line in report.splitlines() if "latency" not in line.lower() and "| `mock/examinee` |" not in line]
    return "\n".join(lines), strip(metrics)


def test_the_worker_writes_the_report_the_process_would(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert worker_enabled()
    spawned: list[Any] = []
    real_start = ReportWorker.start.__func__  # type: ignore[attr-defined]

    def start(cls: type[ReportWorker]) -> ReportWorker:
        worker = real_start(cls)
        spawned.append(worker._process)
        return worker

    monkeypatch.setattr(ReportWorker, "start", classmethod(start))
    assert _run(tmp_path / "worker") == 0
    assert len(spawned) == 1 and spawned[0].wait(timeout=30) == 0  # started, answered, ended

    monkeypatch.setenv("MEDMIS_REPORT_WORKER", "0")
    assert not worker_enabled()
    assert _run(tmp_path / "inproc") == 0
    assert len(spawned) == 1
    assert _comparable(tmp_path / "worker") == _comparable(tmp_path / "inproc")
    for name in ("report.html", "verdict.json", "metrics.csv"):
        assert (tmp_path / "worker" / name).exists()
    assert sorted(p.name for p in (tmp_path / "worker" / "plots").iterdir()) == \
        sorted(p.name for p in (tmp_path / "inproc" / "plots").iterdir())


def test_a_dead_worker_means_the_report_is_written_here(tmp_path: Path) -> None:
    assert _run_without_report(tmp_path / "run") == 0
    gone = subprocess.Popen([sys.executable, "-c", "pass"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    gone.wait()
    with ReportWorker(gone) as worker:
        paths = worker.write(tmp_path / "run")
    assert paths["report.md"].exists() and paths["metrics.json"].exists()


def test_a_worker_error_is_redone_here_and_raised(tmp_path: Path) -> None:
    empty = tmp_path / "not-a-run"
    empty.mkdir()
    with ReportWorker.start() as worker:
        answer = worker._ask(str(empty))
        assert answer is not None and "error" in answer  # the worker said why
        with pytest.raises(Exception) as caught:
            worker.write(empty)  # redone in-process: the same failure, raised
    assert "records" in str(caught.value).lower()


def test_the_worker_ends_with_its_parent_input() -> None:
    worker = ReportWorker.start()
    process = worker._process
    assert process is not None and process.poll() is None
    worker.close()
    assert worker.reap() == 0 and process.returncode == 0


def _run_without_report(out: Path) -> int:
    import asyncio

    from medmis.experiments.harness import DefenderConfig, RunConfig, run_experiment

    config = RunConfig(data=str(SAMPLE), limit=2, models=["mock/examinee"], defenders=[DefenderConfig(name="none")],
                       out=str(out), progress=False, write_report=False)
    return asyncio.run(run_experiment(config, argv=["test"])).outcome.code
