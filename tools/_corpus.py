"""Search over a local folder of documents with BM25: offline and deterministic.

The corpus also backs ``visit_web`` for its own URLs, so an offline run reads pages exactly
like a live one (see ``medmis.tools._web``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import httpx

from ._text import split_sentences, tokenize, widen
from ._types import SearchResult, ToolError
from ._userfile import UserFileError, json_value

log = logging.getLogger(__name__)

DEFAULT_CORPUS_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "corpus"
"""The clean web of offline runs: reference and unrelated passages, none written for an attack."""


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
                row = json_value(line, path, n)
                url, text = str(row["url"]), str(row["text"])
            except UserFileError as exc:
                log.warning("skipping %s", exc)
                continue
            except (KeyError, TypeError) as exc:
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


def load_ambient(path: str | Path) -> list[CorpusDocument]:
    """The passages of an ambient-misinformation file (``--search-ambient``): a ``.jsonl`` file
    as in a corpus folder, or one ``.md``/``.txt`` document.

    Raises:
        ToolError: ``kind="config"`` when the file is missing, of another kind or holds no passage.
    """
    file = Path(path)
    if not file.is_file():
        raise ToolError(f"ambient passages file not found: {file}", kind="config")
    suffix = file.suffix.lower()
    if suffix == ".jsonl":
        docs = list(_read_jsonl(file))
    elif suffix in (".md", ".txt"):
        doc = _read_markdown(file)
        docs = [doc] if doc else []
    else:
        raise ToolError(f"ambient passages file {file}: expected .jsonl, .md or .txt", kind="config")
    if not docs:
        raise ToolError(f"ambient passages file {file} holds no passage", kind="config")
    return docs


def corpus_digest(directory: str | Path | None = None) -> str:
    """sha256 over the files :func:`load_corpus` reads (relative path and bytes, in its order):
    the identity of a local corpus in a run's fingerprint, so a folder searched over other
    documents is refused on resume."""
    root = Path(directory) if directory is not None else DEFAULT_CORPUS_DIR
    digest = hashlib.sha256()
    if root.is_dir():
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            if path.suffix.lower() in (".jsonl", ".md", ".txt"):
                digest.update(path.relative_to(root).as_posix().encode() + b"\0")
                digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def ambient_digest(path: str | Path) -> str:
    """sha256 of an ambient file's bytes (the fingerprint's identity of the condition)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


class LocalSearch:
    """BM25 search over a folder of documents; offline and deterministic.

    Args:
        corpus_dir: Folder read by :func:`load_corpus` (default: the repository's
            ``fixtures/corpus``). Ignored when ``documents`` is given.
        documents: The documents themselves (tests, programmatic corpora).
        ambient: A file of ambient-misinformation passages (:func:`load_ambient`) searched
            with the corpus, after its documents (a URL the corpus holds is skipped). A named,
            opt-in condition: the default corpus is the clean web.
        snippet_chars: Target snippet length (the best-matching sentences).

    Raises:
        ToolError: ``kind="config"`` when the folder is missing or holds no documents.
    """

    def __init__(
        self,
        corpus_dir: str | Path | None = None,
        *,
        documents: Iterable[CorpusDocument] | None = None,
        ambient: str | Path | None = None,
        snippet_chars: int = 300,
    ) -> None:
        import bm25s  # lazy: indexing pulls in numpy/scipy

        self.corpus_dir = Path(corpus_dir) if corpus_dir is not None else DEFAULT_CORPUS_DIR
        docs = list(documents) if documents is not None else load_corpus(self.corpus_dir)
        if not docs:
            raise ToolError(f"the local search corpus is empty ({self.corpus_dir})", kind="config")
        self.ambient = Path(ambient) if ambient is not None else None
        if self.ambient is not None:
            seen = {url_key(d.url) for d in docs}
            for doc in load_ambient(self.ambient):
                if url_key(doc.url) in seen:
                    log.warning("skipping ambient passage %s: the corpus holds its URL", doc.url)
                    continue
                seen.add(url_key(doc.url))
                docs.append(doc)
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
            # fsum: exactly rounded, so the order of the set (string hashing, per process) cannot
            # tip a near tie between two sentences
            return math.fsum(math.log(1 + n_docs / (1 + self._df[t])) for t in found)

        weights = [weight(s) for s in sentences]
        best = max(range(len(sentences)), key=lambda i: (weights[i], -i))
        return widen(sentences, best, self.snippet_chars)
