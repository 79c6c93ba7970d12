"""httpx2 transports that send every request through a (legacy) ``httpx`` client.

The anthropic SDK (2.x) speaks only ``httpx2`` and refuses ``httpx`` clients, while the rest
of the toolkit — respx-mocked tests, ``classify``, the connection limits — speaks ``httpx``.
These transports sit inside the SDK's ``httpx2`` client and hand each request to an ``httpx``
client, so every model call is seen by the same machinery as the OpenAI and Gemini calls.

Bodies are read whole (the adapters never stream). The ``httpx`` client has already decoded
the body, so the encoding headers are dropped before the ``httpx2`` response is built (it
would otherwise decode a second time). Transport failures are re-raised as their ``httpx2``
counterparts, which the SDK turns into ``APITimeoutError`` / ``APIConnectionError``.
"""

from __future__ import annotations

import httpx
import httpx2

# Describe the wire body, which ``httpx`` has already decoded and measured.
_BODY_HEADERS = frozenset({"content-encoding", "content-length", "transfer-encoding"})


def _to_httpx(client: httpx.Client | httpx.AsyncClient, request: httpx2.Request) -> httpx.Request:
    return client.build_request(
        request.method,
        str(request.url),
        headers=[(k, v) for k, v in request.headers.multi_items()],
        content=request.content,
    )


def _to_httpx2(response: httpx.Response, request: httpx2.Request) -> httpx2.Response:
    headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in _BODY_HEADERS]
    return httpx2.Response(response.status_code, headers=headers, content=response.content, request=request)


def _as_httpx2_error(exc: httpx.TransportError, request: httpx2.Request) -> httpx2.TransportError:
    message = str(exc) or type(exc).__name__
    if isinstance(exc, httpx.TimeoutException):
        return httpx2.ReadTimeout(message, request=request)
    return httpx2.ConnectError(message, request=request)


class HttpxBridge(httpx2.BaseTransport):
    """Sends ``httpx2`` requests through a synchronous ``httpx.Client``."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        request.read()
        try:
            response = self.client.send(_to_httpx(self.client, request))
            response.read()
        except httpx.TransportError as exc:
            raise _as_httpx2_error(exc, request) from exc
        return _to_httpx2(response, request)

    def close(self) -> None:
        self.client.close()


class AsyncHttpxBridge(httpx2.AsyncBaseTransport):
    """Sends ``httpx2`` requests through an ``httpx.AsyncClient``."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        await request.aread()
        try:
            response = await self.client.send(_to_httpx(self.client, request))
            await response.aread()
        except httpx.TransportError as exc:
            raise _as_httpx2_error(exc, request) from exc
        return _to_httpx2(response, request)

    async def aclose(self) -> None:
        await self.client.aclose()
