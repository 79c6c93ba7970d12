"""Reading a response body safely: capped while streaming, decompressed by hand, sniffed.

httpx decodes ``Content-Encoding`` one network chunk at a time, and a single 64 KB gzip chunk
can expand to hundreds of megabytes before any size check sees it. Here the raw bytes are
decompressed by :class:`~medmis.tools._bounded.DecodedReader` (the reader the bounded HTTP
clients use too), with an output limit per step, so memory stays within the cap whatever
the compression ratio. Bodies are also sniffed: a binary file served without a text content type
(a PDF, an image, an archive) must not reach the model as text.
"""

from __future__ import annotations

import zlib

import httpx

from ._bounded import ACCEPT_ENCODING, DecodedReader, OverCapError, UnreadableEncodingError
from ._types import ToolError

__all__ = ["ACCEPT_ENCODING", "binary_kind", "read_body"]

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


async def read_body(response: httpx.Response, url: httpx.URL, max_bytes: int) -> bytes:
    """The decoded body of a streamed response, at most ``max_bytes`` of it.

    Raises:
        ToolError: ``content`` when the body (decoded) is larger than ``max_bytes``, the
            encoding is unsupported or the compressed data is corrupt.
    """
    too_large = ToolError(f"{url} is larger than {max_bytes:,} bytes; too large to read", kind="content")
    try:
        reader = DecodedReader(response.headers.get("content-encoding", ""), max_bytes)
    except UnreadableEncodingError:
        raise ToolError(
            f"{url} is sent with content encoding {response.headers['content-encoding']!r}, which is not read",
            kind="content",
        ) from None
    declared = response.headers.get("content-length", "")
    if not reader.encoded and declared.isdigit() and int(declared) > max_bytes:
        raise too_large
    chunks: list[bytes] = []
    try:
        async for raw in response.aiter_raw():
            chunks.extend(reader.feed(raw))
        chunks.extend(reader.finish())
    except OverCapError:
        raise too_large from None
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
