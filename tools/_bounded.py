"""A deadline for the whole request and a cap on the reply's size, for an httpx client.

httpx's and aiohttp's timeouts bound each read, not the request: a server that sends one byte
a second never trips a 120 s read timeout and holds the call forever, and a reply of any size
is buffered whole before anyone looks at it. :class:`BoundedAsyncClient` is an
``httpx.AsyncClient`` whose ``send`` (which ``get``, ``post``, ``request`` and the SDKs all go
through) runs under one ``asyncio.timeout`` from the request to the last byte of the reply, and
reads the body through a counting stream that stops as soon as it passes the cap (counted as
sent, before ``Content-Encoding`` is decoded); a declared ``Content-Length`` over the cap fails
before the body is read. No task or timer per chunk: one timer per request. It works over any
transport (aiohttp's, httpx's own with the environment's proxies, a test's mock).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import httpx

DEFAULT_MAX_RESPONSE_BYTES = 8 * 1024 * 1024
"""The default cap on one reply's body: 8 MiB, far above any chat completion or search reply."""


_BULK: ContextVar[bool] = ContextVar("medmis_bulk_transfers", default=False)


@contextmanager
def bulk_transfers() -> Iterator[None]:
    """Requests made within this context (in this task and the tasks it starts) have no
    whole-request deadline and no size cap; the per-read timeouts still hold. For transfers
    that are large by design: a batch job's upload, its polls and its result files."""
    token = _BULK.set(True)
    try:
        yield
    finally:
        _BULK.reset(token)


class ResponseTooLargeError(httpx.RequestError):
    """A reply larger than the cap. Not retried: the same request gets the same reply.

    Deliberately not an ``httpx.TransportError``, which callers treat as transient.
    """

    def __init__(self, request: httpx.Request, max_bytes: int) -> None:
        url = request.url  # no userinfo or query: they may hold credentials
        host = f"[{url.host}]" if ":" in url.host else url.host
        port = f":{url.port}" if url.port else ""
        super().__init__(
            f"the reply from {url.scheme}://{host}{port}{url.path} is larger than {max_bytes:,} bytes "
            "(the response size cap)",
            request=request,
        )
        self.max_bytes = max_bytes


class RequestDeadlineError(httpx.ReadTimeout):
    """No complete reply within the request's deadline (retried like any timeout)."""


class _CappedStream(httpx.AsyncByteStream):
    """A response body that raises :class:`ResponseTooLargeError` past ``max_bytes``."""

    def __init__(self, inner: httpx.AsyncByteStream, request: httpx.Request, max_bytes: int) -> None:
        self._inner, self._request, self._max = inner, request, max_bytes

    async def __aiter__(self) -> AsyncIterator[bytes]:
        total = 0
        async for chunk in self._inner:
            total += len(chunk)
            if total > self._max:
                raise ResponseTooLargeError(self._request, self._max)
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class BoundedAsyncClient(httpx.AsyncClient):
    """An ``httpx.AsyncClient`` with a whole-request deadline and a reply size cap.

    Args:
        deadline_s: Seconds from sending a request to the last byte of its reply, redirects
            included (``None``: none beyond the per-read ``timeout``). A streamed request
            (``send(stream=True)``) is bounded until its headers arrive; its reader bounds
            the rest.
        max_bytes: Largest reply body, in bytes as sent (``None``: no cap).
        **kwargs: ``httpx.AsyncClient``'s arguments.
    """

    def __init__(self, *, deadline_s: float | None, max_bytes: int | None = DEFAULT_MAX_RESPONSE_BYTES,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.deadline_s = deadline_s
        self.max_bytes = max_bytes

    async def send(self, request: httpx.Request, *, stream: bool = False, **kwargs: Any) -> httpx.Response:
        if _BULK.get():
            return await super().send(request, stream=stream, **kwargs)
        try:
            async with asyncio.timeout(self.deadline_s):
                response = await super().send(request, stream=True, **kwargs)
                cap = self.max_bytes
                if cap is not None:
                    declared = response.headers.get("content-length", "")
                    if not declared.isdigit():  # chunked or until close: counted while read
                        if isinstance(response.stream, httpx.AsyncByteStream):
                            response.stream = _CappedStream(response.stream, request, cap)
                    elif int(declared) > cap:  # the transports never read past a declared length
                        await response.aclose()
                        raise ResponseTooLargeError(request, cap)
                if not stream:
                    try:
                        await response.aread()
                    finally:
                        await response.aclose()
        except TimeoutError as exc:  # only ours: transports raise httpx's own timeouts
            raise RequestDeadlineError(
                f"no complete reply within {self.deadline_s:g} s (the request deadline)", request=request
            ) from exc
        return response
