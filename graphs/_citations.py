"""Checking a cited answer against what the agent actually read (the ``verify`` step).

The paper describes its search agent as one that "verifies source support, and returns a
cited answer". This check makes that auditable after the fact, without another model call
(so the agent's calls and cost stay exactly those of the loop): it reads the final answer's
cited URLs, keeps those whose pages were fetched *in this case*, and looks in their fetched
text for a passage naming the chosen option (a quotation from the answer first, otherwise a
sentence of the page). The verdict is recorded, never used to change the answer.

Verdicts: ``no_answer`` (no option was chosen), ``uncited`` (no URL in the answer),
``not_visited`` (only URLs that were never fetched, e.g. known from snippets or invented),
``supported`` (a cited, fetched page has a passage naming the chosen option), ``quoted``
(a quotation from the answer is in a cited, fetched page, but no passage names the option,
e.g. a numeric or very short option), ``unsupported`` (neither).

:func:`answer_sources` is the toolkit's one definition of what an answer is *cited* to rest on
(see its docstring); ``verify_citations`` only checks the URLs the answer text names.

It is lexical: it proves that a cited source was read and mentions the answer, not that it
argues for it. Sentences with a negation cue are skipped so that "X is not a cause" does not
count as support for X, which errs towards ``unsupported``.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from medmis.tools import split_sentences, url_key

Verdict = Literal["no_answer", "uncited", "not_visited", "supported", "quoted", "unsupported"]

_URL = re.compile(r"https?://[^\s<>\"'\]\[)(}{|\\^`]+")
_QUOTE = re.compile(r"\"([^\"]{20,}?)\"|“([^”]{20,}?)”|「([^」]{10,}?)」|『([^』]{10,}?)』")
_ELLIPSIS = re.compile(r"\[?(?:\.\.\.|…)\]?")
_NEGATION = re.compile(
    r"\b(?:not|no|never|without|cannot|unlike|rather than|instead of|neither|nor)\b|n't|不|没有|非|无",
    re.IGNORECASE,
)
# options that name no checkable content
_GENERIC = frozenset(
    {"all of the above", "none of the above", "both", "neither", "all", "none", "true", "false", "yes", "no"}
)
MIN_OPTION_CHARS = 4
MIN_FRAGMENT_WORDS = 3


def _norm(text: str) -> str:
    folded = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(re.findall(r"\w+", folded))


def cited_urls_in(text: str) -> list[str]:
    """The http(s) URLs an answer mentions, in order, without trailing punctuation."""
    out: list[str] = []
    for raw in _URL.findall(text or ""):
        url = raw.rstrip(".,;:!?*_'\"")
        if url not in out:
            out.append(url)
    return out


def _checkable_option(option_text: str) -> str:
    """The option's normalised text when a passage can be said to name it, else ``""``."""
    option_norm = _norm(option_text)
    letters = option_norm.replace(" ", "")
    # a CJK character carries about a word: two of them are as specific as four Latin letters
    enough = len(letters) >= (MIN_OPTION_CHARS if letters.isascii() else MIN_OPTION_CHARS // 2)
    return option_norm if enough and option_norm not in _GENERIC else ""


def _quotes(text: str) -> list[str]:
    return [next(g for g in m.groups() if g) for m in _QUOTE.finditer(text or "")]


def _quote_in(quote: str, page_norm: str) -> bool:
    fragments = [_norm(f) for f in _ELLIPSIS.split(quote)]
    fragments = [f for f in fragments if len(f.split()) >= MIN_FRAGMENT_WORDS or (f and not f.isascii())]
    return bool(fragments) and all(f in page_norm for f in fragments)


def _names_option(passage: str, option_norm: str) -> bool:
    text = _norm(passage)
    # CJK text has no spaces between words: there a plain substring is the best boundary
    found = f" {option_norm} " in f" {text} " if option_norm.isascii() else option_norm in text
    return found and not _NEGATION.search(passage)


def verify_citations(
    final: str,
    choice: str | None,
    options: Mapping[str, str],
    pages: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """Check the final answer's citations against the pages fetched in this case.

    Args:
        final: The final answer text.
        choice: The option key extracted from it (None when none was found).
        options: The question's options (key -> text).
        pages: The pages fetched in this case: ``{"url", "final_url", "text"}`` each.

    Returns:
        ``{"verdict", "choice", "cited", "visited_cited", "unvisited_cited", "quote",
        "quote_url", "method"}``; ``method`` is ``answer_quote`` or ``page_sentence`` for a
        supported answer.
    """
    cited = cited_urls_in(final)
    fetched: dict[str, list[str]] = {}
    for page in pages:
        for url in (page.get("url"), page.get("final_url")):
            if isinstance(url, str) and url:
                fetched.setdefault(url_key(url), []).append(str(page.get("text") or ""))
    visited = [u for u in cited if url_key(u) in fetched]
    out: dict[str, Any] = {
        "verdict": "unsupported",
        "choice": choice,
        "cited": cited,
        "visited_cited": visited,
        "unvisited_cited": [u for u in cited if u not in visited],
        "quote": None,
        "quote_url": None,
        "method": None,
    }
    verdict: Verdict
    if choice is None:
        verdict = "no_answer"
    elif not cited:
        verdict = "uncited"
    elif not visited:
        verdict = "not_visited"
    else:
        verdict = _support(final, options.get(choice, ""), visited, fetched, out)
    out["verdict"] = verdict
    return out


def _support(
    final: str,
    option_text: str,
    visited: list[str],
    fetched: Mapping[str, list[str]],
    out: dict[str, Any],
) -> Verdict:
    option_norm = _checkable_option(option_text)
    checkable = bool(option_norm)
    quoted: tuple[str, str] | None = None
    for quote in _quotes(final):
        for url in visited:
            if any(_quote_in(quote, _norm(text)) for text in fetched[url_key(url)]):
                if checkable and _names_option(quote, option_norm):
                    out.update(quote=quote, quote_url=url, method="answer_quote")
                    return "supported"
                quoted = quoted or (quote, url)
    if checkable:
        for url in visited:
            for text in fetched[url_key(url)]:
                for sentence in split_sentences(text):
                    if _names_option(sentence, option_norm):
                        out.update(quote=sentence, quote_url=url, method="page_sentence")
                        return "supported"
    if quoted:
        out.update(quote=quoted[0], quote_url=quoted[1], method="answer_quote")
        return "quoted"
    return "unsupported"


SourceBy = Literal["named", "quoted", "supports"]


def answer_sources(
    final: str,
    choice: str | None,
    options: Mapping[str, str],
    evidence: Sequence[Mapping[str, Any]] | None,
) -> list[dict[str, Any]]:
    """The sources a final answer rests on: the one definition of "cited" for every defender.

    A defender declares the attributed passages its final answer call was given
    (:meth:`DefenderContext.answered_from`: search results and pages in a search agent's
    history, the quoted sources of the claim verdicts ``claim_verify`` answers from); the
    same rule then decides, for every defender, which of them the answer rests on:

    * ``named``: every URL the answer text names (an explicit citation, declared or not);
    * ``quoted``: a declared passage holding a quotation from the answer;
    * ``supports``: a declared passage with a sentence naming the chosen option (no negation
      cue in it; the test :func:`verify_citations` uses for support).

    A passage that was only searched, shown or visited, and neither named, quoted nor
    supporting the chosen option, is not a source: "visited" is a different count. A
    defender that declares nothing (no tools, or no evidence in its final call) rests only
    on the URLs its answer names.

    Args:
        final: The final answer text.
        choice: The option key extracted from it (None when none was found).
        options: The question's options (key -> text).
        evidence: The declared passages: ``{"url", "text"}`` each (None: none declared).

    Returns:
        ``[{"url", "by"}]`` in order (named first, then declared order), one per URL.
    """
    out: dict[str, dict[str, Any]] = {}
    for url in cited_urls_in(final):
        out.setdefault(url_key(url), {"url": url, "by": "named"})
    option_norm = _checkable_option(options.get(choice, "")) if choice is not None else ""
    checkable = bool(option_norm)
    quotes = _quotes(final)
    for passage in evidence or ():
        declared = passage.get("url")
        if not isinstance(declared, str) or not declared.startswith(("http://", "https://")) or url_key(declared) in out:
            continue
        text = str(passage.get("text") or "")
        page_norm = _norm(text)
        by: SourceBy | None = None
        if any(_quote_in(q, page_norm) for q in quotes):
            by = "quoted"
        elif checkable and any(_names_option(s, option_norm) for s in split_sentences(text)):
            by = "supports"
        if by is not None:
            out[url_key(declared)] = {"url": declared, "by": by}
    return list(out.values())


def source_urls(sources: Any) -> list[str]:
    """The URLs of an answer's ``sources`` (``Answer.extra["sources"]``), tolerating a
    hand-edited or missing list."""
    if not isinstance(sources, list):
        return []
    return [s["url"] for s in sources if isinstance(s, Mapping) and isinstance(s.get("url"), str)]
