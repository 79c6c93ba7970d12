"""Web search through Tavily's ``/search`` endpoint (async SDK client).

Failures the model should see (bad key, rate limit, timeout) become
:class:`~medmis.tools._types.ToolError`; a missing key is refused up front because the Tavily
SDK would otherwise fall back silently to its keyless mode.
"""

from __future__ import annotations

import json
import os
from typing import Any

import httpx

from ._bounded import BoundedAsyncClient, ResponseTooLargeError
from ._redact import remember_url, scrub_url
from ._text import clip
from ._types import SearchResult, ToolError

TAVILY_DEFAULT_BASE_URL = "https://api.tavily.com"


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

        remember_url(self.base_url)
        self.timeout = timeout
        self.search_depth = search_depth
        self.snippet_chars = snippet_chars
        self._own_http: httpx.AsyncClient | None = None
        if client is None:
            # the SDK's own client bounds each read only: this one bounds the whole request
            # and caps the reply (the SDK's proxy variables are honoured as it does)
            proxies = {f"{scheme}://": httpx.AsyncHTTPTransport(proxy=url)
                       for scheme, name in (("http", "TAVILY_HTTP_PROXY"), ("https", "TAVILY_HTTPS_PROXY"))
                       if (url := os.environ.get(name))}
            client = self._own_http = BoundedAsyncClient(deadline_s=timeout, timeout=timeout,
                                                         mounts=proxies or None)
        self._client = AsyncTavilyClient(api_key=key, api_base_url=self.base_url, client=client)

    @property
    def cache_id(self) -> str:
        parts = ["tavily"]
        if self.base_url != TAVILY_DEFAULT_BASE_URL:
            parts.append(scrub_url(self.base_url))  # credentials never key the store
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
        except ResponseTooLargeError as exc:
            raise ToolError(f"web search failed: {exc}", kind="content") from exc
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
        if self._own_http is not None:
            await self._own_http.aclose()


def _detail(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    return f": {clip(text, 200)}" if text else ""
