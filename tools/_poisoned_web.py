"""A poisoned web: one case's searches and visits with that case's poisoned pages in them.

:class:`PoisonedWeb` sits in front of any :class:`~medmis.tools._types.Toolset` (``WebTools``
over the local corpus, Tavily or Serper + Jina; a test fake). Every search goes to the web
below it unchanged (same store keys, so a poisoned run replays from the recordings of a
clean one), then :func:`poisoned_slots` of the ``n`` result slots are given to the case's
pages: the first slots (``rank="top"``) or evenly spaced ones (``"spread"``). Which pages
fill them is drawn from a seed of the case and the query, so the same search shows the same
pages on every run, replay included. A poisoned result carries the page's URL and title and
a snippet of its text chosen for the query; it takes the score and position of its slot, so
nothing in a result tells a poisoned page from another.

Visiting a poisoned page returns it as a :class:`~medmis.tools._types.Page`, focused on the
goal as a corpus document is, without the network or the store in every cache mode (the
page file, whose digest is in the run's fingerprint, already makes it deterministic). A page
of the file that is not this case's answers as a missing page would. Everything else goes
through the web below: URL safety, the contamination blocklist, record/replay.

The counts (:class:`PoisonTally`: ``shown``, ``seen``, ``visited``) are the harness's
bookkeeping: no defender and no model is told which results are poisoned.
"""

from __future__ import annotations

import hashlib
import inspect
import random
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from ._corpus import CorpusDocument, url_key
from ._jina import MIN_CHARS as JINA_MIN_CHARS
from ._poison_types import PoisonedPage, PoisonRank
from ._probe import mark_cache
from ._text import split_sentences, tokenize, widen
from ._types import Page, SearchResponse, SearchResult, SerpResult, ToolError, Toolset
from ._visit import page_from_document
from ._web import MAX_SEARCH_RESULTS, _with_scheme

__all__ = ["PoisonTally", "PoisonedWeb", "document_id", "poisoned_positions", "poisoned_slots", "snippet"]

SNIPPET_CHARS = 300
R = TypeVar("R", bound=SearchResult)


def poisoned_slots(share: float, n: int, available: int) -> int:
    """How many of ``n`` result slots poisoned pages take: ``share * n`` rounded half up,
    at least 1 when ``share > 0``, at most ``n`` and at most the pages ``available``."""
    if share <= 0 or n <= 0 or available <= 0:
        return 0
    return min(max(1, int(share * n + 0.5)), n, available)


def poisoned_positions(rank: PoisonRank, n: int, k: int) -> list[int]:
    """The 0-based slots of ``k`` poisoned results among ``n``: the first ``k`` (``top``), or
    the middle slot of each of ``k`` equal parts of the list (``spread``)."""
    if rank == "top":
        return list(range(k))
    return [(2 * i + 1) * n // (2 * k) for i in range(k)]


@dataclass
class PoisonTally:
    """What one case's searches and visits met of its poisoned pages (the harness reads it)."""

    shown: int = 0
    """Search results returned, over every search of the case."""
    seen: int = 0
    """Of those, poisoned ones."""
    visited: int = 0
    """Visits that returned a poisoned page."""


class PoisonedWeb:
    """One case's view of the web: ``web`` with ``pages`` in a share of every search's slots.

    It keeps of each page only what the web shows (URL, title, text) and of the seed only
    its digest: nothing reachable from it names the case, its target or a page's style.

    Args:
        web: The toolset below (its ``search``, ``visit`` and, when it has one,
            ``search_response``).
        pages: The case's poisoned pages (none: searches pass through unchanged).
        share: Share of the result slots they take (:func:`poisoned_slots`).
        rank: ``top`` or ``spread`` (:func:`poisoned_positions`).
        seed: What the page draws are seeded with (the case key and the run seed).
        withheld: URL keys (:func:`~medmis.tools._corpus.url_key`) of pages never to fetch:
            one that is not among ``pages`` answers as a missing page (404).
        corpus_like: The web below serves a local corpus: a visited poisoned page's
            ``metadata`` reads as a corpus document's, else as a fetched page's.
        reader: The web below reads pages through a reader service (Jina Reader): a visited
            poisoned page outside the corpus reads as that service's page.
        tally: Where the counts go (default: a new :class:`PoisonTally`).
    """

    def __init__(
        self,
        web: Toolset,
        pages: Iterable[PoisonedPage] = (),
        *,
        share: float = 0.0,
        rank: PoisonRank = "top",
        seed: str = "",
        withheld: Collection[str] = (),
        corpus_like: bool = False,
        reader: bool = False,
        tally: PoisonTally | None = None,
    ) -> None:
        self._web = web
        docs = sorted({url_key(p.url): p for p in pages}.values(), key=lambda p: (p.id, p.url))
        self._docs = {url_key(p.url): CorpusDocument(id=document_id(p.url), title=p.title, url=p.url, text=p.text)
                      for p in docs}
        self._share = share
        self._rank: PoisonRank = rank
        self._seed = hashlib.sha256(seed.encode()).hexdigest()
        self._corpus_like = corpus_like
        self._reader = reader
        self._withheld = withheld
        self.tally = tally if tally is not None else PoisonTally()

    async def search(
        self, query: str, *, max_results: int = 5, country: str | None = None, language: str | None = None
    ) -> list[SearchResult]:
        """The web's results for ``query`` with the case's pages in their slots."""
        hints = locale_hints(self._web.search, country, language)
        results = list(await self._web.search(query, max_results=max_results, **hints))
        return self._place(query, max_results, results, SearchResult)

    async def search_response(
        self, query: str, *, max_results: int = 5, country: str | None = None, language: str | None = None
    ) -> SearchResponse:
        """:meth:`search` with what the engine showed beside the results (when it shows any)."""
        rich = getattr(self._web, "search_response", None)
        if callable(rich):
            response = SearchResponse.model_validate(
                await rich(query, max_results=max_results, **locale_hints(rich, country, language))
            )
        else:
            found = await self._web.search(query, max_results=max_results, **locale_hints(self._web.search, country, language))
            response = SearchResponse(query=query, results=[SerpResult.model_validate(r.model_dump()) for r in found])
        placed = self._place(query, max_results, list(response.results), SerpResult)
        return response.model_copy(update={"results": placed})

    async def visit(self, url: str, *, goal: str | None = None, max_chars: int = 6000) -> Page:
        """A poisoned page from the page file; any other URL from the web below.

        Raises:
            ToolError: ``http`` for a withheld page; the web's own failures for anything else.
        """
        url = _with_scheme(url.strip())
        key = url_key(url)
        doc = self._docs.get(key)
        if doc is None:
            if key in self._withheld:
                raise ToolError(f"{url} returned HTTP 404", kind="http")
            return await self._web.visit(url, goal=goal, max_chars=max_chars)
        goal = " ".join(goal.split()) if goal else ""
        self.tally.visited += 1
        mode = getattr(getattr(self._web, "store", None), "mode", "live")
        if not self._corpus_like and mode != "live":
            # a page of the web below goes through its store, which the trace's cache_hit
            # shows: a replayed page is a hit, a recorded one a fresh fetch; so is this one
            mark_cache(mode == "replay")
        if self._reader:  # as Jina Reader returns a page: the whole text, clipped, no focusing
            limit = max(JINA_MIN_CHARS, int(max_chars))
            return Page(url=url, final_url=doc.url, title=doc.title, text=doc.text[:limit],
                        metadata={"reader": "jina", "goal_instruction": bool(goal), "reader_chars": len(doc.text)},
                        truncated=len(doc.text) > limit)
        read = page_from_document(doc, url, goal=goal or None, max_chars=max(200, int(max_chars)))
        if self._corpus_like:
            return read
        # as a direct fetch reads an HTML page: the host trafilatura names, the type, the focus
        focus = {k: v for k, v in read.metadata.items() if k not in ("source", "id")}
        host = doc.url.split("://", 1)[-1].split("/", 1)[0].split(":", 1)[0].lower()
        return read.model_copy(update={"metadata": {"hostname": host, "content_type": "text/html", **focus}})

    # -- placing -----------------------------------------------------------------------------
    def _place(self, query: str, max_results: int, results: list[R], kind: type[R]) -> list[R]:
        n = max(1, min(int(max_results), MAX_SEARCH_RESULTS))  # as WebTools reads it
        k = poisoned_slots(self._share, n, len(self._docs))
        if k == 0:
            self._count(results)
            return results
        chosen = self._draw(query, k)
        taken = {url_key(p.url) for p in chosen}
        real = iter([r for r in results if url_key(r.url) not in taken])  # never shown twice
        slots = set(poisoned_positions(self._rank, n, k))
        poison = iter(chosen)
        placed: list[R] = []
        for i in range(n):
            if i in slots:
                placed.append(self._result(next(poison), query, kind))
            elif (r := next(real, None)) is not None:
                placed.append(r)
        out = _by_slot(placed, results)
        self._count(out)
        return out

    def _count(self, shown: list[R]) -> None:
        # by URL: a page of the case that the engine itself found is poison too
        self.tally.shown += len(shown)
        self.tally.seen += sum(1 for r in shown if url_key(r.url) in self._docs)

    def _draw(self, query: str, k: int) -> list[CorpusDocument]:
        digest = hashlib.sha256(f"{self._seed}\x00{' '.join(query.split())}".encode()).digest()
        return random.Random(int.from_bytes(digest[:8], "big")).sample(list(self._docs.values()), k)

    def _result(self, doc: CorpusDocument, query: str, kind: type[R]) -> R:
        return kind(title=doc.title, url=doc.url, snippet=snippet(doc.text, query))


def _by_slot(out: list[R], original: list[R]) -> list[R]:
    """``out`` with each slot's score (and position, when the engine numbers its results)
    taken from the unpoisoned list, so the order reads as the engine's own."""
    if not original:
        return out
    scores = [r.score for r in original]
    numbered = any(getattr(r, "position", None) is not None for r in original)
    fixed: list[R] = []
    for i, r in enumerate(out):
        update: dict[str, Any] = {"score": scores[min(i, len(scores) - 1)]}
        if numbered:
            update["position"] = i + 1
        fixed.append(r.model_copy(update=update))
    return fixed


def document_id(url: str) -> str:
    """A corpus-shaped id for a page at ``url``: ``doc-`` and a slug of the URL's last path
    segment (its host when it has no path), as the bundled corpus names its documents. A
    visited poisoned page carries it, so its ``metadata["id"]`` reads as a corpus document's
    (its URL, or the page file's id naming the case, would tell it apart)."""
    rest = url.split("://", 1)[-1].split("?", 1)[0].split("#", 1)[0]
    host, _, path = rest.partition("/")
    segments = [s for s in path.split("/") if s]
    slug = re.sub(r"[^a-z0-9]+", "-", (segments[-1] if segments else host).lower()).strip("-")
    return f"doc-{slug or 'page'}"


def snippet(text: str, query: str, limit: int = SNIPPET_CHARS) -> str:
    """The sentence of ``text`` sharing most words with ``query``, widened with the sentences
    after it (then before it) to about ``limit`` characters."""
    sentences = split_sentences(text)
    if not sentences:
        return ""
    terms = set(tokenize(query))
    best = max(range(len(sentences)), key=lambda i: (len(terms.intersection(tokenize(sentences[i]))), -i))
    return widen(sentences, best, limit)


def locale_hints(method: Any, country: str | None, language: str | None) -> dict[str, str]:
    """The locale hints given, kept only when ``method`` takes them (a toolset written before
    they existed takes neither; None takes none)."""
    hints = {k: v for k, v in (("country", country), ("language", language)) if v}
    if not hints or method is None:
        return {}
    try:
        params = inspect.signature(method).parameters
    except (TypeError, ValueError):
        return {}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return hints
    return {k: v for k, v in hints.items() if k in params}
