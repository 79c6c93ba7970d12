"""The ``scale`` section of the bench: report, resume and view on a release-sized run.

Each operation runs in a fresh interpreter so its wall time and peak resident memory are its
own; a plain DuckDB ``count(*)`` over ``records.jsonl`` in the same way is the lean reference
the others are divided by. Targets (issue "Analysis at the scale of the full release"):
report <= 60 s and <= 2 GB, a resume with nothing to do <= 10 s and <= 1 GB, a filtered
page query of ``medmis view`` <= 300 ms (p50).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

_CHILD = r"""
import json, resource, sys, time
from pathlib import Path
run_dir = Path(sys.argv[2])
start = time.perf_counter()
extra = {}
what = sys.argv[1]
if what == "reference":
    import duckdb
    con = duckdb.connect(); con.execute("SET enable_progress_bar=false")
    extra["records"] = con.execute("SELECT count(*) FROM read_json(?, format='newline_delimited', "
                                   "columns={'model': 'VARCHAR'})", [str(run_dir / "records.jsonl")]).fetchone()[0]
elif what in ("report_cold", "report_warm"):
    from medmis.experiments.reporting import write_report
    write_report(run_dir)
elif what == "resume":
    import asyncio
    from medmis.agents import ScriptedChatModel, cycle
    from medmis.experiments.harness import DefenderConfig, Harness, RunConfig
    m = json.loads((run_dir / "manifest.json").read_text())
    config = RunConfig(data=m["config"]["data"], models=m["models"], out=str(run_dir),
                       defenders=[DefenderConfig(name=d["name"]) for d in m["defenders"]],
                       type1_targets="all", seed=m["seed"], progress=False, write_report=False,
                       search="local")
    model = ScriptedChatModel(outputs=cycle(["Final answer: A"]))
    result = asyncio.run(Harness(config, model_factory=lambda spec: model, argv=["bench"]).run())
    extra["new_records"] = result.new_records
    extra["records"] = result.records
elif what == "view":
    import statistics
    from medmis.experiments.view import Query, RunView
    view = RunView(run_dir)
    extra["open_s"] = round(time.perf_counter() - start, 3)
    facets = view.facets()
    queries = [{"defender": [d], "outcome": ["flipped"]} for d in facets["defender"][1:4]]
    queries += [{"subset": [facets["subset"][-1]], "protocol": ["type1"], "outcome": ["differs"]},
                {"model": [facets["model"][-1]], "content_type": [facets["content_type"][0]], "offset": ["5000"]},
                {"outcome": ["recovered"], "provenance": [facets["provenance"][-1]]},
                {"item": ["00042"]}, {"outcome": ["errored"]}, {"outcome": ["unparsed"], "protocol": ["clean"]}]
    times = []
    for _ in range(3):
        for q in queries:
            t = time.perf_counter()
            view.page(Query.from_params(q))
            times.append(time.perf_counter() - t)
    extra["page_queries"] = len(times)
    extra["page_p50_ms"] = round(1000 * statistics.median(times), 1)
    extra["page_max_ms"] = round(1000 * max(times), 1)
    view.close()
wall = time.perf_counter() - start
own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
# CPU of every thread and worker process: the figure to compare when the cores are shared
extra["cpu_s"] = round(own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime, 2)
print(json.dumps({"wall_s": round(wall, 2),
                  "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                  **extra}))
"""


def _child(what: str, run_dir: Path) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", _CHILD, what, str(run_dir)], capture_output=True,
                          text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"bench child {what!r} failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def bench_scale(run_dir: Path | None = None, *, quick: bool = False) -> dict[str, Any]:
    """Figures for report, resume and view; generates the release grid unless ``run_dir`` is given.

    Args:
        run_dir: A run folder from :func:`medmis.experiments.bench._scale_run.generate_run` to reuse
            (its ``records.parquet`` is removed first so that the cold report pays the scan).
        quick: Generate a small grid instead of the release (a smoke run, not the targets).
    """
    with tempfile.TemporaryDirectory() as tmp:
        if run_dir is None:
            from ._scale_run import generate_run

            subsets = {"MEDMISQA": 200, "MEDMISHLE": 20} if quick else None
            run_dir = generate_run(Path(tmp), subsets=subsets, traces=False).run_dir
        (run_dir / "records.parquet").unlink(missing_ok=True)
        ref = _child("reference", run_dir)
        out: dict[str, Any] = {"records": ref["records"],
                               "records_jsonl_mb": round((run_dir / "records.jsonl").stat().st_size / 2**20, 1),
                               "reference_count": ref}
        for what in ("report_cold", "report_warm", "resume", "view"):
            fig = _child(what, run_dir)
            fig["x_reference_wall"] = round(fig["wall_s"] / max(ref["wall_s"], 1e-9), 2)
            fig["x_reference_rss"] = round(fig["peak_rss_mb"] / max(ref["peak_rss_mb"], 1e-9), 2)
            out[what] = fig
        # other processes on the machine stretch the wall times (the CPU seconds stay put)
        out["load_average_1_5_15"] = [round(x, 2) for x in os.getloadavg()]
        out["targets"] = {
            "report_s<=60": out["report_cold"]["wall_s"] <= 60,
            "report_rss_mb<=2048": out["report_cold"]["peak_rss_mb"] <= 2048,
            "resume_s<=10": out["resume"]["wall_s"] <= 10,
            "resume_rss_mb<=1024": out["resume"]["peak_rss_mb"] <= 1024,
            "view_page_p50_ms<=300": out["view"]["page_p50_ms"] <= 300,
        }
        return out
