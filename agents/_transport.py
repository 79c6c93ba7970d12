"""The HTTP clients every provider SDK sends through: ``httpx`` clients on an aiohttp transport.

Why not httpx's own transport: under 32 concurrent requests, httpcore's connection pool spends
most of a call's CPU choosing a connection (for every idle connection it asks anyio whether the
socket is readable, which rebuilds the socket's attribute table each time). Measured on the
2-core bench machine, 1,224 chat completions at 32 connections through the openai SDK cost
10.8 ms CPU per call on httpcore and 3.3 ms on aiohttp; a bare POST costs 5.8 ms and 1.0 ms.
So the clients stay ``httpx`` clients (the SDKs, ``classify``, the record/replay layer and
respx all speak httpx) and only the transport underneath is aiohttp's, through
``httpx_aiohttp`` (the package behind the openai SDK's own ``DefaultAioHttpClient``).

An aiohttp session belongs to the event loop it was opened in, while a chat model may be used
from several loops (``asyncio.run`` per test, the CLI's model check and then its run), so the
transport keeps one session per running loop. :func:`aclose_transports` closes the sessions of
the current loop; the harness calls it when a run ends, so no "Unclosed client session" is
printed at exit.

``MEDMIS_HTTP_TRANSPORT=httpx`` switches back to httpx's own transport (for comparisons, or
for a test double that patches httpcore). respx must then patch at the client level
(``respx.mock(using="httpx")``), which the test suite sets as its default.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from typing import Any

import httpx

from ._registry import HTTP_LIMITS

ENV_VARIABLE = "MEDMIS_HTTP_TRANSPORT"
CHOICES = ("aiohttp", "httpx")
_PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")

_TRANSPORTS: weakref.WeakSet[LoopLocalAiohttpTransport] = weakref.WeakSet()


def transport_kind() -> str:
    """The transport the next client gets: ``aiohttp`` unless the environment asks for ``httpx``.

    Raises:
        ValueError: For a value of ``MEDMIS_HTTP_TRANSPORT`` that is neither.
    """
    kind = (os.environ.get(ENV_VARIABLE) or "aiohttp").strip().lower()
    if kind not in CHOICES:
        raise ValueError(f"{ENV_VARIABLE}={kind!r}: expected one of {', '.join(CHOICES)}")
    return kind


class LoopLocalAiohttpTransport(httpx.AsyncBaseTransport):
    """An httpx transport that sends through one aiohttp session per running event loop.

    Args:
        limits: Connection limits; ``max_connections`` caps the aiohttp connector
            (``None``: unlimited) and ``keepalive_expiry`` becomes its keep-alive timeout.
    """

    def __init__(self, limits: httpx.Limits | None = None) -> None:
        self._limits = limits or httpx.Limits(**HTTP_LIMITS)
        self._per_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()
        _TRANSPORTS.add(self)

    def _session(self) -> Any:
        import aiohttp

        connector = aiohttp.TCPConnector(
            limit=self._limits.max_connections or 0,
            keepalive_timeout=self._limits.keepalive_expiry or 15.0,
        )
        # no trust_env: it reads ~/.netrc in a worker thread on every request; a process with
        # proxy variables gets httpx's own transport instead (see async_client)
        return aiohttp.ClientSession(connector=connector)

    def _for_loop(self) -> Any:
        from httpx_aiohttp import AiohttpTransport

        loop = asyncio.get_running_loop()
        inner = self._per_loop.get(loop)
        if inner is None:
            inner = AiohttpTransport(client=self._session())
            self._per_loop[loop] = inner
        return inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.userinfo:
            # httpx has already turned ``user:pass@`` into an Authorization header; aiohttp
            # refuses a URL with credentials next to one
            request.url = request.url.copy_with(userinfo=b"")
        try:
            response: httpx.Response = await self._for_loop().handle_async_request(request)
        except httpx.TransportError as exc:
            raise _remapped(exc, request) from exc.__cause__
        return response

    async def aclose(self) -> None:
        """Close this loop's session (sessions of loops that are gone cannot be awaited)."""
        inner = self._per_loop.pop(asyncio.get_running_loop(), None)
        if inner is not None:
            await inner.aclose()


def _remapped(exc: httpx.TransportError, request: httpx.Request) -> httpx.TransportError:
    """The httpx error httpx's own transport would raise for the aiohttp error behind ``exc``.

    ``httpx_aiohttp`` maps every ``ClientConnectionError`` (a refused connection, an unknown
    host, a server that hung up) to ``ConnectTimeout``, so a typo in a base URL would read
    "Request timed out". Timeouts keep their mapping.
    """
    import aiohttp

    cause = exc.__cause__
    message = str(cause) if cause is not None else str(exc)
    remapped: httpx.TransportError = exc
    if isinstance(cause, aiohttp.ClientConnectorError) and not isinstance(cause, TimeoutError):
        remapped = httpx.ConnectError(message, request=request)
    elif isinstance(cause, aiohttp.ServerDisconnectedError):
        remapped = httpx.RemoteProtocolError(message, request=request)
    elif isinstance(cause, (aiohttp.ClientOSError, aiohttp.ClientPayloadError)):
        remapped = httpx.ReadError(message, request=request)
    return remapped


def async_client(timeout_s: float, *, limits: httpx.Limits | None = None) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` for an SDK, on the transport :func:`transport_kind` names."""
    limits = limits or httpx.Limits(**HTTP_LIMITS)
    if transport_kind() == "httpx" or _proxied():
        return httpx.AsyncClient(timeout=timeout_s, limits=limits)
    return httpx.AsyncClient(timeout=timeout_s, transport=LoopLocalAiohttpTransport(limits))


def _proxied() -> bool:
    """Whether the environment names a proxy (httpx's transport honours it, ours would not)."""
    return any(os.environ.get(name) for name in _PROXY_VARIABLES)


class _LazySyncTransport(httpx.BaseTransport):
    """httpx's own transport, made on the first request.

    The SDKs want a synchronous client next to the asynchronous one, which a run never uses;
    making it eagerly costs every process httpcore's import and a TLS context.
    """

    def __init__(self) -> None:
        self._inner: httpx.HTTPTransport | None = None

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self._inner is None:
            self._inner = httpx.HTTPTransport(limits=httpx.Limits(**HTTP_LIMITS))
        return self._inner.handle_request(request)

    def close(self) -> None:
        if self._inner is not None:
            self._inner.close()


def sync_client(timeout_s: float) -> httpx.Client:
    """An ``httpx.Client`` for an SDK's synchronous calls (httpx's own transport, made lazily)."""
    if _proxied():
        return httpx.Client(timeout=timeout_s, limits=httpx.Limits(**HTTP_LIMITS))
    return httpx.Client(timeout=timeout_s, transport=_LazySyncTransport())


async def aclose_transports() -> None:
    """Close every aiohttp session opened in the running loop (call when a run ends)."""
    for transport in list(_TRANSPORTS):
        await transport.aclose()
