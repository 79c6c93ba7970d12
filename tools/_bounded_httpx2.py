"""The bounded clients for ``httpx2``, the HTTP library the SDKs' own default clients use.

openai 3.x and anthropic 2.x make ``httpx2`` clients when they are handed none
(``DefaultAsyncHttpxClient`` is an ``httpx2.AsyncClient``), so the request deadline and the
decoded reply cap of :mod:`._bounded` are offered for it too, on the same reader
(:class:`~medmis.tools._bounded.DecodedReader`) and the same ``send``: an SDK client built
with ``http_client=Httpx2BoundedAsyncClient(...)`` is bounded whatever transport sits
underneath. A reply over the cap raises the one
:class:`~medmis.tools._bounded.ResponseTooLargeError`; a missed deadline raises an error that
is both :class:`~medmis.tools._bounded.RequestDeadlineError` and ``httpx2.ReadTimeout``, so
the SDK reports it as its own timeout.
"""

from __future__ import annotations

import httpx2

from ._bounded import (
    RequestDeadlineError,
    _AsyncBounded,
    _Bounds,
    _CappedStreamBody,
    _SyncBounded,
    _SyncCappedStreamBody,
)

__all__ = ["Httpx2BoundedAsyncClient", "Httpx2BoundedClient", "Httpx2RequestDeadlineError"]


# mypy sees two unrelated ``request`` properties; at run time both read the one ``_request``
class Httpx2RequestDeadlineError(RequestDeadlineError, httpx2.ReadTimeout):  # type: ignore[misc]
    """:class:`RequestDeadlineError` as an ``httpx2`` client raises it."""


class _CappedStream(_CappedStreamBody, httpx2.AsyncByteStream):
    pass


class _SyncCappedStream(_SyncCappedStreamBody, httpx2.SyncByteStream):
    pass


class _Httpx2Types(_Bounds):
    async_stream = _CappedStream
    sync_stream = _SyncCappedStream
    async_base = httpx2.AsyncByteStream
    sync_base = httpx2.SyncByteStream
    decoding_error = httpx2.DecodingError
    deadline_type = Httpx2RequestDeadlineError
    library = "httpx2"


class Httpx2BoundedAsyncClient(_Httpx2Types, _AsyncBounded, httpx2.AsyncClient):
    """An ``httpx2.AsyncClient`` with a whole-request deadline and a decoded reply size cap
    (the arguments of :class:`~medmis.tools._bounded.BoundedAsyncClient`)."""


class Httpx2BoundedClient(_Httpx2Types, _SyncBounded, httpx2.Client):
    """The synchronous :class:`Httpx2BoundedAsyncClient` (the deadline is checked between reads)."""
