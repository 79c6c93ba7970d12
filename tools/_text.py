"""Text utilities shared by the search backends and page focusing.

The tokeniser is used for the local BM25 corpus and for focusing visited pages on a goal:
lower-cased NFKC words for alphabetic scripts, character bigrams for CJK runs (Chinese has no
spaces, and bigrams are the usual dependency-free compromise between characters and words).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence

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


def widen(sentences: Sequence[str], best: int, limit: int) -> str:
    """``sentences[best]`` widened with the sentences after it (then before it) to about
    ``limit`` characters, joined and clipped: a search snippet around its best sentence."""
    lo = hi = best
    length = len(sentences[best])
    # forwards first (the sentence after usually continues the point), then backwards
    while length < limit * 0.8 and (hi + 1 < len(sentences) or lo > 0):
        if hi + 1 < len(sentences):
            hi += 1
            length += 1 + len(sentences[hi])
        else:
            lo -= 1
            length += 1 + len(sentences[lo])
    return clip(join_sentences(sentences[lo : hi + 1]), limit)
