"""The rate budget (``--max-rps`` / ``--max-tpm``) on a fake clock: the pace, the token count
corrected from usage, a shard's share stated in the manifest."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from test_limiter import FakeClock

from medmis.agents import AdaptiveLimiter, RateBudget
from medmis.experiments.cli import main
from medmis.experiments.harness import RunConfig
from medmis.experiments.shards import Shard

ROOT = Path(__file__).resolve().parents[1]


def _starts(budget: RateBudget, clock: FakeClock, n: int, tokens: int = 0) -> list[float]:
    async def go() -> list[float]:
        times = []
        for _ in range(n):
            await budget.take(tokens)
            times.append(clock.now - 1000.0)
        return times

    return asyncio.run(go())


def test_rps_paces_call_starts_after_a_one_second_burst() -> None:
    clock = FakeClock()
    budget = RateBudget(rps=2.0, clock=clock, sleep=clock.sleep)
    assert _starts(budget, clock, 6) == pytest.approx([0.0, 0.0, 0.5, 1.0, 1.5, 2.0])
    assert budget.summary()["waited_s"] == pytest.approx(2.0)


def test_tpm_waits_out_the_debt_of_a_long_call() -> None:
    clock = FakeClock()
    budget = RateBudget(tpm=600.0, clock=clock, sleep=clock.sleep)  # 10 tokens a second
    assert _starts(budget, clock, 2, tokens=400) == pytest.approx([0.0, 0.0])  # a minute's 600 tokens
    # 200 tokens in debt: the next call starts when they are paid (20 s)
    assert _starts(budget, clock, 1, tokens=1) == pytest.approx([20.0], abs=1e-3)


def test_tokens_are_corrected_from_the_reply_usage() -> None:
    """The limiter charges the estimate before the call and the usage after it."""
    clock = FakeClock()
    budget = RateBudget(tpm=600.0, clock=clock, sleep=clock.sleep)
    limiter = AdaptiveLimiter(4, clock=clock, sleep=clock.sleep, budget=budget)
    reply = AIMessage(content="x", usage_metadata={"input_tokens": 500, "output_tokens": 300, "total_tokens": 800})

    async def call() -> Any:
        return reply

    async def go() -> None:
        await limiter.run(call, tokens=100)  # estimated 100, used 800: 200 tokens in debt
        await limiter.run(call, tokens=100)

    asyncio.run(go())
    assert clock.slept and sum(clock.slept) == pytest.approx(20.0, abs=1e-3)
    assert limiter.summary()["rate_budget"]["max_tpm"] == 600.0


def test_a_shard_takes_its_share_of_the_total() -> None:
    config = RunConfig(data="x", models=["mock/examinee"], defenders=[], out="o", max_rps=8, max_tpm=4000,
                       shard=Shard(index=1, count=4))
    assert config.rate_budget() == {"total": {"max_rps": 8, "max_tpm": 4000}, "share": 0.25,
                                    "per_shard": {"max_rps": 2.0, "max_tpm": 1000.0}}
    assert RunConfig(data="x", models=["m"], defenders=[], out="o").rate_budget() is None


def test_the_manifest_states_the_budget(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert main(["run", "--data", str(ROOT / "fixtures" / "medmisbench_sample.jsonl"), "--limit", "2", "--model",
                 "mock/examinee", "--defender", "none", "--no-progress", "--out", str(out), "--shard", "0/2",
                 "--max-rps", "1000", "--max-tpm", "9000000"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["rate_budget"]["per_shard"] == {"max_rps": 500.0, "max_tpm": 4500000.0}
    assert manifest["concurrency"]["rate_budget"]["max_rps"] == 500.0
