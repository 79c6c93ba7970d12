"""Reading a response body safely: capped while streaming, decompressed by hand, sniffed.

httpx decodes ``Content-Encoding`` one network chunk at a time, and a single 64 KB gzip chunk
can expand to hundreds of megabytes before any size check sees it. Here the raw bytes are
decompressed with an output limit per step, so memory stays within the cap whatever the
compression ratio. Bodies are also sniffed: a binary file served without a text content type
(a PDF, an image, an archive) must not reach the model as text.
"""

from __future__ import annotations

import zlib

import httpx

from ._types import ToolError

# what we advertise; anything else in Content-Encoding is refused rather than decoded blind
ACCEPT_ENCODING = "gzip, deflate"
_SNIFF_BYTES = 4096
_BINARY_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"%PDF-", "a PDF document"),
    (b"\x89PNG", "a PNG image"),
    (b"GIF8", "a GIF image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"PK\x03\x04", "a ZIP archive or office document"),
    (b"\x1f\x8b", "a gzip archive"),
    (b"\x7fELF", "an executable"),
    (b"RIFF", "a media file"),
)


class _Decoder:
    """Incremental gzip/deflate decoder that never emits more than ``limit`` bytes at once."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        # gzip: header-aware; deflate: zlib-wrapped per RFC, raw deflate tried on failure
        wbits = 16 + zlib.MAX_WBITS if encoding in ("gzip", "x-gzip") else zlib.MAX_WBITS
        self._obj = zlib.decompressobj(wbits)
        self._raw_fallback = encoding == "deflate"

    def feed(self, data: bytes, limit: int) -> bytes:
        try:
            return self._obj.decompress(data, limit)
        except zlib.error:
            if not self._raw_fallback:
                raise
            self._raw_fallback = False
            self._obj = zlib.decompressobj(-zlib.MAX_WBITS)
            return self._obj.decompress(data, limit)

    def more(self, limit: int) -> bytes:
        """Output still held back by the limit (call until it returns nothing)."""
        return self._obj.decompress(self._obj.unconsumed_tail, limit)

    @property
    def pending(self) -> bool:
        return bool(self._obj.unconsumed_tail)


async def read_body(response: httpx.Response, url: httpx.URL, max_bytes: int) -> bytes:
    """The decoded body of a streamed response, at most ``max_bytes`` of it.

    Raises:
        ToolError: ``content`` when the body (decoded) is larger than ``max_bytes``, the
            encoding is unsupported or the compressed data is corrupt.
    """
    too_large = ToolError(f"{url} is larger than {max_bytes:,} bytes; too large to read", kind="content")
    declared = response.headers.get("content-length", "")
    encodings = [e.strip().lower() for e in response.headers.get("content-encoding", "").split(",")]
    encodings = [e for e in encodings if e and e != "identity"]
    if not encodings and declared.isdigit() and int(declared) > max_bytes:
        raise too_large
    if len(encodings) > 1 or (encodings and encodings[0] not in ("gzip", "x-gzip", "deflate")):
        raise ToolError(
            f"{url} is sent with content encoding {', '.join(encodings)!r}, which is not read",
            kind="content",
        )
    decoder = _Decoder(encodings[0]) if encodings else None
    chunks: list[bytes] = []
    total = 0
    try:
        async for raw in response.aiter_raw():
            if decoder is None:
                out = [raw]
            else:
                out = [decoder.feed(raw, max_bytes - total + 1)]
                while decoder.pending and total + sum(map(len, out)) <= max_bytes:
                    out.append(decoder.more(max_bytes - total - sum(map(len, out)) + 1))
            for piece in out:
                total += len(piece)
                if total > max_bytes:
                    raise too_large
                chunks.append(piece)
    except zlib.error as exc:
        raise ToolError(f"{url} sent corrupt compressed data ({exc})", kind="content") from exc
    return b"".join(chunks)


def binary_kind(body: bytes) -> str | None:
    """What kind of binary file ``body`` looks like, or None when it may be text."""
    head = body[:_SNIFF_BYTES]
    for magic, kind in _BINARY_MAGIC:
        if head.startswith(magic):
            return kind
    if b"\x00" in head:
        return "a binary file"
    if not head:
        return None
    # text in any common encoding has few control characters besides whitespace
    controls = sum(1 for b in head if b < 32 and b not in (9, 10, 12, 13, 27))
    return "a binary file" if controls / len(head) > 0.1 else None
