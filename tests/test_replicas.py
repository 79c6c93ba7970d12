"""Replicas: calls spread over two OpenAI-compatible servers on 127.0.0.1 through the real openai
client, fail-over when one is down or dies, recovery after the cool-down, 429s that throttle
only their replica, and a record/replay key that does not depend on the replica."""

from __future__ import annotations

import asyncio
import socket
import time

import openai
import pytest
from conftest import clear_provider_env
from langchain_core.messages import HumanMessage

from medmis.agents import AdaptiveLimiter, ModelOptions, load_model
from medmis.agents._replicas import ReplicaChatModel, replica_failure
from medmis.experiments.bench._fake_openai import FakeOpenAIServer
from medmis.tools import RecordStore, ReplayMissError, attach_cache


@pytest.fixture(autouse=True)
def _no_provider_env(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_provider_env(monkeypatch, "openai")


def dead_url() -> str:
    """A base URL on a port nobody listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def replicas(*urls: str, cooldown_s: float = 2.0) -> ReplicaChatModel:
    members = [load_model("openai/served-model", ModelOptions(base_url=u, timeout_s=5)) for u in urls]
    return ReplicaChatModel(members=members, urls=list(urls), cooldown_s=cooldown_s)


async def ask(model: ReplicaChatModel, n: int, concurrency: int | None = None) -> list[str]:
    gate = asyncio.Semaphore(concurrency or n)

    async def one(i: int) -> str:
        async with gate:
            reply = await model.ainvoke([HumanMessage(content=f"question {i}")])
            return str(reply.content)

    return await asyncio.gather(*(one(i) for i in range(n)))


async def test_load_model_builds_one_member_per_replica() -> None:
    opts = ModelOptions(base_url=["http://10.0.0.1:8000/v1", "http://10.0.0.2:8000/v1"])
    assert opts.base_url == "http://10.0.0.1:8000/v1"
    model = load_model("openai/served-model", opts)
    assert isinstance(model, ReplicaChatModel)
    assert [m.openai_api_base for m in model.members] == list(opts.base_urls)  # type: ignore[attr-defined]
    assert model.provider_family == "openai" and model.accepts_structured_output
    # one URL stays the provider's own model
    assert not isinstance(load_model("openai/m", ModelOptions(base_urls=("http://10.0.0.1/v1",))), ReplicaChatModel)
    with pytest.raises(ValueError, match="twice"):
        ModelOptions(base_urls=("http://a/v1", "http://a/v1"))
    with pytest.raises(ValueError, match="first of base_urls"):
        ModelOptions(base_url="http://b/v1", base_urls=("http://a/v1", "http://b/v1"))


async def test_calls_spread_evenly_over_equal_replicas() -> None:
    async with FakeOpenAIServer(latency_s=0.05) as a, FakeOpenAIServer(latency_s=0.05) as b:
        model = replicas(a.base_url, b.base_url)
        answers = await ask(model, 60, concurrency=16)
    assert len(answers) == 60 and all("Final answer" in t for t in answers)
    assert a.requests + b.requests == 60
    assert 24 <= a.requests <= 36, (a.requests, b.requests)
    assert [r.served for r in model.replicas] == [a.requests, b.requests]


async def test_a_slow_replica_gets_fewer_calls() -> None:
    async with FakeOpenAIServer(latency_s=0.01) as fast, FakeOpenAIServer(latency_s=0.5) as slow:
        model = replicas(fast.base_url, slow.base_url)
        await ask(model, 60, concurrency=4)
    # least outstanding: the slow server holds each call 50x longer, so it is rarely the freest
    # (about one call per half second, however long the client's own work makes the run)
    assert fast.requests + slow.requests == 60
    assert slow.requests * 3 < fast.requests, (fast.requests, slow.requests)


async def test_a_replica_down_from_the_start_costs_no_failed_call() -> None:
    down = dead_url()
    async with FakeOpenAIServer(latency_s=0.02) as up:
        model = replicas(down, up.base_url)
        answers = await ask(model, 30, concurrency=8)
        state = model.replicas[0]
    assert len(answers) == 30 and up.requests == 30
    assert state.served == 0 and state.failures >= 1
    # taken out once (one episode), not once per call that was already on its way
    assert state.streak == 1 and state.down_until > time.monotonic()


async def test_a_replica_that_dies_mid_run_is_retried_after_its_cool_down() -> None:
    async with FakeOpenAIServer(latency_s=0.02) as a:
        b = FakeOpenAIServer(latency_s=0.02)
        await b.__aenter__()
        port = b.port
        model = replicas(a.base_url, b.base_url, cooldown_s=0.3)
        await ask(model, 20, concurrency=4)
        assert b.requests > 0
        served_before = b.requests
        await b.__aexit__(None, None, None)  # dies, keep-alive connections cut

        answers = await ask(model, 20, concurrency=4)
        assert len(answers) == 20
        assert model.replicas[1].failures >= 1
        assert model.replicas[1].down_until > 0

        back = FakeOpenAIServer(latency_s=0.02, port=port)  # the same address comes back
        async with back:
            for _ in range(100):  # past the cool-down (0.3 s, or more if it was probed again)
                if model.replicas[1].down_until <= time.monotonic():
                    break
                await asyncio.sleep(0.05)
            await ask(model, 40, concurrency=4)
        assert back.requests > 5, back.requests  # used again, not just probed
        assert model.replicas[1].streak == 0 and model.replicas[1].down_until == 0.0
        assert model.replicas[1].served >= served_before + back.requests - 1


async def test_cool_down_doubles_while_a_replica_keeps_failing() -> None:
    async with FakeOpenAIServer(latency_s=0.0, status=503) as broken, FakeOpenAIServer(latency_s=0.0) as ok:
        model = replicas(broken.base_url, ok.base_url, cooldown_s=0.5)
        first = await ask(model, 3, concurrency=1)  # the first call tries the broken one
        state = model.replicas[0]
        assert len(first) == 3 and broken.requests == 1 and state.streak == 1
        await asyncio.sleep(0.55)
        probed_after = time.monotonic()
        await ask(model, 3, concurrency=1)  # probed again after its 0.5 s, fails again
        assert broken.requests == 2 and state.streak == 2
        # 1 s now, counted from the failure (which came after probed_after): bounds that hold
        # however long the machine takes between the lines
        assert probed_after + 1.0 <= state.down_until <= time.monotonic() + 1.0


async def test_every_replica_down_raises_the_transport_error_for_the_retry_policy() -> None:
    model = replicas(dead_url(), dead_url())
    with pytest.raises(openai.APIConnectionError) as info:
        await model.ainvoke([HumanMessage(content="q")])
    assert replica_failure(info.value) == "down"
    assert all(r.failures == 1 for r in model.replicas)
    # a second call probes the replica that comes back first instead of refusing to try
    with pytest.raises(openai.APIConnectionError):
        await model.ainvoke([HumanMessage(content="q")])
    assert sum(r.failures for r in model.replicas) == 3


async def test_a_request_error_is_not_failed_over() -> None:
    async with FakeOpenAIServer(latency_s=0.0, status=400) as a, FakeOpenAIServer(latency_s=0.0, status=400) as b:
        model = replicas(a.base_url, b.base_url)
        with pytest.raises(openai.BadRequestError):
            await model.ainvoke([HumanMessage(content="q")])
    assert a.requests + b.requests == 1  # another replica would refuse it too
    assert all(r.down_until == 0.0 for r in model.replicas)


async def test_a_429_throttles_only_its_replica() -> None:
    async with (
        FakeOpenAIServer(latency_s=0.02, status=429, headers={"Retry-After": "1"}) as limited,
        FakeOpenAIServer(latency_s=0.02) as free,
    ):
        model = replicas(limited.base_url, free.base_url)
        model.set_replica_ceiling(8)
        run_limiter = AdaptiveLimiter(8)  # the run's limiter, as DefenderContext uses it

        async def call(i: int) -> object:
            return await run_limiter.run(lambda: model.ainvoke([HumanMessage(content=f"q{i}")]))

        await asyncio.gather(*(call(i) for i in range(16)))
    throttled, other = model.replicas
    assert free.requests == 16  # every call answered, none charged to the run
    assert run_limiter.rate_limited == 0 and run_limiter.limit == 8
    assert throttled.limiter.rate_limited >= 1 and throttled.limiter.limit == 4
    assert throttled.limiter.state().paused_s > 0  # Retry-After honoured on that replica
    assert other.limiter.rate_limited == 0 and other.limiter.limit == 8
    # while paused, new calls do not go to it
    assert limited.requests <= 8


async def test_tools_and_structured_output_reach_every_replica() -> None:
    bodies_a: list[dict] = []
    bodies_b: list[dict] = []
    async with FakeOpenAIServer(latency_s=0.02, bodies=bodies_a) as a, FakeOpenAIServer(latency_s=0.02, bodies=bodies_b) as b:
        model = replicas(a.base_url, b.base_url)
        tool = {"type": "function", "function": {"name": "search_web", "description": "Search.",
                                                  "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}
        bound = model.bind_tools([tool], tool_choice="auto")
        await asyncio.gather(*(bound.ainvoke([HumanMessage(content=f"q{i}")]) for i in range(4)))
        schema = {"name": "answer", "schema": {"type": "object", "properties": {"answer_letter": {"type": "string"}}}}
        structured = model.bind(structured_output=schema)
        await asyncio.gather(*(structured.ainvoke([HumanMessage(content=f"s{i}")]) for i in range(4)))
    assert bodies_a and bodies_b
    for body in bodies_a + bodies_b:
        if body["messages"][0]["content"].startswith("q"):
            assert body["tools"][0]["function"]["name"] == "search_web" and body["tool_choice"] == "auto"
        else:
            assert body["response_format"]["type"] == "json_schema"
            assert body["response_format"]["json_schema"]["name"] == "answer"


async def test_record_replay_key_does_not_depend_on_the_replica(tmp_path) -> None:
    async with FakeOpenAIServer(latency_s=0.02) as a, FakeOpenAIServer(latency_s=0.02) as b:
        first = a.base_url
        with RecordStore(tmp_path / "store", "record") as store:
            cached = attach_cache(replicas(a.base_url, b.base_url), store)
            await ask(cached, 12, concurrency=12)  # type: ignore[arg-type]
        assert a.requests > 0 and b.requests > 0  # both replicas answered some
    # the servers are gone: every answer must come from the store, whichever replica gave it
    with RecordStore(tmp_path / "store", "replay") as store:
        single = attach_cache(load_model("openai/served-model", ModelOptions(base_url=first)), store)
        again = attach_cache(replicas(first, dead_url()), store)
        for i in range(12):
            message = [HumanMessage(content=f"question {i}")]
            assert "Final answer" in str((await single.ainvoke(message)).content)
            assert "Final answer" in str((await again.ainvoke(message)).content)
        with pytest.raises(ReplayMissError):
            await again.ainvoke([HumanMessage(content="never recorded")])


def test_the_run_pool_caps_each_replica_at_the_runs_ceiling(tmp_path) -> None:
    from medmis.experiments.harness._models import ModelPool

    opts = ModelOptions(base_urls=("http://10.0.0.1:30000/v1", "http://10.0.0.2:30000/v1"))
    pool = ModelPool(None, opts, cache_mode="live", cache_dir=tmp_path, max_connections=12)
    model = pool.raw("openai/served-model")
    assert isinstance(model, ReplicaChatModel)
    assert [(r.limiter.ceiling, r.limiter.limit) for r in model.replicas] == [(12, 12), (12, 12)]
    # a single server's model is left alone
    single = ModelPool(None, ModelOptions(base_url="http://10.0.0.1:30000/v1"), cache_mode="live",
                       cache_dir=tmp_path, max_connections=12).raw("openai/served-model")
    assert not isinstance(single, ReplicaChatModel)
