"""The ``replicas`` section of ``python -m medmis.experiments.bench``: one replica against two.

Each replica is a fake OpenAI-compatible server in its own process (``_fake_openai``) with
100 ms latency and a fixed capacity (requests processed at once; the rest queue, as on a GPU
server with a batch limit), so one replica serves at most ``capacity / latency`` calls a
second and is the bottleneck. The same number of calls goes through the paired harness
(``Harness`` with the real openai client, as ``medmis run`` builds it) at 64 connections,
first with one base URL, then with two; the lean client (plain ``httpx.AsyncClient`` posts,
spread in turn over the same servers) is measured beside it as the reference. Target: two
replicas >= 1.8x the throughput of one. The harness's CPU per call is printed too, because
it bounds what any number of replicas can give on one core: at ~15 ms a call one core
sustains ~65 calls a second, so the default capacity (2: 20 calls a second per replica, 40
for two) keeps the replicas the bottleneck on an idle two-core machine.
"""

from __future__ import annotations

import asyncio
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

from ._fake_openai import serve_in_processes
from ._items import write_items

TARGET_RATIO = 1.8


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _servers(n: int, latency: float, capacity: int, stats: list[dict[str, int]]) -> Any:
    """``n`` fake servers in their own processes; their request counts land in ``stats``."""
    return serve_in_processes(n, latency, capacity=capacity, stats=stats)


async def _lean(urls: list[str], calls: int, connections: int) -> float:
    import httpx

    body = {"model": "bench", "messages": [{"role": "user", "content": "Which option? Final answer: A"}]}
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    gate = asyncio.Semaphore(connections)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:

        async def one(i: int) -> None:
            async with gate:
                response = await client.post(f"{urls[i % len(urls)]}/chat/completions", json=body)
                response.raise_for_status()

        start = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(calls)))
        return time.perf_counter() - start


async def _harness(urls: list[str], calls: int, connections: int, tmp: Path) -> dict[str, Any]:
    from medmis.agents import ModelOptions, load_model
    from medmis.experiments.harness import DefenderConfig, Harness, RunConfig

    data = tmp / f"items-{len(urls)}.jsonl"
    write_items(data, calls // 3)
    opts = ModelOptions(base_urls=tuple(urls))
    config = RunConfig(
        data=str(data), models=["openai/bench"], model_options=opts,
        defenders=[DefenderConfig(name="none")], out=str(tmp / f"run-{len(urls)}"),
        progress=False, write_report=False, max_connections=connections, max_retries=0,
    )
    harness = Harness(config, model_factory=lambda spec: load_model(spec, opts), argv=["bench"])
    cpu = _cpu_s()
    start = time.perf_counter()
    result = await harness.run()
    wall = time.perf_counter() - start
    return {"wall_s": wall, "records": result.new_records, "errors": result.stats.errors,
            "cpu_ms_per_call": 1000 * (_cpu_s() - cpu) / max(1, result.new_records)}


def bench_replicas(calls: int = 480, connections: int = 64, latency: float = 0.1,
                   capacity: int = 2) -> dict[str, Any]:
    """Throughput of the harness and of the lean client with one replica and with two.

    Args:
        calls: Model calls per measurement (a multiple of 3: clean, type1, type2 per item).
        connections: ``--max-connections`` (and the lean client's pool).
        latency: Each server's latency per request, in seconds.
        capacity: Requests each server processes at once; ``capacity / latency`` calls a
            second is one replica's ceiling.
    """
    out: dict[str, Any] = {"calls": calls, "connections": connections, "latency_s": latency,
                           "capacity_per_replica": capacity,
                           "replica_ceiling_per_s": round(capacity / latency, 1)}
    # a short run first, so that neither measurement pays for importing the SDK stack
    with tempfile.TemporaryDirectory() as tmp, _servers(1, latency, capacity, []) as urls:
        asyncio.run(_harness(urls, 3 * capacity, connections, Path(tmp)))
    for n in (1, 2):
        lean_stats: list[dict[str, int]] = []
        with _servers(n, latency, capacity, lean_stats) as urls:
            lean_wall = asyncio.run(_lean(urls, calls, connections))
        stats: list[dict[str, int]] = []
        with tempfile.TemporaryDirectory() as tmp, _servers(n, latency, capacity, stats) as urls:
            run = asyncio.run(_harness(urls, calls, connections, Path(tmp)))
        out[f"replicas_{n}"] = {
            "harness_calls_per_s": round(run["records"] / run["wall_s"], 1),
            "harness_wall_s": round(run["wall_s"], 3),
            "harness_errors": run["errors"],
            "harness_cpu_ms_per_call": round(run["cpu_ms_per_call"], 2),
            # what the harness could sustain on one whole core: the bound replicas cannot lift
            "harness_one_core_calls_per_s": round(1000 / run["cpu_ms_per_call"], 1),
            "served_per_replica": [s.get("requests", -1) for s in stats],
            "max_in_flight_per_replica": [s.get("max_in_flight", -1) for s in stats],
            "lean_calls_per_s": round(calls / lean_wall, 1),
            "lean_wall_s": round(lean_wall, 3),
            "ideal_calls_per_s": round(n * capacity / latency, 1),
        }
    one, two = out["replicas_1"], out["replicas_2"]
    ratio = two["harness_calls_per_s"] / one["harness_calls_per_s"]
    out["harness_ratio"] = round(ratio, 3)
    out["lean_ratio"] = round(two["lean_calls_per_s"] / one["lean_calls_per_s"], 3)
    out["target_ratio"] = TARGET_RATIO
    out["meets_target"] = ratio >= TARGET_RATIO and not one["harness_errors"] and not two["harness_errors"]
    return out
