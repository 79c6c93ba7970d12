"""Adaptive concurrency for model calls: a ceiling, AIMD back-off on 429s, and server waits.

``--max-connections`` is the ceiling. Every model call of a run (every call a defender makes,
not one per case) takes a slot from one :class:`AdaptiveLimiter`. On a rate-limit answer (HTTP
429) the allowed concurrency is halved, once per congestion episode: the other calls that were
already in flight when the first 429 came back belong to the same episode and do not halve it
again. After a window of successes (by default as many as the current limit, i.e. about one
round trip of the allowed calls) it grows by one, up to the ceiling. When the server says how
long to wait (``Retry-After`` in seconds or as an HTTP date, ``retry-after-ms``, or an
exhausted ``x-ratelimit-remaining-*`` / ``anthropic-ratelimit-*-remaining`` with its reset),
no new call starts before then. Retrying the failed call is the retry policy's business
(``medmis.agents._retry``); the limiter only decides when calls may start.

The clock and the sleep are injectable so that tests drive the limiter deterministically.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import httpx

from ._retry import _parse_retry_after, _status_and_headers

T = TypeVar("T")

RATE_LIMIT_STATUS = 429

# OpenAI writes resets as Go durations ("1s", "6m0s", "20ms"); others send seconds or a date.
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def _reset_seconds(value: str, wall: Callable[[], float]) -> float | None:
    value = value.strip()
    if not value:
        return None
    seconds = _parse_retry_after(value, wall)  # a number of seconds or an HTTP date
    if seconds is not None:
        return seconds
    parts = _DURATION.findall(value)
    if parts and "".join(n + u for n, u in parts) == value:
        return sum(float(n) * _UNIT_S[u] for n, u in parts)
    try:  # RFC 3339 (Anthropic's resets)
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        return None  # a local time of unknown zone is no wait we can honour
    return max(0.0, when.timestamp() - wall())


def server_wait(headers: httpx.Headers | None, wall: Callable[[], float] = time.time) -> float | None:
    """Seconds the server asks us to wait, from ``Retry-After`` or exhausted rate-limit headers.

    Args:
        headers: Response headers of the failed call (None when the error carries none).
        wall: Wall-clock time, for resets given as dates.

    Returns:
        The longest wait any header asks for, or None when no header names one.
    """
    if headers is None:
        return None
    waits: list[float] = []
    ms = headers.get("retry-after-ms")  # OpenAI's, more precise than Retry-After
    try:
        retry_after = max(0.0, float(ms) / 1000.0) if ms else None
    except ValueError:
        retry_after = None
    if retry_after is None and headers.get("retry-after"):
        retry_after = _reset_seconds(headers["retry-after"], wall)
    if retry_after is not None:
        waits.append(retry_after)
    for name, value in headers.items():
        name = name.lower()
        if not name.endswith("remaining") and "-remaining-" not in name:
            continue
        try:
            exhausted = float(value) <= 0
        except ValueError:
            continue
        if not exhausted:
            continue
        reset = headers.get(name.replace("remaining", "reset"))
        seconds = _reset_seconds(reset, wall) if reset else None
        if seconds is not None:
            waits.append(seconds)
    return max(waits) if waits else None


class RateBudget:
    """A pacer in front of the limiter: at most ``rps`` call starts a second and ``tpm``
    tokens a minute (token buckets, each holding at most one second's calls and one minute's
    tokens, as providers count them). A run's share of a total budget (``--max-rps`` /
    ``--max-tpm`` divided by its shards) is one of these; the AIMD limiter behind it still
    adapts to the 429s the shard sees.

    Tokens are counted from the usage of each call: a call takes its prompt's estimate before
    it starts (:meth:`take`) and the difference to what it actually used once it returns
    (:meth:`settle`), so a long answer is paid for by the calls after it.

    Args:
        rps: Call starts per second (None: no cap).
        tpm: Tokens (input + output) per minute (None: no cap).
        clock: Monotonic seconds (injectable for tests).
        sleep: Awaitable sleep (injectable for tests).
    """

    def __init__(self, rps: float | None = None, tpm: float | None = None, *,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        if (rps is not None and rps <= 0) or (tpm is not None and tpm <= 0):
            raise ValueError(f"rates must be above 0, got rps={rps}, tpm={tpm}")
        self.rps, self.tpm = rps, tpm
        self._clock, self._sleep = clock, sleep
        self._calls = max(1.0, rps) if rps else 0.0  # start full: one second's calls
        self._tokens = float(tpm) if tpm else 0.0  # and one minute's tokens
        self._at = clock()
        self.waited_s = 0.0

    def _refill(self) -> None:
        now = self._clock()
        elapsed, self._at = max(0.0, now - self._at), now
        if self.rps:
            self._calls = min(max(1.0, self.rps), self._calls + elapsed * self.rps)
        if self.tpm:
            self._tokens = min(float(self.tpm), self._tokens + elapsed * self.tpm / 60.0)

    def wait_s(self) -> float:
        """Seconds until a call may start (0: now)."""
        self._refill()
        wait = 0.0
        if self.rps and self._calls < 1.0:
            wait = (1.0 - self._calls) / self.rps
        if self.tpm and self._tokens <= 0.0:  # in debt after a long call: wait until it is paid
            wait = max(wait, -self._tokens / (self.tpm / 60.0) + 1e-6)
        return wait

    async def take(self, tokens: int = 0) -> None:
        """Wait until a call estimated at ``tokens`` may start, then charge it."""
        while (wait := self.wait_s()) > 0:
            self.waited_s += wait
            await self._sleep(wait)
        if self.rps:
            self._calls -= 1.0
        if self.tpm:
            self._tokens -= tokens

    def settle(self, estimated: int, used: int) -> None:
        """Correct a call's charge from its estimate to the tokens it used."""
        if self.tpm:
            self._tokens += estimated - used

    def summary(self) -> dict[str, Any]:
        """The caps and how long calls were held back by them (for the manifest)."""
        return {"max_rps": self.rps, "max_tpm": self.tpm, "waited_s": round(self.waited_s, 3)}


def reply_tokens(reply: Any) -> int | None:
    """Input plus output tokens a LangChain reply reports (None when it reports none)."""
    meta = getattr(reply, "usage_metadata", None)
    if not meta:
        return None
    return int(meta.get("input_tokens", 0) or 0) + int(meta.get("output_tokens", 0) or 0)


@dataclass(frozen=True)
class LimiterState:
    """A snapshot for progress lines: the current limit, its ceiling and throttling."""

    limit: int
    ceiling: int
    in_flight: int
    paused_s: float
    rate_limited: int

    @property
    def throttled(self) -> bool:
        return self.limit < self.ceiling or self.paused_s > 0

    def describe(self) -> str:
        text = f"conc {self.limit}/{self.ceiling}"
        if self.paused_s > 0:
            text += f" paused {self.paused_s:.0f}s"
        if self.throttled:
            text += f" throttled ({self.rate_limited} x 429)"
        return text


class AdaptiveLimiter:
    """At most ``limit`` model calls in flight; the limit adapts to 429s (AIMD) in [1, ceiling].

    Args:
        ceiling: The most calls ever in flight (``--max-connections``).
        window: Successes before the limit grows by one; None means the current limit.
        clock: Monotonic seconds (injectable for tests).
        sleep: Awaitable sleep (injectable for tests).
        wall: Wall-clock seconds, for rate-limit resets given as dates.
        budget: A rate budget every call passes before it takes a slot (``--max-rps`` /
            ``--max-tpm``).
    """

    def __init__(
        self,
        ceiling: int,
        *,
        window: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        wall: Callable[[], float] = time.time,
        budget: RateBudget | None = None,
    ) -> None:
        if ceiling < 1:
            raise ValueError(f"ceiling must be at least 1, got {ceiling}")
        self.ceiling = ceiling
        self.limit = ceiling
        self.window = window
        self.in_flight = 0
        self.rate_limited = 0  # 429s seen
        self.decreases = 0
        self.lowest = ceiling
        self.waited_s = 0.0  # time new calls were held back on the server's word
        self._epoch = 0  # bumped at each decrease; calls started before it do not halve again
        self._successes = 0
        self._resume_at = 0.0
        self._clock = clock
        self._sleep = sleep
        self._wall = wall
        # calls waiting for a slot, first come first served; a done future is a call woken
        # for a slot it has not taken yet
        self._waiters: deque[asyncio.Future[None]] = deque()
        self.budget = budget

    def _wake(self) -> None:
        """Wake as many waiting calls as there are free slots, oldest first.

        Only those: waking every waiter at each release would have thousands of queued calls
        (a grading step queues all its jobs at once) each look and wait again, quadratic work."""
        free = self.limit - self.in_flight
        for waiter in self._waiters:
            if free <= 0:
                break
            if not waiter.done():
                waiter.set_result(None)
            free -= 1  # a woken call not yet running holds its slot too

    def state(self) -> LimiterState:
        paused = max(0.0, self._resume_at - self._clock())
        return LimiterState(self.limit, self.ceiling, self.in_flight, paused, self.rate_limited)

    def summary(self) -> dict[str, Any]:
        """What the limiter did over a run (written to the run's manifest)."""
        summary: dict[str, Any] = {
            "ceiling": self.ceiling,
            "final": self.limit,
            "lowest": self.lowest,
            "rate_limited": self.rate_limited,
            "decreases": self.decreases,
            "waited_s": round(self.waited_s, 3),
        }
        if self.budget is not None:
            summary["rate_budget"] = self.budget.summary()
        return summary

    async def acquire(self) -> int:
        """Wait for a slot; returns the episode the call starts in (pass it to :meth:`release`).

        Calls start in the order they asked: a new call queues behind the waiting ones, and a
        woken call that finds no slot after all (the limit halved meanwhile) goes back to the
        front of the queue."""
        woken = False
        while True:
            wait = self._resume_at - self._clock()
            if wait > 0:
                self.waited_s += wait
                await self._sleep(wait)
                continue
            if self.in_flight < self.limit and (woken or not self._waiters):
                self.in_flight += 1
                return self._epoch
            waiter = asyncio.get_running_loop().create_future()
            if woken:
                self._waiters.appendleft(waiter)
            else:
                self._waiters.append(waiter)
            try:
                await waiter
            except BaseException:  # cancelled, woken or not: a wake it was given passes on
                self._waiters.remove(waiter)
                self._wake()
                raise
            self._waiters.remove(waiter)
            woken = True

    def release(self, epoch: int, *, ok: bool = True, rate_limited: bool = False,
                wait: float | None = None) -> None:
        """Give the slot back and adapt: halve on a 429 of the current episode, grow after a
        window of successes; other failures (``ok=False``) neither shrink nor grow the limit."""
        self.in_flight -= 1
        if rate_limited:
            self.rate_limited += 1
            if wait is not None:
                self._resume_at = max(self._resume_at, self._clock() + wait)
            if epoch == self._epoch:
                self.limit = max(1, self.limit // 2)
                self.lowest = min(self.lowest, self.limit)
                self.decreases += 1
                self._epoch += 1
                self._successes = 0
        elif ok:
            self._successes += 1
            if self.limit < self.ceiling and self._successes >= (self.window or self.limit):
                self.limit += 1
                self._successes = 0
        self._wake()

    async def run(self, fn: Callable[[], Awaitable[T]], *, tokens: int = 0) -> T:
        """Call ``fn`` within a slot (after the rate budget, when there is one, lets it start:
        ``tokens`` is the call's estimate, corrected from the reply's usage); a 429 it raises
        adapts the limit and is re-raised."""
        if self.budget is not None:
            await self.budget.take(tokens)
        epoch = await self.acquire()
        try:
            result = await fn()
        except BaseException as exc:
            status, headers = _status_and_headers(exc)
            limited = status == RATE_LIMIT_STATUS
            self.release(epoch, ok=False, rate_limited=limited,
                         wait=server_wait(headers, self._wall) if limited else None)
            raise
        self.release(epoch)
        if self.budget is not None and (used := reply_tokens(result)) is not None:
            self.budget.settle(tokens, used)
        return result
