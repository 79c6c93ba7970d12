"""Speed and memory figures for the toolkit, printed as JSON: ``python -m medmis.experiments.bench``.

Sections (each with its target):
- ``harness_overhead``: ms per case of the paired harness with a zero-latency scripted model
  over 3,000 cases, after a 15-case warm-up run in the same process (target <= 2 ms/case);
- ``concurrency``: 1,200 calls at 32 connections to a local OpenAI-compatible server with
  100 ms latency, through the real openai client, the harness in a fresh interpreter (target:
  wall <= 1.15 x 1,200 x 0.1 s / 32);
- ``throughput``: a whole ``medmis run`` process (start-up, run, report) against a lean async
  httpx client on the same work, 1,224 calls at 32 connections to a local server with 100 ms
  latency (target <= 1.3 x the lean client's wall), see :mod:`._throughput`;
- ``inspect``: the whole ``medmis run`` of the throughput workload against Inspect AI's
  ``inspect eval`` of the same 1,224 calls as a plain ``generate()`` task (target: medmis
  >= 3x faster; needs the ``inspect`` extra; not in the default set), see :mod:`._inspect`;
- ``store_lookup``: warm record/replay store lookup latency (target p50 <= 1 ms);
- ``extraction``: trafilatura main-text extraction on a ~200 KB page;
- ``scale``: ``medmis report`` (cold and warm), a resume with nothing to do and ``medmis view``
  page queries on the release grid (10,932 items, every Type 1 target, 2 models x 9
  defenders: 1.67 million records), each in its own process, against a plain DuckDB count
  (targets: report <= 60 s and 2 GB, resume <= 10 s and 1 GB, view p50 <= 300 ms);
- ``replicas``: the same calls through the harness with one replica and with two (fake servers
  in their own processes, 100 ms latency, a fixed capacity each so that a replica is the
  bottleneck, 64 connections), beside the lean client (target: two >= 1.8x one; see
  ``_replicas``);
- ``timings``: answer extraction on a long reply and the pytest plug-in's import (targets
  < 1 ms, < 1 s; see :mod:`._timings`): latencies the tests no longer assert with a clock;
- ``layers``: CPU per chat completion through each layer of the call path (httpx, the openai
  SDK on its own, the toolkit's and aiohttp clients, LangChain's ``ChatOpenAI``, the toolkit's
  ``openai/`` model), each in a fresh interpreter (no target; not in the default set), see
  :mod:`._layers`;
- ``peak_rss_mb``: peak resident memory of this process.

"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from medmis.agents import ScriptedChatModel, cycle

from ._items import write_items


async def bench_harness(n_items: int = 1000) -> dict[str, Any]:
    from medmis.experiments.harness import DefenderConfig, Harness, RunConfig

    with tempfile.TemporaryDirectory() as tmp:
        model = ScriptedChatModel(outputs=cycle(["Step by step.\nFinal answer: A"]))

        def harness(n: int, name: str) -> Harness:
            data = Path(tmp) / f"{name}.jsonl"
            write_items(data, n)
            config = RunConfig(
                data=str(data), models=["mock/scripted"], defenders=[DefenderConfig(name="none")],
                out=str(Path(tmp) / name), progress=False, write_report=False, max_connections=8,
            )
            return Harness(config, model_factory=lambda spec: model, argv=["bench"])

        # a small run first: the modules a run imports on first use (DuckDB for the resume
        # scan, ...) are start-up, not overhead per case
        await harness(5, "warm-up").run()
        timed = harness(n_items, "run")
        start = time.perf_counter()
        result = await timed.run()
        wall = time.perf_counter() - start
        from medmis.experiments.reporting import write_report

        start = time.perf_counter()
        write_report(Path(tmp) / "run")
        report_s = time.perf_counter() - start
    cases = result.new_records
    return {
        "cases": cases,
        "wall_s": round(wall, 3),
        "ms_per_case": round(1000 * wall / cases, 3),
        "target_ms_per_case": 2.0,
        "meets_target": 1000 * wall / cases <= 2.0,
        "report_s": round(report_s, 3),
    }


async def _concurrency_run(calls: int, connections: int, latency: float) -> dict[str, Any]:
    from medmis.agents import ModelOptions
    from medmis.experiments.harness import DefenderConfig, Harness, RunConfig

    from ._fake_openai import serve_in_processes

    stats: list[dict[str, int]] = []
    # the server runs in its own process so its CPU is not charged to the harness
    with serve_in_processes(1, latency, stats=stats) as (base_url,), tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "items.jsonl"
        write_items(data, calls // 3)
        opts = ModelOptions(base_url=base_url)
        config = RunConfig(
            data=str(data), models=["openai/bench"], model_options=opts,
            defenders=[DefenderConfig(name="none")], out=str(Path(tmp) / "run"),
            progress=False, write_report=False, max_connections=connections, max_retries=0,
        )
        # models built by load_model, as the CLI builds them
        harness = Harness(config, argv=["bench"])
        start = time.perf_counter()
        result = await harness.run()
        wall = time.perf_counter() - start
    served = stats[0] if stats else {}
    ideal = calls * latency / connections
    return {
        "calls": int(served.get("requests", -1)),
        "records": result.new_records,
        "errors": result.stats.errors,
        "max_in_flight": int(served.get("max_in_flight", -1)),
        "wall_s": round(wall, 3),
        "ratio_to_ideal": round(wall / ideal, 3),
    }


_CONCURRENCY_CHILD = r"""
import asyncio, json, sys
from medmis.agents import ModelOptions, load_model
from medmis.experiments.bench._main import _concurrency_run

load_model("openai/bench", ModelOptions(base_url="http://127.0.0.1:9/v1"))  # the SDK's imports, untimed
print(json.dumps(asyncio.run(_concurrency_run(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])))))
"""


def bench_concurrency(calls: int = 1200, connections: int = 32, latency: float = 0.1) -> dict[str, Any]:
    """The harness in a fresh interpreter (the earlier sections leave threads and imports
    behind); the model SDK is imported before the run is timed."""
    import sys

    from ._throughput import _timed

    _, _, out = _timed([sys.executable, "-c", _CONCURRENCY_CHILD, str(calls), str(connections), str(latency)])
    run: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return {
        "calls": calls,
        "connections": connections,
        "ideal_s": round(calls * latency / connections, 3),
        "run": run,
        "target_ratio": 1.15,
        "meets_target": run["ratio_to_ideal"] <= 1.15 and not run["errors"],
    }


async def bench_store(n: int = 2000) -> dict[str, Any]:
    from medmis.tools import RecordStore

    with tempfile.TemporaryDirectory() as tmp:
        store = RecordStore(Path(tmp) / "store", "record")
        payload = {"title": "t", "text": "x" * 4000}

        async def produce() -> dict[str, Any]:
            return payload

        for i in range(n):
            await store.through("visit", {"url": f"https://medref.example/{i}"}, produce)
        timings = []
        for i in range(n):
            start = time.perf_counter()
            await store.through("visit", {"url": f"https://medref.example/{i}"}, produce)
            timings.append(time.perf_counter() - start)
        store.close()
    timings.sort()
    p50 = 1000 * statistics.median(timings)
    return {
        "lookups": n,
        "p50_ms": round(p50, 4),
        "p95_ms": round(1000 * timings[int(0.95 * (n - 1))], 4),
        "target_p50_ms": 1.0,
        "meets_target": p50 <= 1.0,
    }


def _big_page(target_bytes: int = 200_000) -> str:
    nav = "".join(f'<li><a href="/s{i}">Section {i}</a></li>' for i in range(60))
    paras: list[str] = []
    size = 0
    for i in range(100_000):  # bounded; stops at the target size long before
        if size >= target_bytes:
            break
        paras.append(
            f"<p>Paragraph {i} of a long reference article about clinical pharmacology. "
            "It discusses dosing, monitoring, contraindications and interactions in enough "
            "detail to look like real prose for the extractor to keep.</p>"
        )
        size += len(paras[-1])
    return (
        "<html><head><title>Long reference article</title></head><body>"
        f"<nav><ul>{nav}</ul></nav><article><h1>Long reference article</h1>{''.join(paras)}</article>"
        "<footer>Copyright notice and links</footer></body></html>"
    )


def bench_extraction(repeats: int = 5) -> dict[str, Any]:
    import trafilatura

    html = _big_page()
    timings = []
    text = ""
    for _ in range(repeats):
        start = time.perf_counter()
        text = trafilatura.extract(html, include_comments=False) or ""
        timings.append(time.perf_counter() - start)
    return {
        "page_bytes": len(html.encode()),
        "extracted_chars": len(text),
        "median_ms": round(1000 * statistics.median(timings), 1),
        "repeats": repeats,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m medmis.experiments.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="append", default=None,
                        choices=["harness_overhead", "concurrency", "throughput", "inspect", "store_lookup",
                                 "extraction", "scale", "replicas", "timings", "layers"])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (smoke run, not the targets)")
    parser.add_argument("--scale-run", type=Path, default=None,
                        help="reuse a run folder from medmis.experiments.bench._scale_run.generate_run for 'scale'")
    parser.add_argument("--replica-capacity", type=int, default=2,
                        help="'replicas': requests each fake server processes at once (default 2)")
    args = parser.parse_args(argv)
    wanted = set(args.only or ["harness_overhead", "concurrency", "throughput", "store_lookup", "extraction",
                               "scale", "replicas", "timings"])
    out: dict[str, Any] = {
        "machine": {"python": platform.python_version(), "platform": platform.platform(),
                    "processor": platform.processor() or platform.machine(),
                    "cpus": __import__("os").cpu_count()},
    }
    if "harness_overhead" in wanted:
        out["harness_overhead"] = asyncio.run(bench_harness(100 if args.quick else 1000))
    if "concurrency" in wanted:
        out["concurrency"] = bench_concurrency(120 if args.quick else 1200)
    if "throughput" in wanted:
        from ._throughput import bench_throughput

        out["throughput"] = bench_throughput(123 if args.quick else 1224, repeats=1 if args.quick else 3)
    if "inspect" in wanted:
        from ._inspect import bench_inspect

        out["inspect"] = bench_inspect(123 if args.quick else 1224, repeats=1 if args.quick else 2)
    if "store_lookup" in wanted:
        out["store_lookup"] = asyncio.run(bench_store(200 if args.quick else 2000))
    if "extraction" in wanted:
        out["extraction"] = bench_extraction(2 if args.quick else 5)
    if "scale" in wanted:
        from ._scale import bench_scale

        out["scale"] = bench_scale(args.scale_run, quick=args.quick)
    if "replicas" in wanted:
        from ._replicas import bench_replicas

        out["replicas"] = bench_replicas(120 if args.quick else 480, capacity=args.replica_capacity)
    if "timings" in wanted:
        from ._timings import bench_timings

        out["timings"] = bench_timings(20 if args.quick else 200)
    if "layers" in wanted:
        from ._layers import bench_layers

        out["layers"] = bench_layers(100 if args.quick else 1000, repeats=1 if args.quick else 3)
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    print(json.dumps(out, indent=2))
    return 0

