"""The HTTP client of a web backend: the caller's, or one made on first use and closed by it."""

from __future__ import annotations

import httpx

from ._bounded import BoundedAsyncClient


class LazyClient:
    """A caller's ``httpx.AsyncClient`` (never closed here), or one created on first use, so
    that a backend that fails to configure holds no connections. The one made here bounds
    each request as a whole by ``timeout`` and caps its reply (:mod:`._bounded`)."""

    def __init__(self, client: httpx.AsyncClient | None, *, timeout: float) -> None:
        self._given = client
        self._owned: httpx.AsyncClient | None = None
        self._timeout = timeout

    def get(self) -> httpx.AsyncClient:
        """The client to send with."""
        if self._given is not None:
            return self._given
        if self._owned is None:
            self._owned = BoundedAsyncClient(deadline_s=self._timeout, timeout=self._timeout,
                                             follow_redirects=True)
        return self._owned

    async def aclose(self) -> None:
        """Close the client made here, if any."""
        client, self._owned = self._owned, None
        if client is not None:
            await client.aclose()
