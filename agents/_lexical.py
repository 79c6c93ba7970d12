"""How the simulated examinee relates pieces of text to each other, by their words alone.

Three judgements, all lexical and all made from text the examinee received:

* *Which option a sentence argues for* (:func:`option_of`): the one option whose full text
  occurs in the sentence (word-bounded); failing that, the option with the largest share of
  its content words in the sentence (at least half, and a unique best). Otherwise none.
* *What retrieved evidence says about a claim* (:func:`judge_claim`): the evidence sentence
  sharing the most of the claim's content words decides. ``supported`` when it holds at least
  ``SUPPORT_COVERAGE`` of them and carries no negation cue; ``refuted`` when a sentence on the
  claim's topic (at least ``TOPIC_COVERAGE`` of its words) says something else (lower
  coverage, or a negation cue); ``not_enough_info`` when no evidence sentence is on topic.
* *Which option a sentence names* (:func:`named_option`): the one option whose full text occurs
  in it (word-bounded; generic options such as "None of the above", and texts under four
  letters, two for CJK, never count), else none. The examinee reads retrieved sentences this way.

The only word lists here are generic English: stop words and negation cues (the same kind
that ``medmis.graphs._citations`` uses). None names a defender, a warning or a label.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ._knowledge import squash

SUPPORT_COVERAGE = 0.6
TOPIC_COVERAGE = 0.3

_STOP_WORDS = (
    "a an and are as at be been by can for from has have in is it its of on or that the their "
    "this to was were which with who whom whose what when where why how than then there these "
    "those per should would could may might must will shall do does did not no so such also "
    "into over under after before only most more less any all each other some very"
)
_STOP = frozenset(_STOP_WORDS.split())
_NEGATION = re.compile(
    r"\b(?:not|no|never|without|cannot|unlike|rather than|instead of|neither|nor)\b|n't|不|没有|非|无",
    re.I,
)
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+|\n+")
_URL_LINE = re.compile(r"^\s*(?:\[\d+\]\s*)?(?:.*?—\s*)?(https?://\S+)\s*$|^\s*URL\s*:\s*(\S+)", re.I)
_GENERIC = frozenset({"none", "true", "false", "both", "neither", "alloftheabove", "noneoftheabove"})


def words(text: str) -> list[str]:
    """Lower-case alphanumeric runs (hyphenated terms kept whole)."""
    return re.findall(r"[^\W_]+(?:-[^\W_]+)*", text.casefold())


def content(text: str) -> set[str]:
    """Content words: no stop words; one-letter words only when they are digits."""
    return {w for w in words(text) if w not in _STOP and (len(w) > 1 or w.isdigit())}


def has_phrase(haystack: str, phrase: str) -> bool:
    """Whether ``phrase`` occurs in ``haystack`` as whole words (plain substring for CJK)."""
    if not phrase.isascii():
        return bool(squash(phrase)) and squash(phrase) in squash(haystack)
    p = " ".join(words(phrase))
    return bool(p) and f" {p} " in f" {' '.join(words(haystack))} "


def negated(sentence: str) -> bool:
    return _NEGATION.search(sentence) is not None


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text) if s and s.strip()]


def option_of(sentence: str, options: Mapping[str, str]) -> str | None:
    """The option a sentence argues for, or None (see the module docstring)."""
    named = [k for k, v in options.items() if has_phrase(sentence, v)]
    if len(named) == 1:
        return named[0]
    pool = named or list(options)
    have = content(sentence)
    scores = {}
    for k in pool:
        want = content(options[k])
        scores[k] = len(want & have) / len(want) if want else 0.0
    best = max(scores.values(), default=0.0)
    top = [k for k, s in scores.items() if s == best]
    if best < 0.5 or len(top) != 1:
        return None
    return top[0]


@dataclass(frozen=True)
class Passage:
    """A piece of evidence the examinee received, and the URL it came with (if any)."""

    text: str
    url: str = ""


def passage(text: str) -> Passage:
    """A passage with the first URL named on its own line (``URL: ...`` or a citation head)."""
    for line in text.splitlines():
        m = _URL_LINE.match(line)
        if m:
            return Passage(text, m.group(1) or m.group(2) or "")
    found = re.search(r"https?://[^\s<>\"')\]]+", text)
    return Passage(text, found.group(0) if found else "")


def _snip(text: str, n: int = 40) -> str:
    parts = text.split()
    return " ".join(parts[:n]) + (" …" if len(parts) > n else "")


def judge_claim(claim: str, evidence: Sequence[Passage]) -> tuple[str, str, str]:
    """(verdict, quote, url) for ``claim`` against the evidence (see the module docstring)."""
    want = content(claim)
    if not want:
        return "not_enough_info", "", ""
    best: tuple[float, str, str] = (0.0, "", "")
    for p in evidence:
        for s in sentences(p.text):
            cover = len(want & content(s)) / len(want)
            if cover > best[0]:
                best = (cover, s, p.url)
    cover, quote, url = best
    if cover >= SUPPORT_COVERAGE and not negated(quote):
        return "supported", _snip(quote), url
    if cover >= TOPIC_COVERAGE:
        return "refuted", _snip(quote), url
    return "not_enough_info", "", ""


def named_option(sentence: str, options: Mapping[str, str]) -> str | None:
    """The one option a sentence names (word-bounded), or None (see the module docstring)."""
    named = [
        k for k, v in options.items()
        if len(squash(v)) >= (4 if v.isascii() else 2) and squash(v) not in _GENERIC
        and has_phrase(sentence, v)
    ]
    return named[0] if len(named) == 1 else None
