"""The ``inspect`` section of the bench: a whole ``medmis run`` against Inspect AI's ``inspect eval``.

Both do the throughput workload (1,224 chat completions, 32 connections, a local
OpenAI-compatible server with 100 ms latency in its own process): ``medmis run`` as in the
``throughput`` section, Inspect AI as a plain ``generate()`` task over the same number of
prompts (:mod:`._inspect_task`) with its openai provider on chat completions
(``-M responses_api=false``), 32 connections, no retries. They take turns ``repeats`` times;
each process is timed whole (start-up, run, logs or report) and figures are medians. A turn
counts only when every call was made: ``medmis run`` wrote a record per call, and Inspect's
log says ``success`` with every sample completed and none in error. Target: ``medmis run`` at
least 3x faster. Needs the ``inspect`` extra.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from ._throughput import _compile_package, _timed, medmis_run_argv

TASK = Path(__file__).with_name("_inspect_task.py")


def inspect_argv(data: Path, base_url: str, connections: int, log_dir: Path) -> list[str]:
    """The ``inspect eval`` command of the workload (run from :data:`TASK`'s folder: Inspect
    takes a task file by a relative path)."""
    # ``python -m inspect_ai`` is the ``inspect`` command, from this interpreter whatever bin/ holds it
    return [sys.executable, "-m", "inspect_ai", "eval", f"{TASK.name}@throughput",
            "-T", f"data={data}", "--model", "openai/bench", "--model-base-url", base_url,
            "-M", "responses_api=false", "--max-connections", str(connections), "--max-retries", "0",
            "--display", "none", "--log-format", "json", "--log-dir", str(log_dir)]


def completed_samples(log_dir: Path) -> tuple[str, int, int]:
    """(status, completed samples, samples in error) of the one log in ``log_dir``."""
    logs = sorted(log_dir.glob("*.json"))
    if len(logs) != 1:
        raise RuntimeError(f"expected one Inspect log in {log_dir}, found {len(logs)}")
    log = json.loads(logs[0].read_text(encoding="utf-8"))
    results = log.get("results") or {}
    errors = sum(1 for s in log.get("samples") or [] if s.get("error"))
    return str(log.get("status")), int(results.get("completed_samples") or 0), errors


def bench_inspect(calls: int = 1224, connections: int = 32, latency: float = 0.1,
                  repeats: int = 2) -> dict[str, Any]:
    """Whole-process wall and CPU seconds of ``medmis run`` and ``inspect eval`` on the workload."""
    from ._fake_openai import serve_in_processes
    from ._items import write_items

    _compile_package()
    runs: dict[str, list[tuple[float, float]]] = {"medmis": [], "inspect": []}
    with serve_in_processes(1, latency) as (base_url,), tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "items.jsonl"
        write_items(data, calls // 3)
        env = {**os.environ, "OPENAI_API_KEY": "sk-bench-placeholder-key"}
        for turn in range(max(1, repeats)):
            folder = Path(tmp) / f"run{turn}"
            wall, cpu, _ = _timed(medmis_run_argv(data, base_url, connections, folder), env)
            records = sum(1 for _ in (folder / "records.jsonl").open(encoding="utf-8"))
            if records != calls:
                raise RuntimeError(f"medmis run wrote {records} records for {calls} calls")
            runs["medmis"].append((wall, cpu))
            logs = Path(tmp) / f"logs{turn}"
            wall, cpu, _ = _timed(inspect_argv(data, base_url, connections, logs), env, cwd=TASK.parent)
            status, done, errors = completed_samples(logs)
            if status != "success" or done != calls or errors:
                raise RuntimeError(f"inspect eval: status {status}, {done} of {calls} samples completed, {errors} in error")
            runs["inspect"].append((wall, cpu))

    def figures(who: str) -> dict[str, Any]:
        return {"wall_s": round(statistics.median(w for w, _ in runs[who]), 2),
                "cpu_s": round(statistics.median(c for _, c in runs[who]), 2),
                "walls_s": [round(w, 2) for w, _ in runs[who]]}

    medmis, inspect = figures("medmis"), figures("inspect")
    ratio = inspect["wall_s"] / max(medmis["wall_s"], 1e-9)
    return {"load_average_1m": round(os.getloadavg()[0], 2), "calls": calls, "connections": connections,
            "latency_s": latency, "repeats": max(1, repeats), "medmis_run": medmis, "inspect_eval": inspect,
            "x_faster_than_inspect": round(ratio, 2), "target_x_faster": 3.0, "meets_target": ratio >= 3.0}
