"""respx for ``httpx2`` clients (the anthropic SDK's), in tests only.

respx patches ``httpx``; the anthropic SDK (2.x) sends through ``httpx2``. Within
:func:`routed_to_respx`, ``httpx2``'s own transports hand each request to an ``httpx`` client,
so the test's respx routes answer it as they answer the openai and google calls. Production code
keeps ``httpx2``'s transport untouched.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import httpx2
import pytest

from medmis.tools._bounded import shared_ssl_context

# httpx has decoded and measured the body already: these would describe the wire body
_BODY_HEADERS = frozenset({"content-encoding", "content-length", "transfer-encoding"})


def _request(request: httpx2.Request, content: bytes) -> dict[str, Any]:
    return {"method": request.method, "url": str(request.url),
            "headers": list(request.headers.multi_items()), "content": content}


def _response(response: httpx.Response, request: httpx2.Request) -> httpx2.Response:
    headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in _BODY_HEADERS]
    return httpx2.Response(response.status_code, headers=headers, content=response.content, request=request)


def _error(exc: httpx.TransportError, request: httpx2.Request) -> httpx2.TransportError:
    kind = getattr(httpx2, type(exc).__name__, httpx2.TransportError)
    return kind(str(exc) or type(exc).__name__, request=request)  # type: ignore[no-any-return]


async def _handle_async(self: Any, request: httpx2.Request) -> httpx2.Response:
    async with httpx.AsyncClient(verify=shared_ssl_context("httpx")) as client:  # no new CA read per request
        try:
            response = await client.request(**_request(request, await request.aread()))
        except httpx.TransportError as exc:
            raise _error(exc, request) from exc
    return _response(response, request)


def _handle(self: Any, request: httpx2.Request) -> httpx2.Response:
    with httpx.Client(verify=shared_ssl_context("httpx")) as client:
        try:
            response = client.request(**_request(request, request.read()))
        except httpx.TransportError as exc:
            raise _error(exc, request) from exc
    return _response(response, request)


@contextmanager
def routed_to_respx(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Within the block, ``httpx2``'s default transports send through ``httpx`` (and respx)."""
    with monkeypatch.context() as patch:
        patch.setattr(httpx2.AsyncHTTPTransport, "handle_async_request", _handle_async)
        patch.setattr(httpx2.HTTPTransport, "handle_request", _handle)
        yield
