"""The ``throughput`` section of the bench: a whole ``medmis run`` process against a lean client.

Workload (issue "Throughput, and beyond one machine"): 1,224 chat completions at 32
connections against a local OpenAI-compatible server with 100 ms latency, served from its
own process. Two clients do the same work, one after the other, against the same server:

- the lean reference: a plain async ``httpx`` client posting the same chat-completion bodies
  (a semaphore of 32, nothing else), started as its own interpreter;
- ``medmis run`` as a user runs it (``--defender none``, one case per call, ``--processes``
  left at ``auto``), whole process: start-up, imports, the model check, the run, records, the
  report and plots.

Both walls include interpreter start-up. The two take turns three times and the ratio is
that of their median walls. Target: ``medmis run`` <= 1.3 x the lean client. CPU seconds of
each process are printed too (children a process waited for included).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_LEAN = r"""
import asyncio, json, resource, sys, time
import httpx

async def main(url, items, connections):
    sem = asyncio.Semaphore(connections)
    bodies = []
    for row in items:
        options = "\n".join(f"{k[-1].upper()}. {row[k]}" for k in ("opa", "opb", "opc", "opd"))
        for context in ("", row["injectb"] + "\n\n", row["injecta"] + " " + row["injectb"] + "\n\n"):
            text = f"{context}Question: {row['question']}\n{options}\nAnswer with the letter."
            bodies.append({"model": "bench", "messages": [{"role": "user", "content": text}],
                           "temperature": 0, "stream": False})
    async with httpx.AsyncClient(base_url=url, timeout=120,
                                 limits=httpx.Limits(max_connections=connections)) as client:
        async def one(body):
            async with sem:
                response = await client.post("/chat/completions", json=body)
                response.raise_for_status()
                return response.json()["choices"][0]["message"]["content"]
        replies = await asyncio.gather(*(one(b) for b in bodies))
    return len(replies)

start = time.perf_counter()
items = [json.loads(line) for line in open(sys.argv[2], encoding="utf-8")]
calls = asyncio.run(main(sys.argv[1], items, int(sys.argv[3])))
print(json.dumps({"calls": calls, "in_process_s": round(time.perf_counter() - start, 3)}))
"""


def _timed(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """Wall and CPU seconds (user + system) of one child process, and its stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise RuntimeError(f"bench child failed ({done.returncode}): {' '.join(argv[:4])} …\n{done.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout


def run_processes(folder: Path) -> int:
    """How many processes shared a finished run's calls (its manifest's ``concurrency``)."""
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    return int(manifest.get("concurrency", {}).get("processes", 1))


def _compile_package() -> None:
    """Byte-compile the toolkit as ``pip install`` does, so that neither process pays compilation.

    An editable install (or ``PYTHONDONTWRITEBYTECODE``) leaves the toolkit's modules to be
    compiled at every start; the lean client's httpx arrives compiled from its wheel.
    """
    import compileall
    import importlib

    for name in ("agents", "tools", "graphs", "defenses", "experiments"):
        for path in importlib.import_module(f"medmis.{name}").__path__:
            compileall.compile_dir(path, quiet=1)


def bench_throughput(calls: int = 1224, connections: int = 32, latency: float = 0.1,
                     repeats: int = 3) -> dict[str, Any]:
    """Figures for the lean client and a whole ``medmis run`` process on the same server.

    The two take turns ``repeats`` times (lean, medmis, lean, medmis, ...) and the ratio is
    that of the median walls: on a shared 2-core machine either process's wall moves by a
    third from one minute to the next, and alternating keeps both under the same conditions.
    """
    import statistics

    from ._fake_openai import serve_in_processes
    from ._items import write_items

    _compile_package()
    stats: list[dict[str, int]] = []
    lean_runs: list[tuple[float, float, dict[str, Any]]] = []
    run_runs: list[tuple[float, float, int]] = []
    with serve_in_processes(1, latency, stats=stats) as (base_url,), tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "items.jsonl"
        write_items(data, calls // 3)
        env = {**os.environ, "OPENAI_API_KEY": "sk-bench-placeholder-key"}
        env.pop("MEDMIS_HTTP_TRANSPORT", None)
        processes = 1
        for turn in range(max(1, repeats)):
            wall, cpu, out = _timed([sys.executable, "-c", _LEAN, base_url, str(data), str(connections)])
            lean_runs.append((wall, cpu, json.loads(out.strip().splitlines()[-1])))
            folder = Path(tmp) / f"run{turn}"
            run_argv = [sys.executable, "-m", "medmis.experiments.cli", "run", "--data", str(data),
                        "--model", "openai/bench", "--model-base-url", base_url, "--defender", "none",
                        "--max-connections", str(connections), "--max-retries", "0", "--no-progress",
                        "--out", str(folder)]
            wall, cpu, _ = _timed(run_argv, env)
            records = sum(1 for _ in (folder / "records.jsonl").open(encoding="utf-8"))
            run_runs.append((wall, cpu, records))
            processes = run_processes(folder)
    served = stats[0] if stats else {}
    lean_wall = statistics.median(w for w, _, _ in lean_runs)
    run_wall = statistics.median(w for w, _, _ in run_runs)
    lean_cpu = statistics.median(c for _, c, _ in lean_runs)
    run_cpu = statistics.median(c for _, c, _ in run_runs)
    ratio = run_wall / lean_wall
    return {
        "load_average_1m": round(os.getloadavg()[0], 2),
        "calls_served": int(served.get("requests", -1)),
        "connections": connections,
        "latency_s": latency,
        "ideal_s": round(calls * latency / connections, 3),
        "repeats": len(run_runs),
        "lean_client": {"calls": lean_runs[-1][2]["calls"], "wall_s": round(lean_wall, 3), "cpu_s": round(lean_cpu, 2),
                        "walls_s": [round(w, 3) for w, _, _ in lean_runs],
                        "in_process_s": statistics.median(r["in_process_s"] for _, _, r in lean_runs)},
        "medmis_run": {"records": min(n for _, _, n in run_runs), "processes": processes,
                       "wall_s": round(run_wall, 3),
                       "cpu_s": round(run_cpu, 2), "walls_s": [round(w, 3) for w, _, _ in run_runs]},
        "x_lean_wall": round(ratio, 3),
        "x_lean_wall_per_turn": [round(r[0] / lean[0], 3) for r, lean in zip(run_runs, lean_runs, strict=True)],
        "x_lean_cpu": round(run_cpu / max(lean_cpu, 1e-9), 3),
        "target_x_lean_wall": 1.3,
        "meets_target": ratio <= 1.3,
    }
