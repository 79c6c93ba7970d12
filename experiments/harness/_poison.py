"""A run's poisoned web (``RunConfig.poison``): the pages by case, each case's layer and what
it saw (``Record.poison``), the marks in its trace, and the poison's part of the fingerprint
and manifest.

A Type 1 case whose key (``SUBSET/id#TARGET``) has pages of the configured styles searches
through a :class:`~medmis.tools._poisoned_web.PoisonedWeb` holding them; clean and Type 2
cases search through one holding none (their results pass unchanged, and no page of the
file is ever fetched). The defender never holds that layer: its ``ctx.tools`` is the
:class:`~medmis.tools.CaseTools` facade every case gets, routed to the layer while the case
runs (``._solve``). Only this bookkeeping knows which results were poisoned: the record's
``poison`` block and ``"poisoned": true`` on the trace's search results and visited pages are
written after the defender has answered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from medmis.experiments.benchmark import Answer, Case, Item
from medmis.graphs import source_urls
from medmis.tools import (
    LocalSearch,
    PoisonedPage,
    PoisonedWeb,
    PoisonExposure,
    PoisonSettings,
    PoisonTally,
    case_key,
    load_pages,
    pages_digest,
    url_key,
)

from ._config import RunConfig, RunSetupError

__all__ = ["CasePoison", "RunPoison", "check_pages", "poison_fingerprint", "poison_manifest"]


def poison_fingerprint(settings: PoisonSettings) -> dict[str, Any]:
    """The fingerprint's ``poison``: the settings and the page file's sha256 (not its path)."""
    return {"share": settings.share, "rank": settings.rank,
            "styles": list(settings.styles) if settings.styles is not None else None,
            "pages_sha256": _digest(settings.pages)}


def poison_manifest(settings: PoisonSettings) -> dict[str, Any]:
    """The manifest's ``poison``: the settings, the page file and its sha256."""
    return {**settings.model_dump(mode="json"), "pages_sha256": _digest(settings.pages)}


def check_pages(poison: RunPoison | None, items: Sequence[Item],
                planned: Iterable[tuple[int, str, str | None]],
                notice: Callable[[str], None] | None = None) -> None:
    """Refuse a poisoned run none of whose Type 1 cases has a page: a page file made for
    other data (or other styles) would leave the web clean while the run says it is poisoned.
    When only some cases lack pages, ``notice`` says how many (they search a clean web; their
    records say ``pages: 0``).

    Raises:
        RunSetupError: One line naming the file and a case key it lacks.
    """
    if poison is None:
        return
    keys = [case_key(items[i].key, t) for i, protocol, t in planned if protocol == "type1" and t]
    missing = [k for k in keys if k not in poison.by_case]
    styles = f" of styles {'+'.join(poison.settings.styles)}" if poison.settings.styles else ""
    if keys and len(missing) == len(keys):
        raise RunSetupError(f"poison: {poison.settings.pages} has no page{styles} for any of this run's "
                            f"{len(keys)} Type 1 case(s) (e.g. {keys[0]}); make them with "
                            "`medmis generate pages` from the same data")
    if missing and notice is not None:
        notice(f"poison: {poison.settings.pages} has no page{styles} for {len(missing)} of this run's "
               f"{len(keys)} Type 1 case(s) (e.g. {missing[0]}); they search a clean web (pages: 0)")


def _digest(path: Path) -> str:
    try:
        return pages_digest(path)
    except OSError as exc:
        raise RunSetupError(f"poison: cannot read the pages file {path} ({exc.strerror or exc})") from None


class RunPoison:
    """The poisoned pages of a run, by case key, and the layer each case searches through."""

    def __init__(self, settings: PoisonSettings, pages: Iterable[PoisonedPage], seed: int) -> None:
        self.settings = settings
        self.seed = seed
        by_case: dict[str, list[PoisonedPage]] = {}
        urls: set[str] = set()
        for page in pages:
            urls.add(url_key(page.url))
            if settings.styles is None or page.style in settings.styles:
                by_case.setdefault(page.case_key, []).append(page)
        self.by_case = {k: tuple(v) for k, v in by_case.items()}
        self.urls = frozenset(urls)
        """Every page of the file (none is ever fetched, whoever's case it is)."""

    @classmethod
    def of(cls, config: RunConfig) -> RunPoison | None:
        """The run's poison (None without ``config.poison``).

        Raises:
            RunSetupError: The page file is unreadable or holds a line that is not a page
                (one line naming ``file:line``).
        """
        settings = config.poison
        if settings is None:
            return None
        try:
            pages = load_pages(settings.pages)
        except ValueError as exc:
            raise RunSetupError(f"poison: {exc}") from None
        return cls(settings, pages, config.seed)

    def case(self, case: Case, tools: Any) -> CasePoison:
        """The layer and the bookkeeping of one case (``tools``: the run's, None when the
        defender uses none)."""
        key = case_key(case.item.key, case.target) if case.protocol == "type1" and case.target else ""
        pages = self.by_case.get(key, ()) if key else ()
        tally = PoisonTally()
        if tools is not None:
            corpus = isinstance(getattr(tools, "backend", None), LocalSearch)
            reader = getattr(tools, "reader", None) is not None  # pages read through Jina Reader
            tools = PoisonedWeb(tools, pages, share=self.settings.share, rank=self.settings.rank,
                                seed=f"{key}\x00{self.seed}", withheld=self.urls, corpus_like=corpus,
                                reader=reader and not corpus, tally=tally)
        return CasePoison(self.settings, pages, tools, tally)


class CasePoison:
    """One case's poisoned web (``tools``, what the defender's facade forwards to) and the
    bookkeeping the defender never reaches: its pages and, once it has answered, its exposure."""

    def __init__(self, settings: PoisonSettings, pages: tuple[PoisonedPage, ...], tools: Any,
                 tally: PoisonTally) -> None:
        self.settings = settings
        self.pages = pages
        self.tools = tools
        self.tally = tally
        self._urls = {url_key(p.url) for p in pages}

    def exposure(self, answer: Answer) -> PoisonExposure:
        """What the case saw of its pages, and whether the answer rests on one: a poisoned
        URL among the answer's ``sources`` (the one rule, :func:`medmis.graphs.answer_sources`,
        applied by the harness to every defender alike). A visited page is counted in
        ``visited``, never as cited for having been visited."""
        t = self.tally
        sources = answer.extra.get("sources") if isinstance(answer.extra, Mapping) else None
        return PoisonExposure(
            share=self.settings.share, rank=self.settings.rank, pages=len(self.pages),
            shown=t.shown, seen=t.seen, visited=t.visited,
            cited=any(self._poisoned(u) for u in source_urls(sources)),
        )

    def mark(self, steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``steps`` (the trace's, as dumped) with ``"poisoned": true`` on every poisoned
        search result and visited poisoned page."""
        if not self._urls:
            return steps
        for step in steps:
            out = step.get("output")
            if step.get("kind") != "tool" or out is None:
                continue
            if step.get("name") == "search_web":
                for result in (out.get("results") if isinstance(out, Mapping) else out) or []:
                    if isinstance(result, dict) and self._poisoned(result.get("url")):
                        result["poisoned"] = True
            elif step.get("name") == "visit_web" and isinstance(out, dict) and self._poisoned(out.get("final_url")):
                out["poisoned"] = True
        return steps

    def _poisoned(self, url: Any) -> bool:
        return isinstance(url, str) and url_key(url) in self._urls

