"""Read a web page through Jina Reader (``r.jina.ai``), as the paper's search agent did.

The reference harness (AI-in-Health/MedMisBench, ``medmisbench_tool_harness_eval.ipynb``,
``JinaVisitClient``) sends ``GET {reader}/{url}`` with a bearer key and, when the model states a
goal, asks Jina's ReaderLM-v2 to keep only what serves it (``x-respond-with: readerlm-v2`` and
``x-instruction: Extract only the content most relevant to this goal: <goal>``). It then
normalises line breaks and keeps the first ``max(500, max_chars)`` characters. The same is
done here; the reader's text is the page text the model sees.

The target URL is checked by :class:`~medmis.tools._safety.UrlPolicy` *before* it is handed to
Jina (see ``medmis.tools._web``): the contamination blocklist and the address rules apply to
what the agent asks Jina to read exactly as to a direct fetch.
"""

from __future__ import annotations

import json
import os
import re

import httpx

from ._bounded import ResponseTooLargeError
from ._lazy_client import LazyClient
from ._redact import remember_url, scrub_url
from ._types import Page, ToolError

JINA_DEFAULT_BASE_URL = "https://r.jina.ai/"
GOAL_INSTRUCTION = "Extract only the content most relevant to this goal: "
GOAL_ENGINE = "readerlm-v2"
# the reference never returns less than this many characters, whatever the model asks for
MIN_CHARS = 500
_BLANK_RUNS = re.compile(r"\n{3,}")
_HEADER = re.compile(r"^(Title|URL Source):[ \t]*(.*)$", re.MULTILINE)


def clean_reader_text(text: str) -> str:
    """Line endings unified, runs of blank lines cut to one, outer whitespace stripped."""
    return _BLANK_RUNS.sub("\n\n", text.replace("\r\n", "\n")).strip()


class JinaReader:
    """Page reading through Jina Reader.

    Args:
        api_key: Jina key; default ``JINA_API_KEY``.
        base_url: Reader root for a gateway, proxy or local test server; default
            ``JINA_BASE_URL``, else ``https://r.jina.ai/``.
        timeout: Seconds per request (the reference allows 30).
        client: An ``httpx.AsyncClient`` to send requests with (tests, custom transports);
            by default one is created and closed by :meth:`aclose`.

    Raises:
        ToolError: ``kind="config"`` when no API key is configured.
    """

    def __init__(
        self,
        api_key: str | None = None,
        *,
        base_url: str | None = None,
        timeout: float = 30.0,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        key = (api_key if api_key is not None else os.environ.get("JINA_API_KEY", "")).strip()
        if not key:
            raise ToolError(
                "Jina Reader visits need an API key: set JINA_API_KEY (or use --visit direct)",
                kind="config",
            )
        base = (base_url or os.environ.get("JINA_BASE_URL") or "").strip()
        self.base_url = base.rstrip("/") + "/" if base else JINA_DEFAULT_BASE_URL
        remember_url(self.base_url)
        self.timeout = timeout
        self._key = key
        self._http = LazyClient(client, timeout=timeout)

    @property
    def cache_id(self) -> str:
        return "jina" if self.base_url == JINA_DEFAULT_BASE_URL else f"jina@{scrub_url(self.base_url)}"

    def request_headers(self, goal: str | None) -> dict[str, str]:
        """The headers of a read: the key, and the goal as ReaderLM's instruction."""
        headers = {"Authorization": f"Bearer {self._key}"}
        goal = (goal or "").strip()
        if goal:
            headers["x-respond-with"] = GOAL_ENGINE
            headers["x-instruction"] = f"{GOAL_INSTRUCTION}{goal}"
        return headers

    async def read(self, url: str, *, goal: str | None = None, max_chars: int = 8000) -> Page:
        """Read ``url`` (already checked by the URL policy) through the reader.

        Args:
            url: Absolute http(s) URL of the page.
            goal: What the model is looking for; becomes the reader's instruction.
            max_chars: Characters kept (never fewer than 500).

        Raises:
            ToolError: ``http`` (rejected key, exhausted credits, rate limit, the reader could
                not load the page, unreachable reader), ``timeout``, ``content`` (no text).
        """
        try:
            response = await self._http.get().get(
                f"{self.base_url}{url}", headers=self.request_headers(goal), timeout=self.timeout
            )
        except ResponseTooLargeError as exc:
            raise ToolError(f"reading {url} failed: {exc}", kind="content") from exc
        except httpx.TimeoutException as exc:
            raise ToolError(f"{url} did not load within {self.timeout:g} s", kind="timeout") from exc
        except httpx.TransportError as exc:
            raise ToolError(
                f"reading {url} failed: could not reach Jina Reader ({type(exc).__name__})",
                kind="http",
            ) from exc
        if response.status_code >= 400:
            raise _status_error(response, url)
        text = clean_reader_text(response.text)
        if not text:
            raise ToolError(f"{url} has no readable text (Jina Reader returned nothing)", kind="content")
        limit = max(MIN_CHARS, int(max_chars))
        header = dict((m.group(1), m.group(2).strip()) for m in _HEADER.finditer(text[:2000]))
        source = header.get("URL Source", "")
        return Page(
            url=url,
            final_url=source if source.startswith(("http://", "https://")) else url,
            title=header.get("Title", ""),
            text=text[:limit],
            metadata={"reader": "jina", "goal_instruction": bool((goal or "").strip()),
                      "reader_chars": len(text)},
            truncated=len(text) > limit,
        )

    async def aclose(self) -> None:
        await self._http.aclose()


def _status_error(response: httpx.Response, url: str) -> ToolError:
    status = response.status_code
    detail = _message(response)
    if status in (401, 403):
        text = f"page reading unavailable: Jina Reader rejected the API key (HTTP {status}){detail}"
    elif status == 402:
        text = f"page reading unavailable: Jina Reader credits are exhausted (HTTP 402){detail}"
    elif status == 429:
        text = (
            f"page reading unavailable: Jina Reader rate limit exceeded (HTTP 429){detail}; "
            "wait before reading again or use the search results"
        )
    elif status < 500:
        text = f"Jina Reader could not read {url} (HTTP {status}){detail}"
    else:
        text = f"reading {url} failed: Jina Reader answered HTTP {status}{detail}"
    return ToolError(text, kind="http")


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return ""
    if not isinstance(body, dict):
        return ""
    message = body.get("readableMessage") or body.get("message")
    if not message:
        return ""
    text = " ".join(str(message).split())
    return f": {text[:197] + '...' if len(text) > 200 else text}"
