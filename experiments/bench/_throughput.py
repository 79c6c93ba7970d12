"""The ``throughput`` section of the bench: a whole ``medmis run`` process against a lean client.

Workload (issue "Throughput, and beyond one machine"): 1,224 chat completions at 32
connections against a local OpenAI-compatible server with 100 ms latency, served from its
own process. Two clients do the same work, one after the other, against the same server:

- the lean reference: a plain async ``httpx`` client posting the same chat-completion bodies
  (a semaphore of 32, nothing else), started as its own interpreter;
- ``medmis run`` as a user runs it (``--defender none``, one case per call), whole process:
  start-up, imports, the model check, the run, records, the report and plots.

Each also runs a small workload (36 calls); the **marginal** wall and CPU per call are those of
the big run minus the small one, divided by the calls between them: what each further call
costs, start-up and the report left out. The two take turns three times (lean, medmis, on
both workloads) and every figure is a median. Target: ``medmis run``'s marginal wall per call
<= 1.3 x the lean client's. Whole walls and CPU seconds of each process (children a process
waited for included) are printed too.
"""

from __future__ import annotations

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


def _timed(argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[float, float, str]:
    """Wall and CPU seconds (user + system) of one child process, and its stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False, env=env, cwd=cwd)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise RuntimeError(f"bench child failed ({done.returncode}): {' '.join(argv[:4])} …\n{done.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout


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


def medmis_run_argv(data: Path, base_url: str, connections: int, out: Path) -> list[str]:
    """The ``medmis run`` command of the workload: one case per call, no retries, no progress."""
    return [sys.executable, "-m", "medmis.experiments.cli", "run", "--data", str(data),
            "--model", "openai/bench", "--model-base-url", base_url, "--defender", "none",
            "--max-connections", str(connections), "--max-retries", "0", "--no-progress",
            "--out", str(out)]


SMALL_CALLS = 36
"""The small workload the marginal figures subtract (12 items, 3 calls each)."""


def bench_throughput(calls: int = 1224, connections: int = 32, latency: float = 0.1,
                     repeats: int = 3) -> dict[str, Any]:
    """Figures for the lean client and a whole ``medmis run`` process on the same server.

    The two take turns ``repeats`` times (lean, medmis, lean, medmis, ...) on the big and the
    small workload, and every figure is a median: on a shared 2-core machine either process's
    wall moves by a third from one minute to the next, and alternating keeps both under the
    same conditions.
    """
    import statistics

    from ._fake_openai import serve_in_processes
    from ._items import write_items

    _compile_package()
    stats: list[dict[str, int]] = []
    runs: dict[tuple[str, int], list[tuple[float, float]]] = {}
    records: list[int] = []
    sizes = (calls, SMALL_CALLS)
    with serve_in_processes(1, latency, stats=stats) as (base_url,), tempfile.TemporaryDirectory() as tmp:
        data = {n: Path(tmp) / f"items{n}.jsonl" for n in sizes}
        for n in sizes:
            write_items(data[n], n // 3)
        env = {**os.environ, "OPENAI_API_KEY": "sk-bench-placeholder-key"}
        for turn in range(max(1, repeats)):
            for n in sizes:
                wall, cpu, _ = _timed([sys.executable, "-c", _LEAN, base_url, str(data[n]), str(connections)])
                runs.setdefault(("lean", n), []).append((wall, cpu))
                folder = Path(tmp) / f"run{turn}_{n}"
                wall, cpu, _ = _timed(medmis_run_argv(data[n], base_url, connections, folder), env)
                runs.setdefault(("medmis", n), []).append((wall, cpu))
                if n == calls:
                    records.append(sum(1 for _ in (folder / "records.jsonl").open(encoding="utf-8")))
    served = stats[0] if stats else {}

    def median(who: str, n: int, i: int) -> float:
        return float(statistics.median(r[i] for r in runs[(who, n)]))

    def figures(who: str) -> dict[str, Any]:
        extra = calls - SMALL_CALLS
        return {"wall_s": round(median(who, calls, 0), 3), "cpu_s": round(median(who, calls, 1), 2),
                "walls_s": [round(w, 3) for w, _ in runs[(who, calls)]],
                "small_wall_s": round(median(who, SMALL_CALLS, 0), 3),
                "marginal_wall_ms_per_call": round(1000 * (median(who, calls, 0) - median(who, SMALL_CALLS, 0)) / extra, 3),
                "marginal_cpu_ms_per_call": round(1000 * (median(who, calls, 1) - median(who, SMALL_CALLS, 1)) / extra, 3),
                "cpu_ms_per_call": round(1000 * median(who, calls, 1) / calls, 3)}

    lean, medmis = figures("lean"), figures("medmis")
    ratio = medmis["marginal_wall_ms_per_call"] / max(lean["marginal_wall_ms_per_call"], 1e-9)
    return {
        "load_average_1m": round(os.getloadavg()[0], 2),
        "calls_served": int(served.get("requests", -1)),
        "calls": calls,
        "small_calls": SMALL_CALLS,
        "connections": connections,
        "latency_s": latency,
        "ideal_s": round(calls * latency / connections, 3),
        "repeats": max(1, repeats),
        "lean_client": lean,
        "medmis_run": {"records": min(records), **medmis},
        "x_lean_marginal_wall": round(ratio, 3),
        "x_lean_wall": round(medmis["wall_s"] / lean["wall_s"], 3),
        "x_lean_cpu": round(medmis["cpu_s"] / max(lean["cpu_s"], 1e-9), 3),
        "target_x_lean_marginal_wall": 1.3,
        "meets_target": ratio <= 1.3,
    }
