"""Bounded retries with exponential backoff and full jitter.

The decision is made from exception *types* and HTTP status codes, never from message text.
Retries are capped by attempts and by a deadline; ``Retry-After`` is honoured (within the cap).
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import TypeVar

import httpx

from ._errors import MalformedResponseError, TransientModelError, raise_size_cap

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


def _parse_retry_after(value: str | None, wall: Callable[[], float] = time.time) -> float | None:
    """Seconds to wait from a ``Retry-After`` value: a number of seconds or an HTTP date."""
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
    if when.tzinfo is None:  # RFC 5322 "-0000": UTC with unknown origin, not local time
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - wall())


def _retry_after(headers: httpx.Headers) -> float | None:
    ms = headers.get("retry-after-ms")  # OpenAI sends milliseconds as well
    if ms:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    return _parse_retry_after(headers.get("retry-after"))


# Transport/timeout errors of the provider SDKs besides httpx's: httpx2 (the default transport
# of openai>=3 and google-genai>=3, whose exceptions do not subclass httpx's), openai, anthropic.
_SDK_TRANSPORT_ERRORS = (
    ("httpx2", ("TimeoutException", "TransportError")),
    ("openai", ("APITimeoutError", "APIConnectionError")),
    ("anthropic", ("APITimeoutError", "APIConnectionError")),
)


def _transport_error_types() -> tuple[type[BaseException], ...]:
    """Transport/timeout exception types of httpx and of the SDKs already imported.

    Only loaded modules are asked: an SDK that was never imported raised nothing, and
    importing one here (anthropic takes seconds) would block the event loop mid-run.
    """
    types: list[type[BaseException]] = [httpx.TimeoutException, httpx.TransportError, asyncio.TimeoutError]
    for module_name, names in _SDK_TRANSPORT_ERRORS:
        module = sys.modules.get(module_name)
        for name in names:
            found = getattr(module, name, None) if module is not None else None
            if isinstance(found, type) and issubclass(found, BaseException):
                types.append(found)
    return tuple(types)


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
    if isinstance(exc, _transport_error_types()):
        return True, None
    status, headers = _status_and_headers(exc)
    if status is not None and status in RETRY_STATUS:
        return True, _retry_after(headers) if headers else None
    return False, None


async def retry_async(
    fn: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    *,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    rng: random.Random | None = None,
) -> T:
    """Call ``fn`` until it succeeds, a non-retryable error occurs, or the policy is spent."""
    start = time.monotonic()
    for attempt in range(1, policy.max_retries + 2):
        try:
            return await fn()
        except Exception as exc:
            # an SDK's "connection error" over a reply past the size cap (any client, LangChain's
            # integrations too) fails as the cap's own error, naming the server, and is not retried
            raise_size_cap(exc)
            retryable, retry_after = classify(exc)
            if not retryable or attempt > policy.max_retries:
                raise
            backoff = min(policy.max_delay, policy.base_delay * (2 ** (attempt - 1)))
            if rng is None:  # made on the first retry: most calls never need one
                rng = random.Random()
            delay = rng.uniform(0, backoff)
            if retry_after is not None:
                # the server's wait is honoured in full; the deadline decides whether to wait
                delay = max(delay, retry_after)
            if time.monotonic() - start + delay > policy.deadline_s:
                raise
            await sleep(delay)
    raise AssertionError("unreachable: the last attempt either returns or raises")
