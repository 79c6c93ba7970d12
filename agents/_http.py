"""The HTTP clients handed to the provider SDKs: bounded ``httpx`` / ``httpx2`` clients.

Every SDK takes its HTTP client through a public argument (openai's and LangChain's
``http_client`` / ``http_async_client``, anthropic's ``http_client``, google-genai's
``HttpOptions.httpx_client`` / ``httpx_async_client``). What they get here are the toolkit's
bounded clients (:mod:`medmis.tools._bounded`): the library's own transport and connection
pool, plus one deadline for the whole request and a cap on the reply's decoded size.
google-genai (and LangChain's other integrations) take ``httpx`` clients; the anthropic SDK
(2.x) takes only ``httpx2`` clients, and the openai SDK (3.x) gets ``httpx2`` ones too, its own
default family: under many connections ``httpx2``'s pool costs a fraction of legacy
``httpx``'s (docs/performance.md), hence the two families.

An ``httpx`` client's connection pool belongs to the event loop it was used in. A run uses its
models in one loop; :func:`aclose_transports` closes the asynchronous clients made here when
it ends, so no connection outlives its loop.
"""

from __future__ import annotations

import weakref
from typing import Any

import httpx

from medmis.tools import DEFAULT_MAX_RESPONSE_BYTES, BoundedAsyncClient, BoundedClient

from ._options import HTTP_LIMITS

_OPEN: weakref.WeakSet[Any] = weakref.WeakSet()


def async_client(timeout_s: float, *, max_response_bytes: int | None = DEFAULT_MAX_RESPONSE_BYTES) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` for an SDK: ``timeout_s`` bounds each read and the whole request
    (sending it and reading the whole reply); a reply over ``max_response_bytes`` decoded fails
    with ``ResponseTooLargeError``."""
    client = BoundedAsyncClient(timeout=timeout_s, limits=httpx.Limits(**HTTP_LIMITS),
                                deadline_s=timeout_s, max_bytes=max_response_bytes)
    _OPEN.add(client)
    return client


def sync_client(timeout_s: float, *, max_response_bytes: int | None = DEFAULT_MAX_RESPONSE_BYTES) -> httpx.Client:
    """The synchronous twin of :func:`async_client`, with the same bounds."""
    return BoundedClient(timeout=timeout_s, limits=httpx.Limits(**HTTP_LIMITS),
                         deadline_s=timeout_s, max_bytes=max_response_bytes)


def httpx2_async_client(timeout_s: float, *, max_response_bytes: int | None = DEFAULT_MAX_RESPONSE_BYTES) -> Any:
    """:func:`async_client` for an SDK that speaks ``httpx2`` (anthropic, openai)."""
    import httpx2

    from medmis.tools import Httpx2BoundedAsyncClient

    client = Httpx2BoundedAsyncClient(timeout=timeout_s, limits=httpx2.Limits(**HTTP_LIMITS),
                                      deadline_s=timeout_s, max_bytes=max_response_bytes)
    _OPEN.add(client)
    return client


def httpx2_sync_client(timeout_s: float, *, max_response_bytes: int | None = DEFAULT_MAX_RESPONSE_BYTES) -> Any:
    """:func:`sync_client` for an SDK that speaks ``httpx2`` (anthropic, openai)."""
    import httpx2

    from medmis.tools import Httpx2BoundedClient

    return Httpx2BoundedClient(timeout=timeout_s, limits=httpx2.Limits(**HTTP_LIMITS),
                               deadline_s=timeout_s, max_bytes=max_response_bytes)


async def aclose_transports() -> None:
    """Close the asynchronous clients made here that are still open (call when a run ends)."""
    for client in list(_OPEN):
        _OPEN.discard(client)
        if client.is_closed:
            continue
        try:
            await client.aclose()
        except RuntimeError:
            # left open by a run whose event loop has ended (an error, a test): its
            # connections belong to that loop and went with it; nothing is left to close here
            continue
