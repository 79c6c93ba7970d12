"""visit_web against hostile servers: odd redirects, binary bodies, bombs and dense pages.

Each case reproduces a failure found by adversarial testing; the fetch must end in a
``ToolError`` the model can read (never an uncaught exception) and within bounded time and
memory.
"""

from __future__ import annotations

import gzip
import time
import tracemalloc
import zlib
from collections.abc import AsyncIterator

import httpx
import pytest
import respx
from test_visit import PUBLIC, FakeResolver

from medmis.tools import ToolError, UrlPolicy, address_problem, fetch_page

ARTICLE = (
    "<html><head><title>Scurvy</title></head><body><article><h1>Scurvy</h1>"
    + "<p>Scurvy is caused by a lack of vitamin C in the diet over several months.</p>" * 20
    + "</article></body></html>"
)


@pytest.fixture
def policy() -> UrlPolicy:
    return UrlPolicy(resolve=FakeResolver({"news.example": [PUBLIC]}))


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as c:
        yield c


@pytest.mark.parametrize(
    "location",
    ["data:text/html,<p>hi</p>", "javascript:alert(1)", "data:text/html;base64,PGgxPmhpPC9oMT4=",
     "file:///etc/passwd", "ftp://news.example/x"],
)
async def test_redirect_to_a_non_http_url_is_a_refusal(
    location: str, policy: UrlPolicy, client: httpx.AsyncClient
) -> None:
    with respx.mock:
        respx.get("https://news.example/r").mock(
            return_value=httpx.Response(302, headers={"location": location})
        )
        with pytest.raises(ToolError) as err:
            await fetch_page("https://news.example/r", client=client, safety=policy)
    assert err.value.kind == "refused"


@pytest.mark.parametrize(
    ("body", "what"),
    [
        (b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj", "PDF"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "PNG"),
        (b"PK\x03\x04\x14\x00\x06\x00", "ZIP"),
        (bytes(range(256)) * 8, "binary"),
    ],
)
@pytest.mark.parametrize("content_type", [None, "text/plain"])
async def test_binary_bodies_without_an_honest_type_are_refused(
    body: bytes, what: str, content_type: str | None, policy: UrlPolicy, client: httpx.AsyncClient
) -> None:
    headers = {"content-type": content_type} if content_type else {}
    with respx.mock:
        respx.get("https://news.example/f").mock(return_value=httpx.Response(200, content=body, headers=headers))
        with pytest.raises(ToolError, match="not a web page") as err:
            await fetch_page("https://news.example/f", client=client, safety=policy)
    assert err.value.kind == "content"


async def test_plain_text_in_other_scripts_is_not_mistaken_for_binary(
    policy: UrlPolicy, client: httpx.AsyncClient
) -> None:
    text = ("坏血病是由于饮食中长期缺乏维生素C引起的。\n" * 50).encode("utf-8")
    with respx.mock:
        respx.get("https://news.example/zh.txt").mock(
            return_value=httpx.Response(200, content=text, headers={"content-type": "text/plain; charset=utf-8"})
        )
        page = await fetch_page("https://news.example/zh.txt", client=client, safety=policy)
    assert "维生素C" in page.text


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
async def test_compressed_pages_are_read(encoding: str, policy: UrlPolicy, client: httpx.AsyncClient) -> None:
    raw = ARTICLE.encode()
    packed = gzip.compress(raw) if encoding == "gzip" else zlib.compress(raw)
    with respx.mock:
        route = respx.get("https://news.example/a").mock(return_value=httpx.Response(
            200, content=packed, headers={"content-type": "text/html", "content-encoding": encoding}))
        page = await fetch_page("https://news.example/a", client=client, safety=policy)
    assert "vitamin C" in page.text
    assert route.calls.last.request.headers["accept-encoding"] == "gzip, deflate"


async def test_gzip_bomb_is_stopped_at_the_cap_without_inflating(policy: UrlPolicy) -> None:
    bomb = gzip.compress(b"<html><body>" + b"\0" * 200_000_000, compresslevel=9)  # ~200 KB
    assert len(bomb) < 400_000

    def serve(request: httpx.Request) -> httpx.Response:
        # a raw stream, as from the network (respx would decode the whole body up front)
        return httpx.Response(200, stream=httpx.ByteStream(bomb),
                              headers={"content-type": "text/html", "content-encoding": "gzip"})

    async with httpx.AsyncClient(transport=httpx.MockTransport(serve)) as bomb_client:
        tracemalloc.start()
        try:
            with pytest.raises(ToolError, match="too large") as err:
                await fetch_page("https://news.example/bomb", client=bomb_client, safety=policy,
                                 max_bytes=2_000_000)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert err.value.kind == "content"
    assert peak < 30_000_000, f"peak {peak / 1e6:.0f} MB while reading a gzip bomb"


async def test_unknown_content_encoding_is_refused(policy: UrlPolicy, client: httpx.AsyncClient) -> None:
    with respx.mock:
        respx.get("https://news.example/br").mock(return_value=httpx.Response(
            200, content=b"\x1b\x00\x00", headers={"content-type": "text/html", "content-encoding": "br"}))
        with pytest.raises(ToolError, match="content encoding") as err:
            await fetch_page("https://news.example/br", client=client, safety=policy)
    assert err.value.kind == "content"


def dense_page(size: int) -> bytes:
    cell = "<td><span class='a'><b>12.5</b> mg/dL <i>ref</i></span></td>"
    row = "<tr>" + cell * 20 + "</tr>\n"
    rows = size // len(row) + 1
    return ("<html><body><table>" + row * rows + "</table></body></html>").encode()[:size]


async def test_dense_two_megabyte_page_is_read_within_budget(
    policy: UrlPolicy, client: httpx.AsyncClient
) -> None:
    body = dense_page(2_000_000)
    with respx.mock:
        respx.get("https://news.example/dense").mock(
            return_value=httpx.Response(200, content=body, headers={"content-type": "text/html"}))
        # no wall-clock assertion here (a loaded CI machine is slow); the time is measured in
        # `python -m medmis.experiments.bench`, the cap is what this test checks
        page = await fetch_page("https://news.example/dense", client=client, safety=policy,
                                max_bytes=3_000_000, extract_timeout=120)
    assert page.truncated and page.metadata["extract_limited_to_bytes"] == 512_000
    assert "mg/dL" in page.text


async def test_extraction_deadline_is_a_tool_error(
    policy: UrlPolicy, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    import medmis.tools._visit as visit

    def slow(*args: object) -> object:
        time.sleep(0.5)
        raise AssertionError("should have been abandoned")

    monkeypatch.setattr(visit, "extract_document", slow)
    with respx.mock:
        respx.get("https://news.example/a").mock(
            return_value=httpx.Response(200, content=ARTICLE.encode(), headers={"content-type": "text/html"}))
        with pytest.raises(ToolError, match="could not be read within") as err:
            await fetch_page("https://news.example/a", client=client, safety=policy, extract_timeout=0.05)
    assert err.value.kind == "content"


@pytest.mark.parametrize("address", ["fec0::1", "fec0:1234::8", "feff:ffff::1"])
def test_site_local_ipv6_is_refused(address: str) -> None:
    assert address_problem(address) == "site-local"
