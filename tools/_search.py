"""Search backends behind one interface: Tavily (the web) and a local BM25 corpus (offline).

Both return ranked :class:`~medmis.tools._types.SearchResult` lists. Failures the model should see
(bad key, rate limit, timeout) become :class:`~medmis.tools._types.ToolError`; a missing key is refused
up front because the Tavily SDK would otherwise fall back silently to its keyless mode.

The tokeniser here is shared with page focusing in ``_visit``: lower-cased NFKC words for
alphabetic scripts, character bigrams for CJK runs (Chinese has no spaces, and bigrams are the
usual dependency-free compromise between characters and words).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import httpx

from ._types import SearchResult, ToolError

log = logging.getLogger(__name__)

DEFAULT_CORPUS_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "corpus"
TAVILY_DEFAULT_BASE_URL = "https://api.tavily.com"


@runtime_checkable
class SearchBackend(Protocol):
    """A search engine: ``search(query, max_results)`` returns results, best first.

    ``cache_id`` names the backend in record/replay keys; it changes whenever the same query
    could return different results (another engine, another corpus).
    """

    @property
    def cache_id(self) -> str: ...

    async def search(self, query: str, max_results: int = 5) -> list[SearchResult]: ...


# -- tokenisation ----------------------------------------------------------------------------------

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_TOKEN_RE = re.compile(rf"[{_CJK}]+|[^\W_{_CJK}]+")
_CJK_RUN = re.compile(rf"[{_CJK}]+")
# deliberately short: single letters stay ("vitamin A", "hepatitis C") and BM25's idf
# already discounts frequent words; these only add noise to snippet choice
_STOPWORDS = frozenset({
    "the", "of", "and", "in", "is", "to", "for", "with", "on", "by", "as", "are", "was", "be",
    "or", "that", "this", "it", "from", "at", "which", "an", "were", "has", "have", "its", "can",
})


def _fold(word: str) -> str:
    # crude plural folding, applied identically to documents and queries
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def tokenize(text: str) -> list[str]:
    """Index terms of ``text``: folded words, and character bigrams for CJK runs.

    Args:
        text: Any text; English, Chinese or mixed.

    Returns:
        Terms in text order (a lone CJK character becomes a unigram).
    """
    terms: list[str] = []
    for run in _TOKEN_RE.findall(unicodedata.normalize("NFKC", text).lower()):
        if _CJK_RUN.fullmatch(run):
            if len(run) == 1:
                terms.append(run)
            else:
                terms.extend(run[i : i + 2] for i in range(len(run) - 1))
        elif run not in _STOPWORDS:
            terms.append(_fold(run))
    return terms


def bm25_scores(
    query: Sequence[str], docs: Sequence[Sequence[str]], *, k1: float = 1.2, b: float = 0.75
) -> list[float]:
    """Okapi BM25 of each tokenised doc for a tokenised query (for small in-memory sets).

    Args:
        query: Query terms (duplicates count once).
        docs: Tokenised passages.
        k1: Term-frequency saturation.
        b: Length normalisation.

    Returns:
        One score per doc, 0.0 for docs that share no term with the query.
    """
    n = len(docs)
    if n == 0:
        return []
    terms = set(query)
    df: Counter[str] = Counter()
    for doc in docs:
        df.update(terms.intersection(doc))
    avg_len = sum(len(d) for d in docs) / n or 1.0
    scores = []
    for doc in docs:
        tf = Counter(t for t in doc if t in terms)
        norm = k1 * (1 - b + b * len(doc) / avg_len)
        score = 0.0
        for term, count in tf.items():
            idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
            score += idf * count * (k1 + 1) / (count + norm)
        scores.append(score)
    return scores


_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+(?=\S)|(?<=[。！？；])|\n+")


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text`` (English end punctuation, Chinese 。！？； and line breaks)."""
    return [s.strip() for s in _SENTENCE_SPLIT.split(text) if s and s.strip()]


def join_sentences(sentences: Iterable[str]) -> str:
    """Sentences joined by a space, or by nothing after CJK end punctuation."""
    out = ""
    for sentence in sentences:
        out += sentence if not out or out.endswith(("。", "！", "？", "；")) else " " + sentence
    return out


def clip(text: str, limit: int, *, ellipsis: str = "…") -> str:
    """``text`` cut to at most ``limit`` characters, at a word boundary when one is near."""
    if len(text) <= limit:
        return text
    cut = text[: max(0, limit - len(ellipsis))]
    space = cut.rfind(" ")
    if space > len(cut) * 0.7:  # CJK text has no spaces: then cut mid-run
        cut = cut[:space]
    return cut.rstrip() + ellipsis


# -- Tavily ------------------------------------------------------------------------------------------


class TavilySearch:
    """Web search through Tavily's ``/search`` endpoint (async SDK client).

    Args:
        api_key: Tavily key; default ``TAVILY_API_KEY``. Required: without one the SDK would
            silently switch to its rate-limited keyless mode, so this refuses instead.
        base_url: API root for a gateway or proxy; default ``TAVILY_BASE_URL``, else
            ``https://api.tavily.com``. Passed to the SDK's ``api_base_url``.
        timeout: Seconds per request (the SDK caps it at 120).
        search_depth: Tavily's ``search_depth`` (``basic`` costs one credit).
        snippet_chars: Maximum snippet length shown to the model.
        client: An ``httpx.AsyncClient`` for the SDK to use (tests, custom transports).

    Raises:
        ToolError: ``kind="config"`` when no API key is configured.
    """

    def __init__(
        self,
        api_key: str | None = None,
        *,
        base_url: str | None = None,
        timeout: float = 20.0,
        search_depth: str = "basic",
        snippet_chars: int = 500,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        key = (api_key if api_key is not None else os.environ.get("TAVILY_API_KEY", "")).strip()
        if not key:
            raise ToolError(
                "Tavily search needs an API key: set TAVILY_API_KEY (or use --search local)",
                kind="config",
            )
        base = (base_url or os.environ.get("TAVILY_BASE_URL") or "").strip().rstrip("/")
        from tavily import AsyncTavilyClient  # lazy: only runs that search the web need the SDK

        self.base_url = base or TAVILY_DEFAULT_BASE_URL
        self.timeout = timeout
        self.search_depth = search_depth
        self.snippet_chars = snippet_chars
        self._client = AsyncTavilyClient(api_key=key, api_base_url=self.base_url, client=client)

    @property
    def cache_id(self) -> str:
        parts = ["tavily"]
        if self.base_url != TAVILY_DEFAULT_BASE_URL:
            parts.append(self.base_url)
        if self.search_depth != "basic":
            parts.append(self.search_depth)
        return "@".join(parts)

    async def search(self, query: str, max_results: int = 5) -> list[SearchResult]:
        """Search the web.

        Raises:
            ToolError: ``http`` for rejected keys, rate limits and other HTTP failures,
                ``timeout`` when Tavily does not answer in time.
        """
        from tavily import errors as tavily_errors

        try:
            response = await self._client.search(
                query,
                search_depth=self.search_depth,  # type: ignore[arg-type]
                max_results=max_results,
                include_answer=False,
                include_raw_content=False,
                timeout=self.timeout,
            )
        except tavily_errors.InvalidAPIKeyError as exc:
            raise ToolError(
                f"web search unavailable: Tavily rejected the API key (HTTP 401){_detail(exc)}",
                kind="http",
            ) from exc
        except tavily_errors.UsageLimitExceededError as exc:
            raise ToolError(
                "web search unavailable: Tavily rate limit or usage quota exceeded (HTTP 429)"
                f"{_detail(exc)}; wait before searching again or answer without searching",
                kind="http",
            ) from exc
        except tavily_errors.ForbiddenError as exc:
            raise ToolError(
                f"web search unavailable: Tavily refused the request (HTTP 403){_detail(exc)}",
                kind="http",
            ) from exc
        except tavily_errors.BadRequestError as exc:
            raise ToolError(
                f"Tavily rejected the search request (HTTP 400){_detail(exc)}", kind="http"
            ) from exc
        except tavily_errors.TimeoutError as exc:
            raise ToolError(f"web search timed out after {self.timeout:g} s", kind="timeout") from exc
        except httpx.TimeoutException as exc:
            raise ToolError(f"web search timed out after {self.timeout:g} s", kind="timeout") from exc
        except httpx.HTTPStatusError as exc:
            raise ToolError(
                f"web search failed: Tavily answered HTTP {exc.response.status_code}", kind="http"
            ) from exc
        except httpx.TransportError as exc:
            raise ToolError(f"web search failed: could not reach Tavily ({type(exc).__name__})", kind="http") from exc
        except json.JSONDecodeError as exc:
            raise ToolError("web search failed: Tavily sent an unreadable response", kind="http") from exc
        return self._results(response, max_results)

    def _results(self, response: Any, max_results: int) -> list[SearchResult]:
        items = response.get("results") if isinstance(response, dict) else None
        results: list[SearchResult] = []
        for item in items or []:
            if not isinstance(item, dict) or not item.get("url"):
                continue
            snippet = " ".join(str(item.get("content") or "").split())
            results.append(
                SearchResult(
                    title=str(item.get("title") or item["url"]).strip(),
                    url=str(item["url"]).strip(),
                    snippet=clip(snippet, self.snippet_chars),
                    score=round(float(item.get("score") or 0.0), 6),
                )
            )
        # Tavily already ranks; a stable sort keeps its order for equal scores
        results.sort(key=lambda r: -r.score)
        return results[:max_results]

    async def aclose(self) -> None:
        await self._client.close()


def _detail(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    return f": {clip(text, 200)}" if text else ""


# -- local corpus ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CorpusDocument:
    """One document of the local evidence corpus."""

    id: str
    title: str
    url: str
    text: str


def url_key(url: str) -> str:
    """A lookup key that ignores scheme, ``www.``, fragment, case of host and a trailing slash."""
    try:
        parsed = httpx.URL(url.strip())
    except (httpx.InvalidURL, TypeError, ValueError):
        return url.strip()
    host = parsed.host.lower().rstrip(".").removeprefix("www.")
    port = f":{parsed.port}" if parsed.port else ""
    path = parsed.path.rstrip("/")
    query = f"?{parsed.query.decode('ascii', 'replace')}" if parsed.query else ""
    return f"{host}{port}{path}{query}"


def _read_markdown(path: Path) -> CorpusDocument | None:
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines or not lines[0].startswith("# "):
        log.warning("skipping %s: the first line is not '# Title'", path)
        return None
    title = lines[0][2:].strip()
    url = None
    body: list[str] = []
    for line in lines[1:]:
        match = re.match(r"^url:\s*(\S+)\s*$", line, re.IGNORECASE)
        if url is None and match:
            url = match.group(1)
        else:
            body.append(line)
    if url is None:
        log.warning("skipping %s: no 'url: …' line", path)
        return None
    text = "\n".join(body).strip()
    return CorpusDocument(id=path.stem, title=title, url=url, text=text)


def _read_jsonl(path: Path) -> Iterable[CorpusDocument]:
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                url, text = str(row["url"]), str(row["text"])
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                log.warning("skipping %s:%d: %s", path, n, exc)
                continue
            yield CorpusDocument(
                id=str(row.get("id") or url), title=str(row.get("title") or url), url=url, text=text
            )


def load_corpus(directory: str | Path) -> list[CorpusDocument]:
    """Documents from ``*.jsonl`` (``{"id","title","url","text"}`` per line) and ``*.md``/``*.txt``
    files (first line ``# Title``, a ``url: …`` line, then the text), in sorted path order.

    Args:
        directory: The folder, searched recursively.

    Returns:
        Documents in a stable order; a later duplicate URL is skipped with a warning.
    """
    root = Path(directory)
    if not root.is_dir():
        raise ToolError(f"local search corpus folder not found: {root}", kind="config")
    docs: list[CorpusDocument] = []
    seen: set[str] = set()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        suffix = path.suffix.lower()
        if suffix == ".jsonl":
            found: Iterable[CorpusDocument] = _read_jsonl(path)
        elif suffix in (".md", ".txt"):
            doc = _read_markdown(path)
            found = [doc] if doc else []
        else:
            continue
        for doc in found:
            key = url_key(doc.url)
            if key in seen:
                log.warning("skipping duplicate corpus URL %s in %s", doc.url, path)
                continue
            seen.add(key)
            docs.append(doc)
    return docs


class LocalSearch:
    """BM25 search over a folder of documents; offline and deterministic.

    Args:
        corpus_dir: Folder read by :func:`load_corpus` (default: the repository's
            ``fixtures/corpus``). Ignored when ``documents`` is given.
        documents: The documents themselves (tests, programmatic corpora).
        snippet_chars: Target snippet length (the best-matching sentences).

    Raises:
        ToolError: ``kind="config"`` when the folder is missing or holds no documents.
    """

    def __init__(
        self,
        corpus_dir: str | Path | None = None,
        *,
        documents: Iterable[CorpusDocument] | None = None,
        snippet_chars: int = 300,
    ) -> None:
        import bm25s  # lazy: indexing pulls in numpy/scipy

        self.corpus_dir = Path(corpus_dir) if corpus_dir is not None else DEFAULT_CORPUS_DIR
        docs = list(documents) if documents is not None else load_corpus(self.corpus_dir)
        if not docs:
            raise ToolError(f"the local search corpus is empty ({self.corpus_dir})", kind="config")
        self.documents: tuple[CorpusDocument, ...] = tuple(docs)
        self.snippet_chars = snippet_chars
        self._by_url = {url_key(d.url): d for d in self.documents}
        # the title counts twice: it is the most precise statement of what a page is about
        tokens = [tokenize(f"{d.title}\n{d.title}\n{d.text}") for d in self.documents]
        self._df: Counter[str] = Counter()
        for toks in tokens:
            self._df.update(set(toks))
        self._bm25 = bm25s.BM25()
        self._bm25.index(tokens, show_progress=False)
        digest = hashlib.sha256()
        for d in self.documents:
            digest.update(json.dumps([d.id, d.url, d.title, d.text], ensure_ascii=False).encode())
        self._fingerprint = digest.hexdigest()[:12]

    @property
    def cache_id(self) -> str:
        return f"local:{self._fingerprint}"

    def document(self, url: str) -> CorpusDocument | None:
        """The corpus document at ``url`` (scheme, ``www.``, trailing slash ignored), or None."""
        return self._by_url.get(url_key(url))

    def rank(self, query: str) -> list[tuple[CorpusDocument, float]]:
        """All documents sharing a term with ``query``, best first (ties keep corpus order)."""
        terms = [t for t in tokenize(query) if t in self._bm25.vocab_dict]
        if not terms:
            return []
        scores = self._bm25.get_scores(terms)
        order = sorted(
            (i for i in range(len(self.documents)) if scores[i] > 0), key=lambda i: (-scores[i], i)
        )
        return [(self.documents[i], float(scores[i])) for i in order]

    async def search(self, query: str, max_results: int = 5) -> list[SearchResult]:
        """Search the corpus (no I/O; async to match the backend interface)."""
        terms = set(tokenize(query))
        return [
            SearchResult(
                title=doc.title,
                url=doc.url,
                snippet=self.snippet(doc.text, terms),
                score=round(score, 4),
            )
            for doc, score in self.rank(query)[:max_results]
        ]

    def snippet(self, text: str, terms: set[str]) -> str:
        """The best-matching sentence of ``text``, widened with its neighbours to ~snippet_chars."""
        sentences = split_sentences(text)
        if not sentences:
            return ""
        n_docs = len(self.documents)

        def weight(sentence: str) -> float:
            found = terms.intersection(tokenize(sentence))
            return sum(math.log(1 + n_docs / (1 + self._df[t])) for t in found)

        weights = [weight(s) for s in sentences]
        best = max(range(len(sentences)), key=lambda i: (weights[i], -i))
        lo = hi = best
        length = len(sentences[best])
        # widen forwards first (the sentence after usually continues the point), then backwards
        while length < self.snippet_chars * 0.8 and (hi + 1 < len(sentences) or lo > 0):
            if hi + 1 < len(sentences):
                hi += 1
                length += 1 + len(sentences[hi])
            else:
                lo -= 1
                length += 1 + len(sentences[lo])
        return clip(join_sentences(sentences[lo : hi + 1]), self.snippet_chars)
