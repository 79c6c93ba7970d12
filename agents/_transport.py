"""The HTTP clients every provider SDK sends through: ``httpx`` clients on an aiohttp transport.

Why not httpx's own transport: under 32 concurrent requests, httpcore's connection pool spends
most of a call's CPU choosing a connection (for every idle connection it asks anyio whether the
socket is readable, which rebuilds the socket's attribute table each time). Measured on the
2-core bench machine, 1,224 chat completions at 32 connections through the openai SDK cost
10.8 ms CPU per call on httpcore and 3.3 ms on aiohttp; a bare POST costs 5.8 ms and 1.0 ms.
So the clients stay ``httpx`` clients (the SDKs, ``classify``, the record/replay layer and
respx all speak httpx) and only the transport underneath is aiohttp's. The transport is
written here rather than taken from ``httpx_aiohttp`` (behind the openai SDK's own
``DefaultAioHttpClient``) because that one hands aiohttp httpx's header object, whose
lookups rescan every header (a quarter of a millisecond per request with the SDKs' dozen
headers), and reports a refused connection or an unknown host as a connect *timeout*.

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
from collections.abc import AsyncIterator
from typing import Any

import httpx

from medmis.tools import DEFAULT_MAX_RESPONSE_BYTES, BoundedAsyncClient, BoundedClient

from ._options import HTTP_LIMITS

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

    Requests are handed to aiohttp as they are (method, URL, header pairs, body bytes,
    httpx's timeouts); the response comes back as an httpx response whose body streams from
    aiohttp's. Compression is left to httpx (aiohttp's own decoding is off) so that
    ``Content-Encoding`` is decoded once. aiohttp's errors become the httpx errors httpx's
    own transport raises for the same failure, which ``classify`` and the SDKs understand.

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

        loop = asyncio.get_running_loop()
        session = self._per_loop.get(loop)
        if session is None or session.closed:
            connector = aiohttp.TCPConnector(
                limit=self._limits.max_connections or 0,
                keepalive_timeout=self._limits.keepalive_expiry or 15.0,
            )
            # no trust_env: it reads ~/.netrc in a worker thread on every request; a process
            # with proxy variables gets httpx's own transport instead (see async_client)
            session = aiohttp.ClientSession(connector=connector, auto_decompress=False)
            self._per_loop[loop] = session
        return session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        import aiohttp

        url = request.url
        if url.userinfo:
            # httpx has already turned ``user:pass@`` into an Authorization header; aiohttp
            # refuses a URL with credentials next to one
            url = url.copy_with(userinfo=b"")
        timeout = request.extensions.get("timeout", {})
        try:
            body = await request.aread()
            response = await self._session().request(
                request.method,
                str(url),
                headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw],
                data=body or None,
                allow_redirects=False,
                compress=None,
                skip_auto_headers=("Accept-Encoding", "User-Agent", "Content-Type"),
                timeout=aiohttp.ClientTimeout(
                    connect=timeout.get("pool"), sock_connect=timeout.get("connect"),
                    sock_read=timeout.get("read"),
                ),
            )
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise _as_httpx_error(exc, request) from exc
        return httpx.Response(
            status_code=response.status,
            headers=list(response.raw_headers),
            stream=_ResponseStream(response, request),
            request=request,
            extensions={"http_version": b"HTTP/1.1",
                        "reason_phrase": (response.reason or "").encode("latin-1")},
        )

    async def aclose(self) -> None:
        """Close this loop's session (sessions of loops that are gone cannot be awaited)."""
        session = self._per_loop.pop(asyncio.get_running_loop(), None)
        if session is not None:
            await session.close()


class _ResponseStream(httpx.AsyncByteStream):
    """An aiohttp response body as httpx reads it; releases the connection when closed."""

    def __init__(self, response: Any, request: httpx.Request) -> None:
        self._response = response
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        import aiohttp

        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise _as_httpx_error(exc, self._request) from exc

    async def aclose(self) -> None:
        self._response.release()


def _as_httpx_error(exc: BaseException, request: httpx.Request) -> httpx.TransportError:
    """The httpx error httpx's own transport raises for the failure behind an aiohttp error."""
    import aiohttp

    message = str(exc) or type(exc).__name__
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout(message, request=request)
    if isinstance(exc, TimeoutError):  # aiohttp's socket-read timeout and asyncio's
        return httpx.ReadTimeout(message, request=request)
    if isinstance(exc, aiohttp.ClientConnectorError):  # refused, unknown host, TLS set-up
        return httpx.ConnectError(message, request=request)
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
        return httpx.RemoteProtocolError(message, request=request)
    if isinstance(exc, aiohttp.InvalidURL):
        return httpx.UnsupportedProtocol(message, request=request)
    return httpx.ReadError(message, request=request)  # a reset connection and the rest


class _SetCookieJar(httpx.Cookies):
    """A client's cookie jar that reads a response's cookies only when it sets some.

    httpx hands every response to ``http.cookiejar`` (through ``urllib.request`` look-alikes
    of the request and the response, which copy every header): a fifth of a millisecond per
    call, for responses that carry no ``Set-Cookie`` header at all, as model APIs' do not.
    """

    def extract_cookies(self, response: httpx.Response) -> None:
        if "set-cookie" in response.headers:
            super().extract_cookies(response)


def async_client(
    timeout_s: float, *, limits: httpx.Limits | None = None,
    max_response_bytes: int | None = DEFAULT_MAX_RESPONSE_BYTES,
) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` for an SDK, on the transport :func:`transport_kind` names.

    ``timeout_s`` bounds each read and the whole request (sending it and reading the whole
    reply); a reply over ``max_response_bytes`` fails with ``ResponseTooLargeError`` (see
    :mod:`medmis.tools._bounded`).
    """
    limits = limits or httpx.Limits(**HTTP_LIMITS)
    bounds: dict[str, Any] = {"deadline_s": timeout_s, "max_bytes": max_response_bytes}
    if transport_kind() == "httpx" or _proxied():
        client = BoundedAsyncClient(timeout=timeout_s, limits=limits, **bounds)
    else:
        client = BoundedAsyncClient(timeout=timeout_s, transport=LoopLocalAiohttpTransport(limits), **bounds)
    client._cookies = _SetCookieJar(client.cookies)  # the jar httpx's send() extracts into
    return client


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


def sync_client(timeout_s: float, *, max_response_bytes: int | None = DEFAULT_MAX_RESPONSE_BYTES) -> httpx.Client:
    """An ``httpx.Client`` for an SDK's synchronous calls (httpx's own transport, made lazily),
    with the same deadline and decoded reply cap as :func:`async_client`."""
    bounds: dict[str, Any] = {"deadline_s": timeout_s, "max_bytes": max_response_bytes}
    if _proxied():
        return BoundedClient(timeout=timeout_s, limits=httpx.Limits(**HTTP_LIMITS), **bounds)
    return BoundedClient(timeout=timeout_s, transport=_LazySyncTransport(), **bounds)


async def aclose_transports() -> None:
    """Close every aiohttp session opened in the running loop (call when a run ends)."""
    for transport in list(_TRANSPORTS):
        await transport.aclose()
