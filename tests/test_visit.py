"""Page visits: guarded fetching (redirects, size, type), extraction and goal focusing."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import httpx
import pytest
import respx

from medmis.tools import CorpusDocument, ToolError, UrlPolicy
from medmis.tools._visit import (
    MAX_REDIRECTS,
    extract_html,
    fetch_page,
    focus_text,
    page_from_document,
    split_passages,
)

PAGES = Path(__file__).resolve().parents[1] / "fixtures" / "pages"
ARTICLE = (PAGES / "article_scurvy.html").read_bytes()
ARTICLE_ZH = (PAGES / "article_zh.html").read_text("utf-8")
PUBLIC = "93.184.216.34"


class FakeResolver:
    def __init__(self, table: dict[str, Sequence[str]]) -> None:
        self.table = table
        self.calls: list[str] = []

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        self.calls.append(host)
        if host not in self.table:
            raise socket.gaierror(socket.EAI_NONAME, "unknown host")
        return self.table[host]


@pytest.fixture
def policy() -> UrlPolicy:
    return UrlPolicy(
        resolve=FakeResolver(
            {
                "news.example": [PUBLIC],
                "cdn.example": [PUBLIC],
                "intranet.example": ["10.0.0.8"],
            }
        )
    )


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as c:
        yield c


def html(body: bytes | str, status: int = 200, **headers: str) -> httpx.Response:
    return httpx.Response(status, content=body, headers={"content-type": "text/html; charset=utf-8", **headers})


# -- fetching and extraction ---------------------------------------------------------------------------


async def test_fetch_article_extracts_main_text_and_metadata(policy: UrlPolicy, client: httpx.AsyncClient) -> None:
    with respx.mock:
        respx.get("https://news.example/scurvy").mock(return_value=html(ARTICLE))
        page = await fetch_page("https://news.example/scurvy", client=client, safety=policy)
    assert page.title == "Scurvy: causes, symptoms and treatment"
    assert page.final_url == "https://news.example/scurvy"
    assert "Treatment is vitamin C replacement" in page.text
    assert "prolyl and lysyl hydroxylase" in page.text
    for boilerplate in ("cookie", "Subscribe", "Privacy policy", "Advertisement", "All rights reserved"):
        assert boilerplate not in page.text
    assert page.metadata["sitename"] == "MedRef Clinical Library"
    assert page.metadata["date"] == "2024-03-12"
    assert "Amelia Hart" in page.metadata["author"]
    assert page.metadata["content_type"] == "text/html"
    assert page.truncated is False


async def test_goal_keeps_relevant_passages_in_document_order(policy: UrlPolicy, client: httpx.AsyncClient) -> None:
    with respx.mock:
        respx.get("https://news.example/scurvy").mock(return_value=html(ARTICLE))
        page = await fetch_page(
            "https://news.example/scurvy",
            client=client,
            safety=policy,
            goal="radiographs and plasma ascorbic acid level for diagnosis",
        )
    assert "plasma ascorbic acid level" in page.text
    assert "corkscrew hairs" not in page.text  # the symptoms paragraph is not about the goal
    assert "[…]" in page.text
    assert page.metadata["passages_kept"] < page.metadata["passages_total"]
    full_order = ["Humans cannot synthesise", "plasma ascorbic acid"]
    positions = [page.text.find(s) for s in full_order if s in page.text]
    assert positions == sorted(positions)


async def test_clipping_sets_truncated(policy: UrlPolicy, client: httpx.AsyncClient) -> None:
    with respx.mock:
        respx.get("https://news.example/scurvy").mock(return_value=html(ARTICLE))
        page = await fetch_page("https://news.example/scurvy", client=client, safety=policy, max_chars=400)
    assert len(page.text) <= 400
    assert page.truncated is True
    assert page.text.startswith("Scurvy")


async def test_charset_from_header_is_honoured(policy: UrlPolicy, client: httpx.AsyncClient) -> None:
    body = ARTICLE_ZH.replace('charset="utf-8"', 'charset="gb18030"').encode("gb18030")
    with respx.mock:
        respx.get("https://news.example/zh").mock(
            return_value=httpx.Response(200, content=body, headers={"content-type": "text/html; charset=GB18030"})
        )
        page = await fetch_page("https://news.example/zh", client=client, safety=policy, goal="治疗 剂量")
    assert page.title == "坏血病的病因、症状与治疗"
    assert "每日口服一克" in page.text
    assert "首页" not in page.text


async def test_plain_text_and_sniffed_html(policy: UrlPolicy, client: httpx.AsyncClient) -> None:
    with respx.mock:
        respx.get("https://news.example/notes.txt").mock(
            return_value=httpx.Response(200, text="Line one.\n\n  Line   two.\n", headers={"content-type": "text/plain"})
        )
        respx.get("https://news.example/untyped").mock(return_value=httpx.Response(200, content=ARTICLE))
        text_page = await fetch_page("https://news.example/notes.txt", client=client, safety=policy)
        sniffed = await fetch_page("https://news.example/untyped", client=client, safety=policy)
    assert text_page.text == "Line one.\nLine two."
    assert text_page.title == ""
    assert "Treatment is vitamin C replacement" in sniffed.text
    assert sniffed.metadata["content_type"] == "unknown"


@pytest.mark.parametrize("mime", ["application/pdf", "image/png", "application/json", "video/mp4"])
async def test_non_html_content_is_refused(mime: str, policy: UrlPolicy, client: httpx.AsyncClient) -> None:
    with respx.mock:
        respx.get("https://news.example/file").mock(
            return_value=httpx.Response(200, content=b"%PDF-1.7 ...", headers={"content-type": mime})
        )
        with pytest.raises(ToolError) as err:
            await fetch_page("https://news.example/file", client=client, safety=policy)
    assert err.value.kind == "content"
    assert mime in err.value.message


async def test_oversize_body_by_content_length(policy: UrlPolicy, client: httpx.AsyncClient) -> None:
    with respx.mock:
        respx.get("https://news.example/big").mock(return_value=html(b"<html>" + b"x" * 5000))
        with pytest.raises(ToolError) as err:
            await fetch_page("https://news.example/big", client=client, safety=policy, max_bytes=1000)
    assert err.value.kind == "content" and "too large" in err.value.message


async def test_oversize_streamed_body_without_length(policy: UrlPolicy, client: httpx.AsyncClient) -> None:
    sent: list[int] = []

    async def endless() -> AsyncIterator[bytes]:
        for i in range(10_000):
            sent.append(i)
            yield b"<p>" + b"spam " * 200 + b"</p>"

    with respx.mock:
        respx.get("https://news.example/stream").mock(
            side_effect=lambda request: httpx.Response(200, headers={"content-type": "text/html"}, content=endless())
        )
        with pytest.raises(ToolError) as err:
            await fetch_page("https://news.example/stream", client=client, safety=policy, max_bytes=50_000)
    assert err.value.kind == "content"
    assert len(sent) < 100  # reading stopped at the cap


@pytest.mark.parametrize(("status", "kind"), [(404, "http"), (500, "http"), (403, "http")])
async def test_http_errors(status: int, kind: str, policy: UrlPolicy, client: httpx.AsyncClient) -> None:
    with respx.mock:
        respx.get("https://news.example/x").mock(return_value=html("nope", status=status))
        with pytest.raises(ToolError) as err:
            await fetch_page("https://news.example/x", client=client, safety=policy)
    assert err.value.kind == kind and str(status) in err.value.message


async def test_network_failures(policy: UrlPolicy, client: httpx.AsyncClient) -> None:
    with respx.mock:
        respx.get("https://news.example/down").mock(side_effect=httpx.ConnectError("refused"))
        respx.get("https://news.example/slow").mock(side_effect=httpx.ReadTimeout("slow"))
        with pytest.raises(ToolError) as down:
            await fetch_page("https://news.example/down", client=client, safety=policy)
        with pytest.raises(ToolError) as slow:
            await fetch_page("https://news.example/slow", client=client, safety=policy)
    assert down.value.kind == "http"
    assert slow.value.kind == "timeout"


async def test_overall_deadline(policy: UrlPolicy, client: httpx.AsyncClient) -> None:
    async def stall(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(5)
        return html(ARTICLE)

    with respx.mock:
        respx.get("https://news.example/stall").mock(side_effect=stall)
        with pytest.raises(ToolError) as err:
            await fetch_page("https://news.example/stall", client=client, safety=policy, timeout=0.05)
    assert err.value.kind == "timeout"


async def test_empty_page_is_a_content_error(policy: UrlPolicy, client: httpx.AsyncClient) -> None:
    with respx.mock:
        respx.get("https://news.example/app").mock(return_value=html("<html><body><div id='root'></div></body></html>"))
        with pytest.raises(ToolError) as err:
            await fetch_page("https://news.example/app", client=client, safety=policy)
    assert err.value.kind == "content" and "JavaScript" in err.value.message


# -- redirects ---------------------------------------------------------------------------------------------


async def test_redirects_are_followed_and_reported(policy: UrlPolicy, client: httpx.AsyncClient) -> None:
    with respx.mock:
        respx.get("http://news.example/old").mock(return_value=httpx.Response(301, headers={"location": "https://news.example/new"}))
        respx.get("https://news.example/new").mock(return_value=httpx.Response(302, headers={"location": "/final"}))
        respx.get("https://news.example/final").mock(return_value=html(ARTICLE))
        page = await fetch_page("http://news.example/old", client=client, safety=policy)
    assert page.url == "http://news.example/old"
    assert page.final_url == "https://news.example/final"


@pytest.mark.parametrize(
    "location",
    [
        "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
        "http://127.0.0.1:8080/admin",
        "http://[::ffff:7f00:1]/",
        "http://intranet.example/secrets",
        "file:///etc/passwd",
    ],
)
async def test_redirect_into_private_address_is_refused(location: str, policy: UrlPolicy, client: httpx.AsyncClient) -> None:
    with respx.mock(assert_all_called=False) as router:
        router.get("https://news.example/jump").mock(return_value=httpx.Response(302, headers={"location": location}))
        inner = router.route(host__in=("169.254.169.254", "127.0.0.1", "::ffff:7f00:1", "intranet.example"))
        with pytest.raises(ToolError) as err:
            await fetch_page("https://news.example/jump", client=client, safety=policy)
        assert not inner.called  # refused before any connection
    assert err.value.kind == "refused"


async def test_redirect_to_blocklisted_page_is_refused(policy: UrlPolicy, client: httpx.AsyncClient) -> None:
    with respx.mock(assert_all_called=False) as router:
        router.get("https://news.example/paper").mock(
            return_value=httpx.Response(302, headers={"location": "https://arxiv.org/abs/2606.12291"})
        )
        arxiv = router.route(host="arxiv.org")
        with pytest.raises(ToolError) as err:
            await fetch_page("https://news.example/paper", client=client, safety=policy)
        assert not arxiv.called
    assert err.value.kind == "refused" and "blocklist" in err.value.message


def _chain(router: respx.MockRouter, n: int) -> None:
    for i in range(n):
        router.get(f"https://news.example/r{i}").mock(
            return_value=httpx.Response(302, headers={"location": f"https://news.example/r{i + 1}"})
        )
    router.get(f"https://news.example/r{n}").mock(return_value=html(ARTICLE))


async def test_redirect_chain_limit(policy: UrlPolicy, client: httpx.AsyncClient) -> None:
    with respx.mock as router:
        _chain(router, MAX_REDIRECTS)
        page = await fetch_page("https://news.example/r0", client=client, safety=policy)
    assert page.final_url == f"https://news.example/r{MAX_REDIRECTS}"
    with respx.mock(assert_all_called=False) as router:
        _chain(router, MAX_REDIRECTS + 1)
        with pytest.raises(ToolError) as err:
            await fetch_page("https://news.example/r0", client=client, safety=policy)
    assert err.value.kind == "http" and "redirects more than 5 times" in err.value.message


async def test_redirect_loop_stops(policy: UrlPolicy, client: httpx.AsyncClient) -> None:
    with respx.mock:
        route = respx.get("https://news.example/loop").mock(
            return_value=httpx.Response(302, headers={"location": "https://news.example/loop"})
        )
        with pytest.raises(ToolError):
            await fetch_page("https://news.example/loop", client=client, safety=policy)
    assert route.call_count == MAX_REDIRECTS + 1


# -- extraction benchmark and focusing -----------------------------------------------------------------


def _big_page() -> str:
    """~200 KB: heavy navigation, sidebars and comments around a real article."""
    nav = "".join(f'<li><a href="/topic/{i}">Topic {i} overview and guide</a></li>' for i in range(900))
    cards = "".join(
        f'<div class="card"><a href="/promo/{i}">Promotion {i}: save on premium membership today</a></div>'
        for i in range(1400)
    )
    article = "".join(
        f"<p>Section {i}: hyperkalemia management step {i} involves checking the ECG, giving calcium "
        f"gluconate when there are ECG changes, and shifting potassium with insulin and glucose.</p>"
        for i in range(40)
    )
    return (
        "<html><head><title>Hyperkalemia management</title></head><body>"
        f"<header><nav><ul>{nav}</ul></nav></header><main><article><h1>Hyperkalemia management</h1>"
        f"{article}</article><aside>{cards}</aside></main><footer>© 2024 Example Health</footer></body></html>"
    )


def test_extraction_benchmark_large_page() -> None:
    page = _big_page()
    assert len(page) > 190_000
    start = time.perf_counter()
    extracted = extract_html(page, "https://news.example/hk")
    elapsed = time.perf_counter() - start
    assert elapsed < 5.0, f"extraction took {elapsed:.2f} s"
    assert "Section 39: hyperkalemia management" in extracted.text
    assert "Promotion" not in extracted.text and "Topic 5 overview" not in extracted.text
    assert extracted.title == "Hyperkalemia management"


def test_fixture_pages_extract_cleanly() -> None:
    for path in sorted(PAGES.glob("*.html")):
        extracted = extract_html(path.read_bytes(), f"https://medref.example/{path.stem}")
        assert extracted.title, path.name
        assert len(extracted.text) > 100, path.name
        assert "©" not in extracted.text and "版权所有" not in extracted.text, path.name


def test_focus_without_goal_only_clips() -> None:
    text = "First paragraph.\nSecond paragraph."
    assert focus_text(text, None, 100) == (text, False, {})
    assert focus_text(text, "  ", 100) == (text, False, {})
    clipped, truncated, _ = focus_text("word " * 100, None, 52)
    assert truncated and len(clipped) <= 52 and not clipped.endswith(" ")


def test_focus_with_unmatched_goal_returns_page() -> None:
    text = "Gout is urate arthritis.\nColchicine helps."
    assert focus_text(text, "zebra migration", 1000) == (text, False, {"goal_matched": False})


def test_focus_respects_budget_and_marks_dropped_relevant_passages() -> None:
    passages = [f"Potassium fact number {i} " + "detail " * 30 for i in range(10)]
    text = "\n".join(["Unrelated intro.", *passages])
    focused, truncated, info = focus_text(text, "potassium fact", 700)
    assert len(focused) <= 700
    assert truncated is True
    assert info["passages_kept"] < info["passages_total"]
    assert focused.startswith("[…]")  # the intro was left out


def test_long_blocks_are_split_into_passages() -> None:
    block = " ".join(f"Sentence {i} is here." for i in range(200))
    passages = split_passages(block)
    assert len(passages) > 3
    assert all(len(p) <= 700 for p in passages)
    zh = "。".join(f"第{i}句话在这里" for i in range(200)) + "。"
    assert len(split_passages(zh)) > 3


def test_page_from_document_focuses_like_a_visit() -> None:
    doc = CorpusDocument(
        "gout", "Gout", "https://medref.example/articles/gout",
        "Gout is an inflammatory arthritis.\nColchicine and NSAIDs treat acute flares.\nAllopurinol lowers urate long term.",
    )
    page = page_from_document(doc, "http://medref.example/articles/gout/", goal="acute flare treatment", max_chars=500)
    assert page.final_url == doc.url and page.url.startswith("http://")
    assert "Colchicine" in page.text and "Allopurinol" not in page.text
    assert page.metadata["source"] == "local corpus" and page.metadata["id"] == "gout"
