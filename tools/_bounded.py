"""A deadline for the whole request and a cap on the reply's **decoded** size, for httpx clients.

httpx's and aiohttp's timeouts bound each read, not the request: a server that sends one byte
a second never trips a 120 s read timeout and holds the call forever. And httpx decodes
``Content-Encoding`` one network chunk at a time, whole: a 64 KB gzip chunk of zeros inflates
to 64 MB in one step, so a 4 MB "gzip bomb" becomes 4 GB before any size check could look,
and the decompression itself (minutes of CPU) cannot be interrupted by a timer.

So the reply is decoded here, not by httpx: :class:`DecodedReader` inflates gzip and deflate
with an output limit per step and counts the **decoded** bytes, stopping one byte past the
cap, so memory stays within a small multiple of the cap whatever the compression ratio and
every step is short enough for the deadline to fire between steps. It is the one reader of
encoded bodies in the toolkit: the clients below and the page fetcher
(:func:`medmis.tools._body.read_body`) both use it.

:class:`BoundedAsyncClient` (and its synchronous twin :class:`BoundedClient`) is an
``httpx`` client whose ``send`` (which ``get``, ``post``, ``request`` and the SDKs all go
through) runs under one deadline from the request to the last byte of the reply and reads the
body through :class:`DecodedReader`; the response handed on carries the decoded body and no
``Content-Encoding``, so httpx does not decode it again. It is built on ``send``, the
response's ``stream`` and its headers only (public httpx API), so it works over any transport
and mount: aiohttp's, httpx's own with the environment's proxies, a test's mock. The same
``send`` serves ``httpx2`` clients (:mod:`._bounded_httpx2`), which is what the SDKs' own
default clients are made of.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import time
import zlib
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, ClassVar

import httpx

DEFAULT_MAX_RESPONSE_BYTES = 8 * 1024 * 1024
"""The default cap on one reply's decoded body: 8 MiB, far above any chat completion or search reply."""

ACCEPT_ENCODING = "gzip, deflate"
"""The encodings :class:`DecodedReader` decodes, sent as ``Accept-Encoding`` by the bounded
clients (httpx would otherwise also offer ``zstd`` when zstandard is installed, which has no
bounded decoder); a reply in any other encoding is refused rather than decoded blind."""

_GZIP = ("gzip", "x-gzip")
_DECODED = frozenset((*_GZIP, "deflate"))

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


def _where(url: httpx.URL) -> str:
    """``scheme://host:port/path`` of a URL: no userinfo or query (they may hold credentials)."""
    host = f"[{url.host}]" if ":" in url.host else url.host
    port = url.port or {"http": 80, "https": 443}.get(url.scheme)
    return f"{url.scheme}://{host}{f':{port}' if port else ''}{url.path}"


class ResponseTooLargeError(httpx.RequestError):
    """A reply larger than the cap (decoded). Not retried: the same request gets the same reply.

    Deliberately not an ``httpx.TransportError``, which callers treat as transient.
    """

    def __init__(self, request: httpx.Request, max_bytes: int) -> None:
        super().__init__(
            f"the reply from {_where(request.url)} is larger than {max_bytes:,} bytes "
            "(the response size cap)",
            request=request,
        )
        self.max_bytes = max_bytes


class RequestDeadlineError(httpx.ReadTimeout):
    """No complete reply within the request's deadline (retried like any timeout)."""


class OverCapError(Exception):
    """Raised by :class:`DecodedReader` when the decoded body passes its cap."""


class UnreadableEncodingError(ValueError):
    """A ``Content-Encoding`` :class:`DecodedReader` does not decode."""


class DecodedReader:
    """Decodes a body's ``Content-Encoding`` step by step and counts the decoded bytes.

    Each :meth:`feed` emits at most one byte more than the room left under the cap, however
    much the raw chunk inflates to, so a gzip bomb costs at most about ``max_bytes`` of memory
    and a few milliseconds of CPU per step before :class:`OverCapError`.

    Args:
        content_encoding: The reply's ``Content-Encoding`` header (empty: identity).
        max_bytes: Largest decoded body (``None``: no cap, decoded all the same).

    Raises:
        UnreadableEncodingError: For an encoding other than gzip or deflate, or several.
    """

    def __init__(self, content_encoding: str, max_bytes: int | None) -> None:
        encodings = [e.strip().lower() for e in content_encoding.split(",")]
        encodings = [e for e in encodings if e and e != "identity"]
        if len(encodings) > 1 or (encodings and encodings[0] not in _DECODED):
            raise UnreadableEncodingError(f"content encoding {', '.join(encodings)!r} is not read")
        self.encoding = encodings[0] if encodings else None
        self.max_bytes = max_bytes
        self.total = 0
        self._obj: Any = None
        self._raw_fallback = self.encoding == "deflate"
        if self.encoding is not None:
            # gzip: header-aware; deflate: zlib-wrapped per RFC, raw deflate tried on failure
            self._obj = zlib.decompressobj(16 + zlib.MAX_WBITS if self.encoding in _GZIP else zlib.MAX_WBITS)

    @property
    def encoded(self) -> bool:
        """Whether the body is compressed (decoded here rather than passed through)."""
        return self.encoding is not None

    def _room(self) -> int:
        # zlib's max_length 0 means "no limit"; one byte past the cap is enough to know
        return 0 if self.max_bytes is None else self.max_bytes - self.total + 1

    def _count(self, piece: bytes) -> bytes:
        self.total += len(piece)
        if self.max_bytes is not None and self.total > self.max_bytes:
            raise OverCapError
        return piece

    def feed(self, raw: bytes) -> Iterator[bytes]:
        """The decoded bytes of the next raw chunk, in pieces of bounded size.

        Raises:
            OverCapError: Once the decoded total passes ``max_bytes``.
            zlib.error: For corrupt compressed data.
        """
        if self._obj is None:
            yield self._count(raw)
            return
        try:
            out = self._obj.decompress(raw, self._room())
        except zlib.error:
            if not self._raw_fallback:
                raise
            self._raw_fallback = False
            self._obj = zlib.decompressobj(-zlib.MAX_WBITS)
            out = self._obj.decompress(raw, self._room())
        self._raw_fallback = False
        yield self._count(out)
        while self._obj.unconsumed_tail:
            yield self._count(self._obj.decompress(self._obj.unconsumed_tail, self._room()))

    def finish(self) -> Iterator[bytes]:
        """What the decoder still holds once the raw body has ended."""
        if self._obj is not None:
            yield self._count(self._obj.flush())


class _CappedStreamBody:
    """A response body decoded by :class:`DecodedReader`, each read under the request's deadline.

    Shared by the httpx and httpx2 streams (:mod:`._bounded_httpx2`), which add only their
    library's ``AsyncByteStream`` base; ``decoding_error`` is that library's ``DecodingError``.
    """

    def __init__(self, inner: Any, request: Any, reader: DecodedReader, deadline: float | None,
                 decoding_error: Callable[..., Exception]) -> None:
        self._inner, self._request, self._reader = inner, request, reader
        self._deadline, self._decoding_error = deadline, decoding_error

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks = self._inner.__aiter__()
        try:
            while True:
                async with asyncio.timeout_at(self._deadline):
                    try:
                        raw = await chunks.__anext__()
                    except StopAsyncIteration:
                        break
                for piece in self._reader.feed(raw):
                    if piece:
                        yield piece
            for piece in self._reader.finish():
                if piece:
                    yield piece
        except OverCapError:
            raise ResponseTooLargeError(self._request, self._reader.max_bytes or 0) from None
        except zlib.error as exc:
            raise self._decoding_error(f"corrupt {self._reader.encoding} data from "
                                       f"{_where(self._request.url)}: {exc}", request=self._request) from exc

    async def aclose(self) -> None:
        await self._inner.aclose()


class _SyncCappedStreamBody:
    """The synchronous :class:`_CappedStreamBody`: the deadline is checked between reads."""

    def __init__(self, inner: Any, request: Any, reader: DecodedReader, deadline: float | None,
                 decoding_error: Callable[..., Exception], deadline_error: Callable[[Any], Exception]) -> None:
        self._inner, self._request, self._reader = inner, request, reader
        self._deadline, self._decoding_error, self._deadline_error = deadline, decoding_error, deadline_error

    def __iter__(self) -> Iterator[bytes]:
        try:
            for raw in self._inner:
                if self._deadline is not None and time.monotonic() > self._deadline:
                    raise self._deadline_error(self._request)
                yield from filter(None, self._reader.feed(raw))
            yield from filter(None, self._reader.finish())
        except OverCapError:
            raise ResponseTooLargeError(self._request, self._reader.max_bytes or 0) from None
        except zlib.error as exc:
            raise self._decoding_error(f"corrupt {self._reader.encoding} data from "
                                       f"{_where(self._request.url)}: {exc}", request=self._request) from exc

    def close(self) -> None:
        self._inner.close()


class _CappedStream(_CappedStreamBody, httpx.AsyncByteStream):
    pass


class _SyncCappedStream(_SyncCappedStreamBody, httpx.SyncByteStream):
    pass


def _reader_for(response: Any, request: Any, max_bytes: int, decoding_error: Callable[..., Exception]) -> DecodedReader | None:
    """The reader for ``response``'s body, or None when its declared length is under the cap.

    Raises:
        ResponseTooLargeError: When an unencoded body declares more than ``max_bytes``.
        Exception: ``decoding_error`` for an encoding :class:`DecodedReader` does not decode.
    """
    try:
        reader = DecodedReader(response.headers.get("content-encoding", ""), max_bytes)
    except UnreadableEncodingError as exc:
        raise decoding_error(f"the reply from {_where(request.url)}: {exc}", request=request) from None
    declared = response.headers.get("content-length", "")
    if not reader.encoded and declared.isdigit():
        if int(declared) > max_bytes:
            raise ResponseTooLargeError(request, max_bytes)
        return None  # the transports never read past a declared length
    if reader.encoded:
        # the body handed on is the decoded one: the client must not decode it again, and
        # the wire length no longer describes it
        for name in ("content-encoding", "content-length"):
            if name in response.headers:
                del response.headers[name]
    return reader


@functools.cache
def shared_ssl_context(family: str) -> ssl.SSLContext:
    """The verifying SSL context every client of ``family`` (``"httpx"`` or ``"httpx2"``) made by
    the toolkit shares, built once per process by that library's public ``create_ssl_context``
    (certifi's bundle, or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` as the library reads them).

    Left to itself, each client builds its own context and reads the CA bundle again: about 50 ms
    of CPU per client, twice per model (its synchronous and asynchronous client) and once per
    web tool. A context may serve any number of connections; a client given ``verify=`` keeps it.
    """
    if family == "httpx2":
        import httpx2

        return httpx2.create_ssl_context()
    return httpx.create_ssl_context()


class _Bounds:
    """What the bounded clients of both libraries share: the bounds and the library's types.

    A subclass names its library's ``AsyncByteStream`` and ``SyncByteStream`` subclasses of
    the bodies above, its ``DecodingError``, its deadline error and the library whose verifying
    context it shares (:func:`shared_ssl_context`).
    """

    async_stream: ClassVar[type[_CappedStreamBody]] = _CappedStream
    sync_stream: ClassVar[type[_SyncCappedStreamBody]] = _SyncCappedStream
    async_base: ClassVar[type] = httpx.AsyncByteStream
    sync_base: ClassVar[type] = httpx.SyncByteStream
    decoding_error: ClassVar[Callable[..., Exception]] = httpx.DecodingError
    deadline_type: ClassVar[Callable[..., Exception]]
    library: ClassVar[str] = "httpx"
    deadline_s: float | None
    max_bytes: int | None
    headers: Any

    def __init__(self, *, deadline_s: float | None, max_bytes: int | None = DEFAULT_MAX_RESPONSE_BYTES,
                 **kwargs: Any) -> None:
        kwargs.setdefault("verify", shared_ssl_context(self.library))
        super().__init__(**kwargs)  # the library's client
        self._set_bounds(deadline_s, max_bytes, kwargs.get("headers"))

    def _set_bounds(self, deadline_s: float | None, max_bytes: int | None, given_headers: Any) -> None:
        self.deadline_s = deadline_s
        self.max_bytes = max_bytes
        # ask for what DecodedReader decodes, unless the caller's headers say otherwise
        if max_bytes is not None and "accept-encoding" not in httpx.Headers(given_headers):
            self.headers["Accept-Encoding"] = ACCEPT_ENCODING

    def _deadline_error(self, request: Any) -> Exception:
        return self.deadline_type(f"no complete reply within {self.deadline_s:g} s (the request deadline)",
                                  request=request)


class _AsyncBounded(_Bounds):
    """``send`` for an async client: one deadline to the reply's last byte, the body capped decoded."""

    async def send(self, request: Any, *, stream: bool = False, **kwargs: Any) -> Any:
        parent: Any = super()
        if _BULK.get():
            return await parent.send(request, stream=stream, **kwargs)
        deadline = None if self.deadline_s is None else asyncio.get_running_loop().time() + self.deadline_s
        try:
            async with asyncio.timeout_at(deadline):
                response = await parent.send(request, stream=True, **kwargs)
                cap = self.max_bytes
                if cap is not None and isinstance(response.stream, self.async_base):
                    try:
                        reader = _reader_for(response, request, cap, self.decoding_error)
                    except Exception:
                        await response.aclose()
                        raise
                    if reader is not None:
                        response.stream = self.async_stream(response.stream, request, reader, deadline,
                                                            self.decoding_error)
                if not stream:
                    try:
                        await response.aread()
                    finally:
                        await response.aclose()
        except TimeoutError as exc:  # only ours: transports raise the library's own timeouts
            raise self._deadline_error(request) from exc
        return response


class _SyncBounded(_Bounds):
    """``send`` for a sync client. A synchronous call cannot be interrupted by a timer, so the
    deadline is checked between reads: a call ends at most one per-read ``timeout`` after it."""

    def send(self, request: Any, *, stream: bool = False, **kwargs: Any) -> Any:
        parent: Any = super()
        if _BULK.get():
            return parent.send(request, stream=stream, **kwargs)
        deadline = None if self.deadline_s is None else time.monotonic() + self.deadline_s
        response = parent.send(request, stream=True, **kwargs)
        cap = self.max_bytes
        if cap is not None and isinstance(response.stream, self.sync_base):
            try:
                reader = _reader_for(response, request, cap, self.decoding_error)
            except Exception:
                response.close()
                raise
            if reader is not None:
                response.stream = self.sync_stream(response.stream, request, reader, deadline,
                                                   self.decoding_error, self._deadline_error)
        if not stream:
            try:
                response.read()
            finally:
                response.close()
        return response


class BoundedAsyncClient(_AsyncBounded, httpx.AsyncClient):
    """An ``httpx.AsyncClient`` with a whole-request deadline and a decoded reply size cap.

    Args:
        deadline_s: Seconds from sending a request to the last byte of its reply, redirects
            included (``None``: none beyond the per-read ``timeout``). A streamed request
            (``send(stream=True)``) is bounded until its headers arrive, and each later read
            by what is left of it.
        max_bytes: Largest reply body, in bytes once decoded (``None``: no cap).
        **kwargs: ``httpx.AsyncClient``'s arguments (``verify`` defaults to
            :func:`shared_ssl_context`).
    """

    deadline_type = RequestDeadlineError


class BoundedClient(_SyncBounded, httpx.Client):
    """The synchronous :class:`BoundedAsyncClient` (the deadline is checked between reads)."""

    deadline_type = RequestDeadlineError
