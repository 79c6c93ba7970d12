"""Adaptive concurrency (``medmis.agents._limiter``) on a fake clock: AIMD, server waits, progress."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from email.utils import format_datetime

import httpx
import pytest

from medmis.agents._limiter import AdaptiveLimiter, server_wait


class FakeClock:
    """Monotonic and wall time that move only when a caller sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


class RateLimited(Exception):
    """Shaped like the SDKs' status errors: ``status_code`` and a ``response`` with headers."""

    def __init__(self, headers: dict[str, str] | None = None) -> None:
        super().__init__("429 Too Many Requests")
        self.status_code = 429
        self.response = httpx.Response(429, headers=headers or {})


class ServerError(Exception):
    status_code = 500


def limiter(ceiling: int, clock: FakeClock, window: int | None = None) -> AdaptiveLimiter:
    return AdaptiveLimiter(ceiling, window=window, clock=clock, sleep=clock.sleep, wall=clock)


async def raise_(exc: Exception) -> None:
    raise exc


async def ok() -> str:
    return "ok"


def test_in_flight_never_exceeds_the_limit() -> None:
    clock = FakeClock()
    lim = limiter(3, clock)
    peak = 0

    async def work() -> None:
        nonlocal peak
        peak = max(peak, lim.in_flight)
        for _ in range(3):
            await asyncio.sleep(0)

    async def main() -> None:
        await asyncio.gather(*(lim.run(work) for _ in range(20)))

    asyncio.run(main())
    assert peak == 3 and lim.in_flight == 0 and lim.limit == 3


def test_a_429_halves_once_per_episode_then_successes_grow_it_back() -> None:
    clock = FakeClock()
    lim = limiter(8, clock, window=2)

    async def main() -> None:
        # eight calls in flight together; all come back 429: one episode, one halving
        epochs = [await lim.acquire() for _ in range(8)]
        for e in epochs:
            lim.release(e, ok=False, rate_limited=True)
        assert (lim.limit, lim.decreases, lim.rate_limited) == (4, 1, 8)
        # a 429 of a call started after the halving is a new episode
        e = await lim.acquire()
        lim.release(e, ok=False, rate_limited=True)
        assert (lim.limit, lim.decreases) == (2, 2)
        # other failures neither shrink nor grow the limit
        await asyncio.gather(*(lim.run(lambda: raise_(ServerError())) for _ in range(5)), return_exceptions=True)
        assert lim.limit == 2
        # additive increase: +1 per window of 2 successes, capped at the ceiling
        for _ in range(2):
            await lim.run(ok)
        assert lim.limit == 3
        for _ in range(40):
            await lim.run(ok)
        assert lim.limit == 8 and lim.lowest == 2

    asyncio.run(main())
    assert not lim.state().throttled


def test_the_limit_never_drops_below_one() -> None:
    clock = FakeClock()
    lim = limiter(2, clock)

    async def main() -> None:
        for _ in range(5):
            with pytest.raises(RateLimited):
                await lim.run(lambda: raise_(RateLimited()))
        assert lim.limit == 1
        assert await lim.run(ok) == "ok"  # window = current limit (1): grows at once
        assert lim.limit == 2

    asyncio.run(main())


@pytest.mark.parametrize(
    ("headers", "wait"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"retry-after-ms": "1500", "retry-after": "2"}, 1.5),
        ({"retry-after": "HTTPDATE+12"}, 12.0),
        ({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "6m0s"}, 360.0),
        ({"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "20ms"}, 0.02),
        ({"x-ratelimit-remaining-requests": "5", "x-ratelimit-reset-requests": "60s"}, None),
        ({"anthropic-ratelimit-requests-remaining": "0",
          "anthropic-ratelimit-requests-reset": "RFC3339+30"}, 30.0),
        ({"retry-after": "3", "x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "9s"}, 9.0),
        ({"retry-after": "soon"}, None),
        ({}, None),
    ],
)
def test_server_wait_reads_retry_after_and_rate_limit_headers(headers: dict[str, str], wait: float | None) -> None:
    clock = FakeClock()
    clock.now = 1_780_000_000.0
    at = datetime.fromtimestamp(clock.now, tz=UTC)
    fixed = {}
    for k, v in headers.items():
        if v.startswith("HTTPDATE+"):
            v = format_datetime(datetime.fromtimestamp(clock.now + float(v[9:]), tz=UTC), usegmt=True)
        elif v.startswith("RFC3339+"):
            v = datetime.fromtimestamp(at.timestamp() + float(v[8:]), tz=UTC).isoformat().replace("+00:00", "Z")
        fixed[k] = v
    got = server_wait(httpx.Headers(fixed), wall=clock)
    if wait is None:
        assert got is None
    else:
        assert got == pytest.approx(wait, abs=1.0 if "HTTPDATE" in str(headers) else 1e-6)


def test_http_date_retry_after_is_measured_against_the_real_wall_clock() -> None:
    # the Retry-After date parser of the retry module reads time.time(), as a server date must be
    when = datetime.now(UTC).timestamp() + 20
    got = server_wait(httpx.Headers({"retry-after": format_datetime(datetime.fromtimestamp(when, tz=UTC), usegmt=True)}))
    assert got is not None and 17 <= got <= 20


def test_retry_after_holds_back_every_new_call_until_it_has_passed() -> None:
    clock = FakeClock()
    lim = limiter(4, clock)
    started: list[float] = []

    async def record() -> None:
        started.append(clock.now)

    async def main() -> None:
        with pytest.raises(RateLimited):
            await lim.run(lambda: raise_(RateLimited({"retry-after": "5"})))
        state = lim.state()
        assert state.throttled and state.paused_s == 5 and state.limit == 2
        assert state.describe() == "conc 2/4 paused 5s throttled (1 x 429)"
        await asyncio.gather(*(lim.run(record) for _ in range(3)))

    asyncio.run(main())
    assert started and min(started) >= 1005.0
    assert lim.waited_s >= 5.0
    assert lim.state().describe() == "conc 3/4 throttled (1 x 429)"


def test_a_cancelled_call_gives_its_slot_back() -> None:
    clock = FakeClock()
    lim = limiter(1, clock)

    async def main() -> None:
        task = asyncio.create_task(lim.run(lambda: asyncio.sleep(3600)))
        await asyncio.sleep(0)
        assert lim.in_flight == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert lim.in_flight == 0 and lim.limit == 1
        assert await lim.run(ok) == "ok"

    asyncio.run(main())


def test_queued_calls_start_in_order_and_each_looks_for_a_slot_at_most_twice() -> None:
    """A release wakes only as many queued calls as there are free slots, oldest first. Waking
    every waiter at each release made 1,200 queued grading calls look 1.4 million times."""
    looks = 0

    def counting_clock() -> float:  # acquire reads the clock once each time it looks for a slot
        nonlocal looks
        looks += 1
        return 1000.0

    lim = AdaptiveLimiter(3, clock=counting_clock, wall=counting_clock)
    started: list[int] = []

    async def work(i: int) -> None:
        started.append(i)
        await asyncio.sleep(0)

    async def main() -> None:
        await asyncio.gather(*(lim.run(lambda i=i: work(i)) for i in range(600)))

    asyncio.run(main())
    assert started == list(range(600))
    assert looks <= 2 * 600


def test_a_woken_call_cancelled_before_it_runs_passes_its_slot_on() -> None:
    clock = FakeClock()
    lim = limiter(1, clock)

    async def main() -> list[str]:
        epoch = await lim.acquire()  # this task holds the one slot
        second = asyncio.create_task(lim.run(ok))
        third = asyncio.create_task(lim.run(ok))
        await asyncio.sleep(0)  # both queued
        lim.release(epoch)  # wakes `second` ...
        second.cancel()  # ... which is cancelled before it runs
        done = await asyncio.wait_for(third, timeout=5)
        assert lim.in_flight == 0
        return [done, "cancelled" if second.cancelled() else "ran"]

    assert asyncio.run(main()) == ["ok", "cancelled"]


def test_ceiling_must_be_positive() -> None:
    with pytest.raises(ValueError, match="ceiling"):
        AdaptiveLimiter(0)
