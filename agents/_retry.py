"""Bounded retries with exponential backoff and full jitter.

The decision is made from exception *types* and HTTP status codes, never from message text.
Retries are capped by attempts and by a deadline; ``Retry-After`` is honoured (within the cap).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import TypeVar

import httpx

from ._errors import MalformedResponseError, TransientModelError

T = TypeVar("T")

RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504, 529})


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 4
    base_delay: float = 1.0
    max_delay: float = 30.0
    deadline_s: float = 300.0

    @classmethod
    def none(cls) -> RetryPolicy:
        return cls(max_retries=0)


def _parse_retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _status_and_headers(exc: BaseException) -> tuple[int | None, httpx.Headers | None]:
    status = getattr(exc, "status_code", None)
    if status is None:
        status = getattr(exc, "code", None)  # google.genai.errors.APIError
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if status is None and response is not None:
        status = getattr(response, "status_code", None)
    if not isinstance(status, int):
        status = None
    if headers is not None and not isinstance(headers, httpx.Headers):
        try:
            headers = httpx.Headers(dict(headers))
        except Exception:
            headers = None
    return status, headers


def classify(exc: BaseException) -> tuple[bool, float | None]:
    """Return (retryable, retry_after_seconds) for an exception raised by a model call."""
    if isinstance(exc, TransientModelError):
        return True, exc.retry_after
    if isinstance(exc, MalformedResponseError):
        return True, None
    if isinstance(exc, (httpx.TimeoutException, httpx.TransportError, asyncio.TimeoutError)):
        return True, None
    try:  # the openai SDK wraps transport failures in its own classes
        import openai

        if isinstance(exc, (openai.APITimeoutError, openai.APIConnectionError)):
            return True, None
    except ImportError:  # pragma: no cover - openai is a core dependency
        pass
    status, headers = _status_and_headers(exc)
    if status is not None and status in RETRY_STATUS:
        retry_after = _parse_retry_after(headers.get("retry-after")) if headers else None
        return True, retry_after
    return False, None


async def retry_async(
    fn: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    *,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    rng: random.Random | None = None,
) -> T:
    """Call ``fn`` until it succeeds, a non-retryable error occurs, or the policy is spent."""
    rng = rng or random.Random()
    start = time.monotonic()
    for attempt in range(1, policy.max_retries + 2):
        try:
            return await fn()
        except Exception as exc:
            retryable, retry_after = classify(exc)
            if not retryable or attempt > policy.max_retries:
                raise
            backoff = min(policy.max_delay, policy.base_delay * (2 ** (attempt - 1)))
            delay = rng.uniform(0, backoff)
            if retry_after is not None:
                delay = max(delay, min(retry_after, policy.max_delay))
            if time.monotonic() - start + delay > policy.deadline_s:
                raise
            await sleep(delay)
    raise AssertionError("unreachable: the last attempt either returns or raises")
