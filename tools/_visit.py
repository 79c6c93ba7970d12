"""Visit a web page: a guarded fetch, main-text extraction and focusing on the reader's goal.

:func:`fetch_page` follows redirects itself so that :class:`~medmis.tools._safety.UrlPolicy` checks
every hop (a public page must not bounce the fetcher to 169.254.169.254), streams the body
under a byte cap, accepts only HTML, XHTML and plain text, and extracts the main text and
metadata with trafilatura. :func:`focus_text` keeps the passages most relevant to a goal, in
document order, within the character budget; local corpus documents go through it too, so an
offline visit reads exactly like a live one.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import httpx

from ._body import ACCEPT_ENCODING, binary_kind, read_body
from ._corpus import CorpusDocument
from ._safety import UrlPolicy
from ._text import bm25_scores, split_sentences, tokenize
from ._types import Page, ToolError

MAX_REDIRECTS = 5
HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
TEXT_TYPES = frozenset({"text/plain"})
DEFAULT_HEADERS = {
    "User-Agent": "Mozilla/5.0 (compatible; medmis-toolkit/0.1; research evaluation)",
    "Accept": "text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.1",
    "Accept-Language": "en,zh;q=0.8,*;q=0.5",
    "Accept-Encoding": ACCEPT_ENCODING,
}
# Extraction budget: trafilatura's time and memory grow with the markup (a dense 2 MB page
# took 31 s and 300 MB), so it reads at most this much HTML, and a page that still takes
# longer than the deadline is refused rather than holding up the case.
MAX_EXTRACT_BYTES = 512_000
EXTRACT_TIMEOUT_S = 4.0
# a passage scoring below this share of the best one is noise, not evidence
RELEVANCE_FLOOR = 0.25
# long blocks (a page without paragraphs) are cut into sentence groups of about this size so
# that goal focusing still has something to choose between
PASSAGE_CHARS = 600
_GAP = "\n[…]\n"


@dataclass
class Extracted:
    """What extraction found in a response body."""

    title: str = ""
    text: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)


# -- fetching ----------------------------------------------------------------------------------------


async def fetch_page(
    url: str,
    *,
    client: httpx.AsyncClient,
    safety: UrlPolicy,
    goal: str | None = None,
    max_chars: int = 6000,
    max_bytes: int = 2_000_000,
    timeout: float = 20.0,
    max_extract_bytes: int = MAX_EXTRACT_BYTES,
    extract_timeout: float = EXTRACT_TIMEOUT_S,
) -> Page:
    """Fetch ``url`` safely and return its main text, focused on ``goal`` and clipped.

    Args:
        url: The http(s) URL the model asked for.
        client: The HTTP client; its own redirect following is bypassed.
        safety: Checks every URL before it is requested (scheme, blocklist, address).
        goal: What the reader is looking for; keeps the most relevant passages.
        max_chars: Character budget of the returned text.
        max_bytes: Largest (decoded) body accepted.
        timeout: Deadline in seconds for the whole download, redirects included.
        max_extract_bytes: At most this much of an HTML body is handed to the extractor (the
            rest is left out and the page marked truncated).
        extract_timeout: Deadline in seconds for extracting the text.

    Returns:
        The page; ``truncated`` is set when text was left out for lack of space.

    Raises:
        ToolError: ``refused`` (unsafe or blocklisted URL on any hop), ``http`` (error status,
            connection failure, too many redirects), ``timeout``, ``content`` (not HTML or text,
            too large, no readable text), ``not_found`` (host does not resolve).
    """
    try:
        async with asyncio.timeout(timeout):
            final_url, mime, charset, body = await _download(url, client, safety, max_bytes)
    except TimeoutError as exc:
        raise ToolError(f"{url} did not load within {timeout:g} s", kind="timeout") from exc
    binary = binary_kind(body)
    if binary is not None:
        raise ToolError(f"{final_url} is {binary}, not a web page", kind="content")
    cut = len(body) > max_extract_bytes
    if cut:
        body = body[:max_extract_bytes]
    # extraction is CPU-bound (lxml); keep the event loop free for the other cases. A thread
    # cannot be stopped, so the byte cap above is what bounds its work; the deadline only
    # keeps the case from waiting on a pathological page.
    try:
        extracted = await asyncio.wait_for(
            asyncio.to_thread(extract_document, body, mime, charset, str(final_url)),
            timeout=extract_timeout,
        )
    except TimeoutError as exc:
        raise ToolError(
            f"{final_url} could not be read within {extract_timeout:g} s", kind="content"
        ) from exc
    if not extracted.text.strip():
        raise ToolError(
            f"{final_url} has no readable text (it may need JavaScript or be an empty page)",
            kind="content",
        )
    text, truncated, focus = focus_text(extracted.text, goal, max_chars)
    metadata = {**extracted.metadata, "content_type": mime or "unknown", **focus}
    if cut:
        metadata["extract_limited_to_bytes"] = max_extract_bytes
    return Page(
        url=url,
        final_url=str(final_url),
        title=extracted.title,
        text=text,
        metadata=metadata,
        truncated=truncated or cut,
    )


async def _download(
    url: str, client: httpx.AsyncClient, safety: UrlPolicy, max_bytes: int
) -> tuple[httpx.URL, str, str | None, bytes]:
    current: str | httpx.URL = url
    for _hop in range(MAX_REDIRECTS + 1):
        target = await safety.check(current)
        try:
            request = client.build_request("GET", target, headers=DEFAULT_HEADERS)
            response = await client.send(request, stream=True, follow_redirects=False)
        except httpx.InvalidURL as exc:
            # httpx builds the next request of a redirect even when not following it, and
            # fails on a Location such as data: or javascript: that is no http(s) URL
            raise ToolError(
                f"{target} redirected to a URL that is not http(s) ({exc}); refused",
                kind="refused",
            ) from exc
        except httpx.TimeoutException as exc:
            raise ToolError(f"{target} did not answer in time", kind="timeout") from exc
        except httpx.RequestError as exc:
            raise ToolError(
                f"could not connect to {target.host} ({type(exc).__name__})", kind="http"
            ) from exc
        try:
            if response.is_redirect:
                try:
                    current = target.join(response.headers["location"])
                except httpx.InvalidURL as exc:
                    raise ToolError(f"{target} redirected to an invalid URL", kind="http") from exc
                continue
            if response.status_code >= 400:
                reason = f" {response.reason_phrase}" if response.reason_phrase else ""
                raise ToolError(f"{target} answered HTTP {response.status_code}{reason}", kind="http")
            if not 200 <= response.status_code < 300:
                raise ToolError(f"{target} answered HTTP {response.status_code}", kind="http")
            mime = response.headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if mime and mime not in HTML_TYPES | TEXT_TYPES:
                raise ToolError(
                    f"{target} is {mime}, not a web page; only HTML and plain-text pages can be read",
                    kind="content",
                )
            body = await read_body(response, target, max_bytes)
            return target, mime, response.charset_encoding, body
        except httpx.TimeoutException as exc:
            raise ToolError(f"{target} stopped sending data (timeout)", kind="timeout") from exc
        except httpx.RequestError as exc:
            raise ToolError(f"reading {target} failed ({type(exc).__name__})", kind="http") from exc
        finally:
            await response.aclose()
    raise ToolError(f"{url} redirects more than {MAX_REDIRECTS} times; giving up", kind="http")


# -- extraction --------------------------------------------------------------------------------------


def _decode(body: bytes, charset: str | None) -> str:
    try:
        return body.decode(charset or "utf-8", errors="replace")
    except LookupError:  # an unknown charset name in the header
        return body.decode("utf-8", errors="replace")


def _looks_like_html(body: bytes) -> bool:
    head = body[:1024].lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    return head.startswith((b"<!doctype html", b"<html", b"<?xml", b"<head", b"<body")) or b"<html" in head


def extract_document(body: bytes, mime: str, charset: str | None, url: str) -> Extracted:
    """Main text and metadata of a response body.

    Args:
        body: The raw (content-decoded) body.
        mime: The media type from ``Content-Type`` ("" when absent: sniffed).
        charset: The charset from ``Content-Type``, if any.
        url: The final URL (helps trafilatura with metadata).
    """
    if mime in TEXT_TYPES or (not mime and not _looks_like_html(body)):
        return Extracted(text=_tidy(_decode(body, charset)))
    # without a declared charset trafilatura sniffs <meta charset> and the bytes themselves
    return extract_html(_decode(body, charset) if charset else body, url)


def extract_html(html: str | bytes, url: str | None = None) -> Extracted:
    """Main text (boilerplate removed), title and metadata of an HTML page via trafilatura.

    Falls back to the page's whole visible text when trafilatura finds no main content.

    Args:
        html: The page source.
        url: Its URL, if known.
    """
    import trafilatura  # lazy: heavy import, only needed when pages are read

    tree = trafilatura.load_html(html)
    if tree is None:
        return Extracted()
    title_tag = " ".join((tree.findtext(".//title") or "").split())
    doc: Any = trafilatura.bare_extraction(
        tree, url=url, with_metadata=True, include_comments=False, include_tables=True
    )
    if doc is not None and getattr(doc, "text", None):
        text = str(doc.text)
        meta_source: Any = doc
    else:
        text = trafilatura.html2txt(tree)
        meta_source = trafilatura.extract_metadata(tree, default_url=url)
    metadata: dict[str, Any] = {}
    for key in ("author", "date", "sitename", "description", "hostname", "language"):
        value = getattr(meta_source, key, None)
        if isinstance(value, str) and value.strip():
            metadata[key] = " ".join(value.split())
    title = getattr(meta_source, "title", None) or title_tag
    return Extracted(title=" ".join(str(title).split()), text=_tidy(text), metadata=metadata)


def _tidy(text: str) -> str:
    lines = (" ".join(line.split()) for line in text.replace("\r\n", "\n").split("\n"))
    return "\n".join(line for line in lines if line)


# -- focusing and clipping -----------------------------------------------------------------------------


def split_passages(text: str, *, target_chars: int = PASSAGE_CHARS) -> list[str]:
    """Paragraphs of ``text``; a paragraph far longer than ``target_chars`` becomes
    sentence groups of about that size."""
    passages: list[str] = []
    for block in (b.strip() for b in text.split("\n")):
        if not block:
            continue
        if len(block) <= target_chars * 1.5:
            passages.append(block)
            continue
        group = ""
        for sentence in split_sentences(block):
            if group and len(group) + len(sentence) + 1 > target_chars:
                passages.append(group)
                group = ""
            group = f"{group} {sentence}" if group and not group.endswith(("。", "！", "？", "；")) else group + sentence
        if group:
            passages.append(group)
    return passages


def clip_text(text: str, max_chars: int) -> tuple[str, bool]:
    """``text`` cut to ``max_chars`` at a line or word boundary near the end; (text, cut?)."""
    if len(text) <= max_chars:
        return text, False
    cut = text[:max_chars]
    for sep in ("\n", " "):
        at = cut.rfind(sep)
        if at > max_chars * 0.8:
            cut = cut[:at]
            break
    return cut.rstrip(), True


def focus_text(text: str, goal: str | None, max_chars: int) -> tuple[str, bool, dict[str, Any]]:
    """Keep the passages most relevant to ``goal`` in document order, then clip to ``max_chars``.

    Passages are ranked by BM25 against the goal; those scoring at least ``RELEVANCE_FLOOR``
    of the best are taken best-first while they fit, then put back in page order (gaps are
    marked ``[…]``). When nothing matches the goal the page is returned unfocused.

    Args:
        text: The page's main text (one paragraph per line).
        goal: What the reader is looking for, or None for the plain clipped text.
        max_chars: Character budget.

    Returns:
        ``(text, truncated, info)`` where ``info`` describes the focusing for the page's
        metadata (``passages_kept``, ``passages_total`` or ``goal_matched=False``).
    """
    info: dict[str, Any] = {}
    dropped = False
    goal = (goal or "").strip()
    if goal:
        passages = split_passages(text)
        scores = bm25_scores(tokenize(goal), [tokenize(p) for p in passages])
        best = max(scores, default=0.0)
        if best > 0:
            floor = best * RELEVANCE_FLOOR
            ranked = sorted(
                (i for i, s in enumerate(scores) if s >= floor), key=lambda i: (-scores[i], i)
            )
            chosen: list[int] = []
            used = 0
            for i in ranked:
                cost = len(passages[i]) + len(_GAP)
                if chosen and used + cost > max_chars:
                    dropped = True  # relevant, but no room: the reader should know
                    continue
                chosen.append(i)
                used += cost
            chosen.sort()
            parts: list[str] = []
            for n, i in enumerate(chosen):
                if n:
                    parts.append("\n" if i == chosen[n - 1] + 1 else _GAP)
                parts.append(passages[i])
            if chosen[0] > 0:
                parts.insert(0, "[…]\n")
            if chosen[-1] < len(passages) - 1:
                parts.append(_GAP.rstrip("\n"))
            text = "".join(parts)
            info = {"passages_kept": len(chosen), "passages_total": len(passages)}
        else:
            info = {"goal_matched": False}
    text, clipped = clip_text(text, max_chars)
    return text, dropped or clipped, info


def page_from_document(
    doc: CorpusDocument, url: str, *, goal: str | None = None, max_chars: int = 6000
) -> Page:
    """A local corpus document read like a web page (same focusing and clipping)."""
    text, truncated, focus = focus_text(_tidy(doc.text), goal, max_chars)
    return Page(
        url=url,
        final_url=doc.url,
        title=doc.title,
        text=text,
        metadata={"source": "local corpus", "id": doc.id, **focus},
        truncated=truncated,
    )

