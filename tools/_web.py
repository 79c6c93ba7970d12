"""``WebTools``: the :class:`~medmis.tools._types.Toolset` defenders use (search + visit).

It composes a search backend, the URL policy, a page reader and the record/replay store:

* ``search`` asks the backend through the store (kind ``"search"``, key ``{backend, query,
  max_results}``, plus the resolved ``country`` and ``language`` for a backend that localises,
  i.e. Serper) and filters the contamination blocklist on the way *out*, so extending the
  blocklist also applies to recorded results. ``search_response`` returns the same search with
  what the engine showed beside the results (Serper's answer box, knowledge graph, related
  searches).
* ``visit`` checks the scheme and the blocklist, then serves local-corpus URLs offline (no
  store, no network: they are already deterministic); any other URL goes through the store
  (kind ``"visit"``, key ``{url, goal, max_chars}``, plus ``reader`` for Jina). A direct visit
  fetches the page with the address check on every hop; a Jina visit passes the same check
  on the URL before it is handed to Jina Reader. The address check needs DNS, so it runs only
  when a page is really fetched: replays stay offline.

Results cross the store as JSON and are rebuilt from that JSON in every mode, so a replayed
call returns exactly what the recorded call returned. Errors are never stored.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import httpx

from ._bounded import shared_ssl_context
from ._corpus import LocalSearch
from ._jina import JinaReader
from ._safety import Blocklist, Resolver, UrlPolicy
from ._search import SearchBackend
from ._serper import SerperSearch
from ._tavily import TavilySearch
from ._types import Page, SearchResponse, SearchResult, SerpResult, ToolError
from ._visit import DEFAULT_HEADERS, fetch_page, page_from_document

if TYPE_CHECKING:
    from ._store import CacheMode

SearchName = Literal["tavily", "serper", "local"]
VisitName = Literal["direct", "jina"]
SEARCH_NAMES: tuple[SearchName, ...] = ("tavily", "serper", "local")


class PageReader(Protocol):
    """A service that reads a page for us (Jina Reader): ``read(url, goal, max_chars)``."""

    @property
    def cache_id(self) -> str: ...

    async def read(self, url: str, *, goal: str | None = None, max_chars: int = 8000) -> Page: ...


class CallStore(Protocol):
    """What the tools need of a store (``medmis.tools._store.RecordStore`` provides it)."""

    async def through(
        self, kind: str, key: dict[str, Any], produce: Callable[[], Awaitable[Any]]
    ) -> Any: ...


MAX_SEARCH_RESULTS = 20
# extra results asked of the backend so that blocklisted ones can be dropped without
# leaving the model short
BLOCKLIST_SLACK = 5


class WebTools:
    """Web search and page visits with URL safety, a contamination blocklist and caching.

    Args:
        search: ``"local"`` (BM25 over ``corpus_dir``), ``"tavily"`` (needs ``TAVILY_API_KEY``),
            ``"serper"`` (needs ``SERPER_API_KEY``) or any
            :class:`~medmis.tools._search.SearchBackend`.
        visit: ``"direct"`` (httpx + trafilatura, address check on every redirect hop),
            ``"jina"`` (Jina Reader, needs ``JINA_API_KEY``) or any :class:`PageReader`.
        corpus_dir: Local corpus folder (default ``fixtures/corpus``). Its documents are also
            what ``visit`` serves offline; with a web search backend it is used only when given.
        ambient: A file of ambient-misinformation passages searched and served with the local
            corpus (``--search-ambient``; ``search="local"`` only). None: the clean web.
        allow_hosts: ``HOST[:PORT]`` entries exempt from the private-address check.
        blocklist: Contamination blocklist (default :meth:`Blocklist.default`).
        store: Record/replay store; None calls through every time.
        client: HTTP client for visits (default: one owned and closed by ``aclose``).
        resolve: DNS resolver for the URL policy (tests inject a fake).
        fetch_timeout: Deadline in seconds for one page download, redirects included.
        max_bytes: Largest page body accepted.
        own_store: Close ``store`` in ``aclose`` (set by :func:`make_tools`).
    """

    def __init__(
        self,
        search: SearchName | SearchBackend = "local",
        *,
        visit: VisitName | PageReader = "direct",
        corpus_dir: str | Path | None = None,
        ambient: str | Path | None = None,
        allow_hosts: Iterable[str] = (),
        blocklist: Blocklist | None = None,
        store: CallStore | None = None,
        client: httpx.AsyncClient | None = None,
        resolve: Resolver | None = None,
        fetch_timeout: float = 20.0,
        max_bytes: int = 2_000_000,
        own_store: bool = False,
    ) -> None:
        self._owned: list[Callable[[], Awaitable[Any]]] = []
        self.local: LocalSearch | None = None
        # the reader first: its key check must fail before any search client exists
        self.reader: PageReader | None = None
        if visit == "jina":
            jina = JinaReader()
            self._owned.append(jina.aclose)
            self.reader = jina
        elif isinstance(visit, str):
            if visit != "direct":
                raise ValueError(f"unknown visit backend {visit!r} (use 'direct' or 'jina')")
        else:
            self.reader = visit
        if ambient is not None and search != "local":
            # live engines rank their own pages: mixing a file into them would be another
            # condition than the one the name says
            raise ToolError("ambient passages (--search-ambient) join the local corpus: use --search local",
                            kind="config")
        if search == "local":
            self.local = LocalSearch(corpus_dir, ambient=ambient)
            self.backend: SearchBackend = self.local
        elif search in ("tavily", "serper"):
            if corpus_dir is not None:  # first: a bad folder must not leak the search client
                self.local = LocalSearch(corpus_dir)
            web: TavilySearch | SerperSearch = TavilySearch() if search == "tavily" else SerperSearch()
            self._owned.append(web.aclose)
            self.backend = web
        elif isinstance(search, str):
            raise ValueError(
                f"unknown search backend {search!r} (use {', '.join(map(repr, SEARCH_NAMES))})"
            )
        else:
            self.backend = search
            if isinstance(search, LocalSearch):
                self.local = search
            elif corpus_dir is not None:
                self.local = LocalSearch(corpus_dir)
        self.blocklist = Blocklist.default() if blocklist is None else blocklist
        self.policy = UrlPolicy(allow_hosts, self.blocklist, resolve)
        self.store = store
        if own_store and store is not None and hasattr(store, "close"):
            closer = store.close

            async def close_store() -> None:
                closer()

            self._owned.append(close_store)
        if client is None:
            # redirects are followed by fetch_page itself, hop by hop, under the URL policy
            client = httpx.AsyncClient(
                verify=shared_ssl_context("httpx"),
                follow_redirects=False,
                headers=DEFAULT_HEADERS,
                timeout=httpx.Timeout(15.0, connect=10.0),
            )
            self._owned.append(client.aclose)
        self.client = client
        self.fetch_timeout = fetch_timeout
        self.max_bytes = max_bytes

    async def search(
        self,
        query: str,
        *,
        max_results: int = 5,
        country: str | None = None,
        language: str | None = None,
    ) -> list[SearchResult]:
        """Ranked results for ``query``, blocklisted URLs removed.

        Args:
            query: The search query.
            max_results: How many results to return (1 to 20).
            country: Two-letter country code; used by backends that localise (Serper).
            language: Language code; used by backends that localise (Serper).

        Raises:
            ToolError: An empty query, or the backend's model-visible failures.
        """
        query, max_results, raw = await self._search_raw(query, max_results, country, language)
        if isinstance(raw, dict):
            results: list[SearchResult] = list(SearchResponse.model_validate(raw).results)
        else:
            results = [SearchResult.model_validate(r) for r in raw]
        return self.blocklist.filter(results)[:max_results]

    async def search_response(
        self,
        query: str,
        *,
        max_results: int = 5,
        country: str | None = None,
        language: str | None = None,
    ) -> SearchResponse:
        """The same search as :meth:`search`, with what the engine showed beside the results.

        Raises:
            ToolError: As :meth:`search`.
        """
        query, max_results, raw = await self._search_raw(query, max_results, country, language)
        if isinstance(raw, dict):
            response = SearchResponse.model_validate(raw)
        else:
            response = SearchResponse(
                query=query,
                results=[SerpResult.model_validate(r) for r in raw],
            )
        kept = self.blocklist.filter(response.results)[:max_results]
        return response.model_copy(update={"results": kept})

    async def _search_raw(
        self, query: str, max_results: int, country: str | None, language: str | None
    ) -> tuple[str, int, Any]:
        query = " ".join(query.split())
        if not query:
            raise ToolError("the search query is empty; say what to search for", kind="error")
        max_results = max(1, min(int(max_results), MAX_SEARCH_RESULTS))
        backend = self.backend
        key: dict[str, Any] = {"backend": backend.cache_id, "query": query, "max_results": max_results}
        locale = getattr(backend, "locale", None)
        rich = getattr(backend, "search_response", None)
        extra: dict[str, Any] = {}
        if callable(locale):
            # the resolved codes key the store: "US", "us" and the default share one entry
            key["country"], key["language"] = locale(country, language)
            extra = {"country": key["country"], "language": key["language"]}
        wanted = min(max_results + getattr(backend, "blocklist_slack", BLOCKLIST_SLACK), MAX_SEARCH_RESULTS)

        async def produce() -> Any:
            if callable(rich):
                response = await rich(query, wanted, **extra)
                return response.model_dump(mode="json")
            results = await backend.search(query, wanted, **extra)
            return [r.model_dump(mode="json") for r in results]

        return query, max_results, await self._through("search", key, produce)

    async def visit(self, url: str, *, goal: str | None = None, max_chars: int = 6000) -> Page:
        """The main text of ``url``, focused on ``goal`` and clipped to ``max_chars``.

        Raises:
            ToolError: ``refused``, ``http``, ``timeout``, ``content`` or ``not_found`` (see
                :func:`~medmis.tools._visit.fetch_page`).
        """
        url = _with_scheme(url.strip())
        goal = " ".join(goal.split()) if goal else ""
        max_chars = max(200, int(max_chars))
        # scheme and blocklist first: before the corpus (a user corpus may hold a mirror of a
        # blocked page) and before the store (a newly blocked page is refused even if recorded)
        self.policy.check_static(url)
        if self.local is not None:
            doc = self.local.document(url)
            if doc is not None:
                return page_from_document(doc, url, goal=goal or None, max_chars=max_chars)

        reader = self.reader

        async def produce() -> dict[str, Any]:
            if reader is not None:
                # the same policy as a direct fetch, before the URL leaves for the reader
                await self.policy.check(url)
                page = await reader.read(url, goal=goal or None, max_chars=max_chars)
            else:
                page = await fetch_page(
                    url,
                    client=self.client,
                    safety=self.policy,
                    goal=goal or None,
                    max_chars=max_chars,
                    max_bytes=self.max_bytes,
                    timeout=self.fetch_timeout,
                )
            return page.model_dump(mode="json")

        key: dict[str, Any] = {"url": url, "goal": goal or None, "max_chars": max_chars}
        if reader is not None:
            key["reader"] = reader.cache_id
        page = Page.model_validate(await self._through("visit", key, produce))
        self.blocklist.check(page.final_url)  # a recorded redirect may end on a blocked page
        return page

    async def _through(
        self, kind: str, key: dict[str, Any], produce: Callable[[], Awaitable[Any]]
    ) -> Any:
        if self.store is None:
            return await produce()
        return await self.store.through(kind, key, produce)

    async def aclose(self) -> None:
        """Close what this object created (HTTP clients, search and reader clients, an owned store)."""
        owned, self._owned = self._owned, []
        for close in reversed(owned):
            await close()

    async def __aenter__(self) -> WebTools:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


_BARE_HOST = re.compile(r"^[\w-]+(?:\.[\w-]+)*\.[a-z]{2,}(?::\d+)?(?:[/?#]|$)", re.IGNORECASE)


def _with_scheme(url: str) -> str:
    # models often write "www.example.org/page"; read it as https rather than refuse it
    return f"https://{url}" if "://" not in url and _BARE_HOST.match(url) else url


def _blocklist(spec: Blocklist | str | Path | Iterable[str] | None) -> Blocklist:
    if spec is None:
        return Blocklist.default()
    if isinstance(spec, Blocklist):
        return spec
    if isinstance(spec, (str, Path)):
        return Blocklist.from_file(spec)
    return Blocklist.default().extend(spec)


def make_tools(
    search: SearchName = "local",
    cache_mode: CacheMode = "live",
    cache_dir: str | Path | None = None,
    allow_hosts: Iterable[str] = (),
    *,
    visit: VisitName = "direct",
    corpus_dir: str | Path | None = None,
    ambient: str | Path | None = None,
    store: CallStore | None = None,
    blocklist: Blocklist | str | Path | Iterable[str] | None = None,
    resolve: Resolver | None = None,
    client: httpx.AsyncClient | None = None,
) -> WebTools:
    """Build the web tools a run or the CLI uses.

    Args:
        search: ``"local"``, ``"tavily"`` or ``"serper"``.
        visit: ``"direct"`` or ``"jina"``.
        cache_mode: ``live`` (no store unless ``store`` is given), ``record``, ``replay`` or
            ``refresh``.
        cache_dir: Store folder for the non-live modes (default ``.medmis-cache``).
        allow_hosts: ``--allow-host`` values.
        corpus_dir: Local corpus folder (``--corpus-dir``).
        ambient: Ambient-misinformation passages searched with the local corpus
            (``--search-ambient``); None: the clean web.
        store: An existing store to share (e.g. the runner's, also used for model calls);
            it is not closed by the tools.
        blocklist: A :class:`Blocklist`; a file path (its patterns are added to the defaults);
            or a list of extra patterns.
        resolve: DNS resolver override (tests).
        client: HTTP client override (tests).

    Raises:
        ToolError: ``kind="config"`` for a missing Tavily, Serper or Jina key (the message names
            the variable) or an unusable corpus folder.
    """
    own_store = False
    if store is None and cache_mode != "live":
        from ._store import RecordStore  # lazy: diskcache is only needed when caching

        store = RecordStore(cache_dir or ".medmis-cache", cache_mode)
        own_store = True
    try:
        return WebTools(
            search,
            visit=visit,
            corpus_dir=corpus_dir,
            ambient=ambient,
            allow_hosts=tuple(allow_hosts),
            blocklist=_blocklist(blocklist),
            store=store,
            client=client,
            resolve=resolve,
            own_store=own_store,
        )
    except BaseException:
        if own_store and store is not None and hasattr(store, "close"):
            store.close()
        raise
