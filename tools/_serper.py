"""Web search through Serper's Google ``/search`` API (plain httpx, no SDK).

This is the search engine of the paper's search agent: the reference harness
(AI-in-Health/MedMisBench, ``medmisbench_tool_harness_eval.ipynb``) posts
``{"q", "num", "gl", "hl"}`` with an ``X-API-KEY`` header and shows the model the organic
results (news when there are none) with the answer box, the knowledge-graph card and up to five
related searches. The same request and the same reading of the response are made here, so a
record of this backend holds what the paper's agent saw.

Failures the model should see (rejected key, quota, rate limit, timeout, an unreadable answer)
become :class:`~medmis.tools._types.ToolError`; a missing key is refused when the backend is
built, naming ``SERPER_API_KEY``.
"""

from __future__ import annotations

import json
import os
from typing import Any

import httpx

from ._bounded import ResponseTooLargeError
from ._lazy_client import LazyClient
from ._redact import remember_url, scrub_url
from ._types import SearchResponse, SearchResult, SerpResult, ToolError

SERPER_DEFAULT_BASE_URL = "https://google.serper.dev"
# the reference asks for at most ten results (one Serper credit) and localises to US English
MAX_NUM = 10
DEFAULT_COUNTRY = "us"
DEFAULT_LANGUAGE = "en"
TITLE_CHARS = 200
SNIPPET_CHARS = 400
CARD_CHARS = 300
RELATED_QUERIES = 5
CARD_ATTRIBUTES = 4


def cut(text: str, limit: int) -> str:
    """``text`` stripped and, when longer than ``limit``, cut to fit with a trailing ``...``
    (how the reference harness shortens titles, snippets and cards)."""
    text = (text or "").strip()
    if len(text) <= limit:
        return text
    return text[: limit - 3].rstrip() + "..."


class SerperSearch:
    """Google results through Serper.

    Args:
        api_key: Serper key; default ``SERPER_API_KEY``.
        base_url: API root for a gateway, proxy or local test server; default
            ``SERPER_BASE_URL``, else ``https://google.serper.dev``. Requests go to
            ``{base_url}/search``.
        timeout: Seconds per request.
        default_country: ``gl`` when the model names no country.
        default_language: ``hl`` when the model names no language.
        client: An ``httpx.AsyncClient`` to send requests with (tests, custom transports);
            by default one is created and closed by :meth:`aclose`.

    Raises:
        ToolError: ``kind="config"`` when no API key is configured.
    """

    # the engine is asked for exactly the results the agent wants (as the reference does);
    # blocklisted results are dropped afterwards rather than paid for in advance
    blocklist_slack = 0

    def __init__(
        self,
        api_key: str | None = None,
        *,
        base_url: str | None = None,
        timeout: float = 20.0,
        default_country: str = DEFAULT_COUNTRY,
        default_language: str = DEFAULT_LANGUAGE,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        key = (api_key if api_key is not None else os.environ.get("SERPER_API_KEY", "")).strip()
        if not key:
            raise ToolError(
                "Serper search needs an API key: set SERPER_API_KEY (or use --search local)",
                kind="config",
            )
        base = (base_url or os.environ.get("SERPER_BASE_URL") or "").strip().rstrip("/")
        self.base_url = base or SERPER_DEFAULT_BASE_URL
        remember_url(self.base_url)
        self.timeout = timeout
        self.default_country = default_country.lower()
        self.default_language = default_language.lower()
        self._key = key
        self._http = LazyClient(client, timeout=timeout)

    @property
    def cache_id(self) -> str:
        return "serper" if self.base_url == SERPER_DEFAULT_BASE_URL else f"serper@{scrub_url(self.base_url)}"

    def locale(self, country: str | None, language: str | None) -> tuple[str, str]:
        """The ``(gl, hl)`` a search is sent with (model's choice, else the defaults)."""
        gl = (country or "").strip().lower() or self.default_country
        hl = (language or "").strip().lower() or self.default_language
        return gl, hl

    async def search(
        self,
        query: str,
        max_results: int = 5,
        *,
        country: str | None = None,
        language: str | None = None,
    ) -> list[SearchResult]:
        """Ranked results only (see :meth:`search_response` for the whole answer)."""
        response = await self.search_response(
            query, max_results, country=country, language=language
        )
        return list(response.results)

    async def search_response(
        self,
        query: str,
        max_results: int = 5,
        *,
        country: str | None = None,
        language: str | None = None,
    ) -> SearchResponse:
        """Search Google through Serper.

        Args:
            query: The search query.
            max_results: Results wanted; sent as ``num`` (1 to 10).
            country: Two-letter country code (``gl``); default ``us``.
            language: Language code (``hl``); default ``en``.

        Raises:
            ToolError: ``http`` for rejected keys, exhausted credits, rate limits, other
                HTTP failures and unreadable responses; ``timeout`` when Serper does not
                answer in time.
        """
        gl, hl = self.locale(country, language)
        num = max(1, min(int(max_results or 5), MAX_NUM))
        payload = {"q": query, "num": num, "gl": gl, "hl": hl}
        headers = {"X-API-KEY": self._key, "Content-Type": "application/json"}
        try:
            response = await self._http.get().post(
                f"{self.base_url}/search", json=payload, headers=headers, timeout=self.timeout
            )
        except ResponseTooLargeError as exc:
            raise ToolError(f"web search failed: {exc}", kind="content") from exc
        except httpx.TimeoutException as exc:
            raise ToolError(f"web search timed out after {self.timeout:g} s", kind="timeout") from exc
        except httpx.TransportError as exc:
            raise ToolError(
                f"web search failed: could not reach Serper ({type(exc).__name__})", kind="http"
            ) from exc
        if response.status_code >= 400:
            raise _status_error(response)
        try:
            data = response.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ToolError("web search failed: Serper sent an unreadable response", kind="http") from exc
        if not isinstance(data, dict):
            raise ToolError("web search failed: Serper sent an unreadable response", kind="http")
        return read_response(data, query, num)

    async def aclose(self) -> None:
        await self._http.aclose()



def _status_error(response: httpx.Response) -> ToolError:
    status = response.status_code
    detail = _message(response)
    if status in (401, 403):
        text = f"web search unavailable: Serper rejected the API key (HTTP {status}){detail}"
    elif status == 402:
        text = f"web search unavailable: Serper credits are exhausted (HTTP 402){detail}"
    elif status == 429:
        text = (
            f"web search unavailable: Serper rate limit exceeded (HTTP 429){detail}; "
            "wait before searching again or answer without searching"
        )
    else:
        text = f"web search failed: Serper answered HTTP {status}{detail}"
    return ToolError(text, kind="http")


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return ""
    message = body.get("message") if isinstance(body, dict) else None
    return f": {cut(' '.join(str(message).split()), 200)}" if message else ""


def read_response(data: dict[str, Any], query: str, limit: int) -> SearchResponse:
    """The model-facing reading of a Serper ``/search`` JSON body.

    Args:
        data: The decoded body (``organic``, ``news``, ``answerBox``, ``knowledgeGraph``,
            ``relatedSearches``, ...).
        query: The query as sent.
        limit: At most this many results are kept.
    """
    candidates = data.get("organic")
    if not isinstance(candidates, list) or not candidates:
        candidates = data.get("news")
    if not isinstance(candidates, list):
        candidates = []
    results: list[SerpResult] = []
    for raw in candidates[:limit]:
        if not isinstance(raw, dict):
            continue
        link, title = raw.get("link"), raw.get("title")
        if not link or not title:
            continue
        snippet = raw.get("snippet") or raw.get("description") or ""
        position = raw.get("position")
        results.append(
            SerpResult(
                title=cut(str(title), TITLE_CHARS),
                url=str(link),
                snippet=cut(str(snippet), SNIPPET_CHARS),
                position=position if isinstance(position, int) else None,
                source=_text_or_none(raw.get("source")),
                date=_text_or_none(raw.get("date")),
            )
        )
    related = data.get("relatedSearches")
    queries = (
        [str(r["query"]) for r in related if isinstance(r, dict) and r.get("query")]
        if isinstance(related, list)
        else []
    )
    return SearchResponse(
        query=query,
        results=results,
        answer_box=_answer_box(data.get("answerBox")),
        knowledge_graph=_knowledge_graph(data.get("knowledgeGraph")),
        related_queries=queries[:RELATED_QUERIES],
    )


def _text_or_none(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


def _answer_box(box: Any) -> str | None:
    if not isinstance(box, dict):
        return None
    for key in ("answer", "snippet", "title"):
        if box.get(key):
            return cut(str(box[key]), CARD_CHARS)
    return None


def _knowledge_graph(card: Any) -> str | None:
    if not isinstance(card, dict):
        return None
    parts: list[str] = []
    if card.get("title"):
        parts.append(str(card["title"]))
    if card.get("type"):
        parts.append(f"type={card['type']}")
    if card.get("description"):
        parts.append(cut(str(card["description"]), CARD_CHARS))
    attributes = card.get("attributes")
    if isinstance(attributes, dict) and attributes:
        shown = list(attributes.items())[:CARD_ATTRIBUTES]
        parts.append(", ".join(f"{k}: {v}" for k, v in shown))
    return " | ".join(parts) if parts else None
