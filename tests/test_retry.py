"""Unit tests for medmis.agents._retry: classification, Retry-After, backoff, attempt and deadline caps."""

from __future__ import annotations

import asyncio
import random
import time
from datetime import UTC, datetime
from email.utils import format_datetime
from types import SimpleNamespace
from typing import Any

import httpx
import openai
import pytest
from google.genai import errors as genai_errors

from medmis.agents import (
    BlockedResponseError,
    MalformedResponseError,
    MissingKeyError,
    TransientModelError,
    _retry,
)
from medmis.agents._retry import (
    RETRY_STATUS,
    RetryPolicy,
    _parse_retry_after,
    classify,
    retry_async,
)

REQUEST = httpx.Request("POST", "https://api.example.test/v1/generate")


def response(status: int, headers: dict[str, str] | None = None, body: Any = None) -> httpx.Response:
    return httpx.Response(status, headers=headers, json=body if body is not None else {}, request=REQUEST)


class StatusError(Exception):
    """The smallest exception carrying a status code, as many SDKs raise."""

    def __init__(self, status_code: int) -> None:
        super().__init__(f"status {status_code}")
        self.status_code = status_code


# -- classify ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "exc",
    [
        httpx.ConnectError("refused", request=REQUEST),
        httpx.ReadTimeout("slow", request=REQUEST),
        httpx.RemoteProtocolError("peer closed", request=REQUEST),
        TimeoutError(),
        openai.APITimeoutError(request=REQUEST),  # type: ignore[arg-type]
        openai.APIConnectionError(request=REQUEST),  # type: ignore[arg-type]
    ],
    ids=lambda e: type(e).__name__,
)
def test_transport_failures_are_retryable(exc: BaseException) -> None:
    assert classify(exc) == (True, None)


@pytest.mark.parametrize("status", sorted(RETRY_STATUS))
def test_retryable_status_codes(status: int) -> None:
    assert classify(StatusError(status)) == (True, None)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 422])
def test_client_errors_are_not_retryable(status: int) -> None:
    assert classify(StatusError(status)) == (False, None)


def test_httpx_status_error_uses_the_response() -> None:
    exc = httpx.HTTPStatusError("busy", request=REQUEST, response=response(503, {"Retry-After": "5"}))
    assert classify(exc) == (True, 5.0)
    exc = httpx.HTTPStatusError("bad", request=REQUEST, response=response(400))
    assert classify(exc) == (False, None)


def test_openai_errors() -> None:
    limited = openai.RateLimitError(
        "slow down",
        response=response(429, {"retry-after": "2"}),  # type: ignore[arg-type]
        body=None,
    )
    assert classify(limited) == (True, 2.0)
    overloaded = openai.InternalServerError("overloaded", response=response(503), body=None)  # type: ignore[arg-type]
    assert classify(overloaded) == (True, None)
    bad = openai.BadRequestError("bad", response=response(400), body=None)  # type: ignore[arg-type]
    assert classify(bad) == (False, None)
    auth = openai.AuthenticationError("key", response=response(401), body=None)  # type: ignore[arg-type]
    assert classify(auth) == (False, None)


def test_google_errors() -> None:
    body = {"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED"}}
    limited = genai_errors.ClientError(429, body, response=response(429, {"Retry-After": "4"}, body))
    assert classify(limited) == (True, 4.0)
    unavailable = genai_errors.ServerError(
        503, {"error": {"code": 503, "message": "down", "status": "UNAVAILABLE"}}, response=response(503)
    )
    assert classify(unavailable) == (True, None)
    invalid = genai_errors.ClientError(
        400, {"error": {"code": 400, "message": "bad", "status": "INVALID_ARGUMENT"}}, response=response(400)
    )
    assert classify(invalid) == (False, None)


def test_toolkit_errors() -> None:
    assert classify(MalformedResponseError("garbled")) == (True, None)
    assert classify(TransientModelError("flaky", retry_after=1.5)) == (True, 1.5)
    assert classify(BlockedResponseError("safety")) == (False, None)
    assert classify(MissingKeyError("openai", ("OPENAI_API_KEY",))) == (False, None)
    assert classify(ValueError("a bug")) == (False, None)


def test_decision_ignores_message_text() -> None:
    assert classify(RuntimeError("429 Too Many Requests: rate limit, retry later")) == (False, None)


def test_headers_that_are_not_httpx_headers() -> None:
    exc = StatusError(429)
    exc.response = SimpleNamespace(headers={"Retry-After": "3"})  # type: ignore[attr-defined]
    assert classify(exc) == (True, 3.0)


def test_httpx2_transport_errors_are_retryable() -> None:
    httpx2 = pytest.importorskip("httpx2")
    assert classify(httpx2.ConnectError("refused")) == (True, None)


# -- Retry-After -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [("3", 3.0), ("0", 0.0), ("2.5", 2.5), ("-5", 0.0), (None, None), ("", None), ("soon", None)],
)
def test_retry_after_seconds(value: str | None, expected: float | None) -> None:
    assert _parse_retry_after(value) == expected


def test_retry_after_http_date() -> None:
    future = format_datetime(_utc(time.time() + 30), usegmt=True)
    parsed = _parse_retry_after(future)
    assert parsed is not None and 27 <= parsed <= 31
    past = format_datetime(_utc(time.time() - 60), usegmt=True)
    assert _parse_retry_after(past) == 0.0


def _utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)


# -- retry_async -------------------------------------------------------------------------------


class Flaky:
    """Fails with the given exceptions in turn, then returns ``"ok"``."""

    def __init__(self, *failures: BaseException) -> None:
        self.failures = list(failures)
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return "ok"


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


async def test_succeeds_after_transient_failures() -> None:
    fn, sleep = Flaky(StatusError(503), httpx.ConnectError("x", request=REQUEST)), Sleeps()
    assert await retry_async(fn, RetryPolicy(max_retries=3), sleep=sleep, rng=random.Random(0)) == "ok"
    assert fn.calls == 3
    assert len(sleep.delays) == 2


async def test_non_retryable_is_raised_immediately() -> None:
    fn, sleep = Flaky(BlockedResponseError("safety")), Sleeps()
    with pytest.raises(BlockedResponseError):
        await retry_async(fn, RetryPolicy(max_retries=5), sleep=sleep)
    assert fn.calls == 1
    assert sleep.delays == []


async def test_attempts_are_bounded() -> None:
    fn, sleep = Flaky(*[StatusError(503) for _ in range(10)]), Sleeps()
    with pytest.raises(StatusError):
        await retry_async(fn, RetryPolicy(max_retries=2), sleep=sleep)
    assert fn.calls == 3  # the first attempt plus two retries
    assert len(sleep.delays) == 2


async def test_policy_none_tries_once() -> None:
    fn, sleep = Flaky(StatusError(503)), Sleeps()
    with pytest.raises(StatusError):
        await retry_async(fn, RetryPolicy.none(), sleep=sleep)
    assert fn.calls == 1 and sleep.delays == []


async def test_backoff_is_exponential_full_jitter_and_capped() -> None:
    policy = RetryPolicy(max_retries=6, base_delay=1.0, max_delay=4.0, deadline_s=1e6)
    fn, sleep = Flaky(*[StatusError(502) for _ in range(6)]), Sleeps()
    await retry_async(fn, policy, sleep=sleep, rng=random.Random(1))
    caps = [1.0, 2.0, 4.0, 4.0, 4.0, 4.0]
    assert len(sleep.delays) == len(caps)
    assert all(0.0 <= d <= cap for d, cap in zip(sleep.delays, caps, strict=True))
    # seeded jitter is reproducible
    fn2, sleep2 = Flaky(*[StatusError(502) for _ in range(6)]), Sleeps()
    await retry_async(fn2, policy, sleep=sleep2, rng=random.Random(1))
    assert sleep2.delays == sleep.delays


async def test_retry_after_is_honoured_in_full_within_the_deadline() -> None:
    # waiting less than the server asked would only earn another 429
    fn, sleep = Flaky(TransientModelError("busy", retry_after=7), TransientModelError("busy", retry_after=100)), Sleeps()
    policy = RetryPolicy(max_retries=3, base_delay=0.01, max_delay=30.0, deadline_s=300.0)
    assert await retry_async(fn, policy, sleep=sleep) == "ok"
    assert sleep.delays == [7.0, 100.0]


def test_retry_after_ms_and_utc_dates() -> None:
    class Err(Exception):
        def __init__(self, headers: dict[str, str]) -> None:
            self.status_code = 429
            self.response = httpx.Response(429, headers=headers)

    assert classify(Err({"retry-after-ms": "1500", "retry-after": "9"})) == (True, 1.5)
    retryable, after = classify(Err({"retry-after": "Thu, 01 Jan 2099 00:00:00 -0000"}))
    assert retryable and after is not None and after > 1e9


async def test_deadline_stops_a_wait_that_would_overrun_it() -> None:
    fn, sleep = Flaky(TransientModelError("busy", retry_after=10)), Sleeps()
    with pytest.raises(TransientModelError):
        await retry_async(fn, RetryPolicy(max_retries=5, deadline_s=5.0), sleep=sleep)
    assert fn.calls == 1 and sleep.delays == []


async def test_deadline_counts_elapsed_time(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [0.0]
    # patch only the module's view of the clock; the event loop keeps the real one
    monkeypatch.setattr(_retry, "time", SimpleNamespace(monotonic=lambda: clock[0], time=time.time))

    async def slow_failure() -> str:
        clock[0] += 4.0  # each attempt takes four (fake) seconds
        raise StatusError(503)

    sleep = Sleeps()
    with pytest.raises(StatusError):
        await retry_async(slow_failure, RetryPolicy(max_retries=10, base_delay=0.0, deadline_s=10.0), sleep=sleep)
    # attempts end at t=4, 8, 12; the third failure is past the deadline, so no third sleep
    assert len(sleep.delays) == 2


async def test_cancellation_is_not_retried() -> None:
    fn, sleep = Flaky(asyncio.CancelledError()), Sleeps()
    with pytest.raises(asyncio.CancelledError):
        await retry_async(fn, RetryPolicy(max_retries=3), sleep=sleep)
    assert fn.calls == 1


def test_classifying_an_error_imports_no_sdk() -> None:
    # anthropic takes seconds to import: classifying the first retryable error mid-run must
    # not import it (an SDK never imported raised nothing).
    import subprocess
    import sys

    probe = ("import sys, httpx; from medmis.agents._retry import classify; "
             "classify(httpx.ConnectError('down')); print('anthropic' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
