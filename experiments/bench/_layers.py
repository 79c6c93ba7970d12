"""The ``layers`` section of the bench: CPU per chat completion, one layer of the call path at a time.

The same calls (a short multiple-choice prompt, ``calls`` of them, 32 at a time, after a
40-call warm-up) go to one local fake server (:mod:`._fake_openai`, 100 ms, in its own
process) through each layer in turn, each in a fresh interpreter:

- ``httpx``: an ``httpx.AsyncClient`` posting the JSON body (the throughput section's lean client);
- ``openai_sdk``: the openai SDK's ``chat.completions.create`` on its default client;
- ``openai_sdk_bounded``: the same on the toolkit's bounded client (request deadline, reply cap);
- ``openai_sdk_aiohttp``: the same on the SDK's ``DefaultAioHttpClient`` (skipped without aiohttp);
- ``chatopenai``: LangChain's ``ChatOpenAI.ainvoke`` on its default client;
- ``medmis_model``: the toolkit's ``openai/`` model (``load_model``), as a run calls it.

Each figure is the CPU (user + system) of the timed calls divided by their number, the median
of ``repeats`` turns that take the layers in order (CPU per call moves by a third from minute to
minute on a shared machine; the turns spread that over every layer alike). The
differences between neighbours say what a layer costs; the throughput section's marginal CPU
per call adds the harness (case, defender, trace, record) on top of ``medmis_model``. No target:
these are the figures behind the throughput target's note in docs/performance.md.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from typing import Any

from ._fake_openai import serve_in_processes

LAYERS = ("httpx", "openai_sdk", "openai_sdk_bounded", "openai_sdk_aiohttp", "chatopenai", "medmis_model")

_CHILD = r"""
import asyncio, json, sys, time

url, layer, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
PROMPT = ("Question: Which drug is first-line for X?\nA. a\nB. b\nC. c\nD. d\n"
          "Answer with the letter.")
MESSAGES = [{"role": "user", "content": PROMPT}]


def make_call():
    if layer == "httpx":
        import httpx

        client = httpx.AsyncClient(base_url=url, timeout=120, limits=httpx.Limits(max_connections=32))

        async def call():
            response = await client.post("/chat/completions", json={"model": "bench", "messages": MESSAGES,
                                                                     "temperature": 0})
            return response.json()["choices"][0]["message"]["content"]
        return call
    if layer.startswith("openai_sdk"):
        import openai

        http_client = None
        if layer == "openai_sdk_bounded":
            import httpx2

            from medmis.tools import Httpx2BoundedAsyncClient

            # as the toolkit's openai/ models get it: a 120 s deadline, the 8 MiB reply cap
            http_client = Httpx2BoundedAsyncClient(timeout=120, deadline_s=120,
                                                   limits=httpx2.Limits(max_connections=32))
        elif layer == "openai_sdk_aiohttp":
            http_client = openai.DefaultAioHttpClient()
        client = openai.AsyncOpenAI(base_url=url, api_key="bench", http_client=http_client, max_retries=0)

        async def call():
            completion = await client.chat.completions.create(model="bench", messages=MESSAGES, temperature=0)
            return completion.choices[0].message.content
        return call
    if layer == "chatopenai":
        from langchain_openai import ChatOpenAI

        model = ChatOpenAI(model="bench", base_url=url, api_key="bench", max_retries=0, temperature=0)
    else:
        from medmis.agents import load_model

        model = load_model("openai/bench", base_url=url)
    from langchain_core.messages import HumanMessage

    async def call():
        return (await model.ainvoke([HumanMessage(PROMPT)])).content
    return call


async def main():
    call = make_call()
    slots = asyncio.Semaphore(32)

    async def one():
        async with slots:
            return await call()

    await asyncio.gather(*(one() for _ in range(40)))  # connections, imports, first-use caches
    cpu, wall = time.process_time(), time.perf_counter()
    replies = await asyncio.gather(*(one() for _ in range(calls)))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    assert len(replies) == calls and all(isinstance(r, str) and r for r in replies)
    return {"cpu_ms_per_call": round(1000 * cpu / calls, 3), "wall_s": round(wall, 3)}

print(json.dumps(asyncio.run(main())))
"""


def _available(layer: str) -> bool:
    if layer != "openai_sdk_aiohttp":
        return True
    try:
        import aiohttp  # noqa: F401
    except ImportError:
        return False
    return True


def bench_layers(calls: int = 1000, latency: float = 0.1, repeats: int = 3) -> dict[str, Any]:
    """CPU per call of each layer of the call path (see the module docstring)."""
    out: dict[str, Any] = {"calls": calls, "connections": 32, "latency_s": latency, "repeats": repeats}
    layers = [layer for layer in LAYERS if _available(layer)]
    for layer in LAYERS:
        if layer not in layers:
            out[layer] = "skipped: aiohttp is not installed"
    turns: dict[str, list[float]] = {layer: [] for layer in layers}
    with serve_in_processes(1, latency) as (url,):
        for _ in range(repeats):
            for layer in layers:
                done = subprocess.run([sys.executable, "-c", _CHILD, url, layer, str(calls)],
                                      capture_output=True, text=True, check=False)
                if done.returncode:
                    raise RuntimeError(f"bench layer {layer} failed ({done.returncode}):\n{done.stderr[-2000:]}")
                turns[layer].append(json.loads(done.stdout.strip().splitlines()[-1])["cpu_ms_per_call"])
    for layer, figures in turns.items():
        out[layer] = {"cpu_ms_per_call": round(statistics.median(figures), 3), "turns": figures}
    return out
