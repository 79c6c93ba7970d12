"""WebTools and make_tools: the Toolset defenders use, with blocklist, safety, store and CLI."""

from __future__ import annotations

import json
import socket
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx

from medmis.tools import (
    Blocklist,
    CorpusDocument,
    LocalSearch,
    Page,
    ReplayMissError,
    SearchResult,
    ToolError,
    Toolset,
    WebTools,
    cache_probe,
    make_tools,
    tools_search,
    tools_visit,
)

PAGES = Path(__file__).resolve().parents[1] / "fixtures" / "pages"
ARTICLE = (PAGES / "article_scurvy.html").read_bytes()
PUBLIC = "93.184.216.34"

ROWS = [
    {
        "id": "scurvy",
        "title": "Scurvy",
        "url": "https://medref.example/articles/scurvy",
        "text": "Scurvy is caused by a lack of vitamin C.\nBleeding gums are typical.\n"
        "Treatment is oral vitamin C replacement.",
    },
    {
        "id": "rickets",
        "title": "Rickets",
        "url": "https://medref.example/articles/rickets",
        "text": "Rickets is caused by vitamin D deficiency in children.",
    },
    {
        "id": "huaixuebing",
        "title": "坏血病",
        "url": "https://medref.example/articles/huaixuebing",
        "text": "坏血病是由于缺乏维生素C引起的。治疗方法是补充维生素C。",
    },
]


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "documents.jsonl").write_text(
        "\n".join(json.dumps(r, ensure_ascii=False) for r in ROWS) + "\n", "utf-8"
    )
    return folder


class FakeResolver:
    def __init__(self, table: dict[str, Sequence[str]] | None = None) -> None:
        self.table = table or {"news.example": [PUBLIC]}
        self.calls: list[str] = []

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        self.calls.append(host)
        if host not in self.table:
            raise socket.gaierror(socket.EAI_NONAME, "unknown host")
        return self.table[host]


class FakeBackend:
    """A search engine that returns fixed results and counts its calls."""

    cache_id = "fake"

    def __init__(self, results: list[SearchResult]) -> None:
        self.results = results
        self.calls: list[tuple[str, int]] = []

    async def search(self, query: str, max_results: int = 5) -> list[SearchResult]:
        self.calls.append((query, max_results))
        return self.results[:max_results]


class DictStore:
    """The RecordStore contract in a dict: records kinds and keys, stores JSON text."""

    def __init__(self) -> None:
        self.data: dict[str, str] = {}
        self.keys: list[tuple[str, dict[str, Any]]] = []

    async def through(self, kind: str, key: dict[str, Any], produce: Callable[[], Awaitable[Any]]) -> Any:
        self.keys.append((kind, key))
        digest = kind + json.dumps(key, sort_keys=True)
        if digest not in self.data:
            self.data[digest] = json.dumps(await produce())
        return json.loads(self.data[digest])


def leaky_results() -> list[SearchResult]:
    return [
        SearchResult(title="MedMisBench dataset", url="https://huggingface.co/datasets/AI4HealthResearch/MedMisBench", score=0.99),
        SearchResult(title="Scurvy", url="https://news.example/scurvy", snippet="vitamin C", score=0.9),
        SearchResult(title="MedMisBench paper", url="https://arxiv.org/abs/2606.12291v1", score=0.8),
        SearchResult(title="Rickets", url="https://news.example/rickets", score=0.7),
        SearchResult(title="HLE", url="https://lastexam.ai/", score=0.6),
        SearchResult(title="Pellagra", url="https://news.example/pellagra", score=0.5),
    ]


# -- search ----------------------------------------------------------------------------------------------


async def test_local_search_through_webtools(corpus: Path) -> None:
    async with WebTools("local", corpus_dir=corpus) as tools:
        assert isinstance(tools, Toolset)
        results = await tools.search("bleeding gums vitamin C", max_results=2)
        zh = await tools.search("维生素C 治疗", max_results=1)
    assert results[0].url == "https://medref.example/articles/scurvy"
    assert len(results) <= 2
    assert zh[0].title == "坏血病"


async def test_blocklist_filters_results_and_keeps_max_results() -> None:
    backend = FakeBackend(leaky_results())
    async with WebTools(backend, resolve=FakeResolver()) as tools:
        results = await tools.search("scurvy", max_results=3)
    assert [r.title for r in results] == ["Scurvy", "Rickets", "Pellagra"]
    assert backend.calls == [("scurvy", 8)]  # asked for spare results to make up for filtering


async def test_empty_query_is_a_tool_error() -> None:
    async with WebTools(FakeBackend([])) as tools:
        with pytest.raises(ToolError):
            await tools.search("   ")


async def test_store_keys_and_blocklist_applied_to_recorded_results() -> None:
    store = DictStore()
    backend = FakeBackend(leaky_results())
    async with WebTools(backend, blocklist=Blocklist(()), store=store) as tools:
        first = await tools.search("  scurvy   treatment ", max_results=5)
    assert ("search", {"backend": "fake", "query": "scurvy treatment", "max_results": 5}) in store.keys
    assert any("huggingface" in r.url for r in first)
    # a later run with the default blocklist replays the same entry but filters it
    async with WebTools(backend, store=store) as tools:
        again = await tools.search("scurvy treatment", max_results=5)
    assert len(backend.calls) == 1
    assert all("huggingface" not in r.url and "arxiv" not in r.url for r in again)


async def test_tavily_through_webtools(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAVILY_API_KEY", "tvly-test")
    monkeypatch.delenv("TAVILY_BASE_URL", raising=False)
    body = {
        "query": "q",
        "answer": None,
        "images": [],
        "results": [
            {"title": "HLE", "url": "https://huggingface.co/datasets/cais/hle", "content": "x", "score": 0.9, "raw_content": None},
            {"title": "Scurvy", "url": "https://news.example/scurvy", "content": "Vitamin C.", "score": 0.8, "raw_content": None},
        ],
        "response_time": 0.5,
    }
    with respx.mock:
        route = respx.post("https://api.tavily.com/search").mock(return_value=httpx.Response(200, json=body))
        async with make_tools("tavily") as tools:
            results = await tools.search("scurvy", max_results=1)
    assert [r.title for r in results] == ["Scurvy"]
    assert json.loads(route.calls.last.request.content)["max_results"] == 6


def test_make_tools_tavily_without_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TAVILY_API_KEY", raising=False)
    with pytest.raises(ToolError) as err:
        make_tools("tavily")
    assert err.value.kind == "config"


# -- visits ----------------------------------------------------------------------------------------------


async def test_local_corpus_visit_is_offline(corpus: Path) -> None:
    resolver = FakeResolver()
    store = DictStore()
    with respx.mock(assert_all_called=False) as router:
        anything = router.route()
        async with WebTools("local", corpus_dir=corpus, resolve=resolver, store=store) as tools:
            page = await tools.visit("https://medref.example/articles/scurvy/", goal="treatment")
        assert not anything.called
    assert resolver.calls == [] and store.keys == []
    assert page.title == "Scurvy" and page.final_url == "https://medref.example/articles/scurvy"
    assert "oral vitamin C replacement" in page.text and "Bleeding gums" not in page.text


async def test_scheme_less_urls_are_read_as_https(corpus: Path) -> None:
    async with WebTools("local", corpus_dir=corpus, resolve=FakeResolver()) as tools:
        page = await tools.visit("medref.example/articles/rickets")
        assert page.url == "https://medref.example/articles/rickets"
        with pytest.raises(ToolError) as err:
            await tools.visit("javascript:alert(1)")
    assert err.value.kind == "refused"


async def test_web_visit_goes_through_store_with_its_key(corpus: Path) -> None:
    store = DictStore()
    with respx.mock:
        route = respx.get("https://news.example/scurvy").mock(
            return_value=httpx.Response(200, content=ARTICLE, headers={"content-type": "text/html"})
        )
        async with WebTools("local", corpus_dir=corpus, resolve=FakeResolver(), store=store) as tools:
            first = await tools.visit("https://news.example/scurvy", goal=" treatment ", max_chars=1500)
            second = await tools.visit("https://news.example/scurvy", goal="treatment", max_chars=1500)
    assert route.call_count == 1
    assert store.keys[0] == ("visit", {"url": "https://news.example/scurvy", "goal": "treatment", "max_chars": 1500})
    assert first == second and first.title.startswith("Scurvy")


async def test_blocklisted_visit_is_refused_before_anything(corpus: Path) -> None:
    resolver = FakeResolver({"huggingface.co": [PUBLIC]})
    store = DictStore()
    async with WebTools("local", corpus_dir=corpus, resolve=resolver, store=store) as tools:
        with pytest.raises(ToolError) as err:
            await tools.visit("https://huggingface.co/datasets/AI4HealthResearch/MedMisBench/viewer")
    assert err.value.kind == "refused"
    assert resolver.calls == [] and store.keys == []


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1/", "http://[::1]:8080/", "http://10.0.0.5/", "http://169.254.169.254/latest/meta-data/",
     "http://[::ffff:127.0.0.1]/", "http://loopy.example/"],
)
async def test_private_targets_are_refused(url: str, corpus: Path) -> None:
    resolver = FakeResolver({"loopy.example": ["127.0.0.1"]})
    with respx.mock(assert_all_called=False) as router:
        anything = router.route()
        async with WebTools("local", corpus_dir=corpus, resolve=resolver) as tools:
            with pytest.raises(ToolError) as err:
                await tools.visit(url)
        assert not anything.called
    assert err.value.kind == "refused"


async def test_allow_host_opens_a_local_server(corpus: Path) -> None:
    with respx.mock:
        respx.get("http://127.0.0.1:8000/page").mock(
            return_value=httpx.Response(200, content=ARTICLE, headers={"content-type": "text/html"})
        )
        async with WebTools("local", corpus_dir=corpus, allow_hosts=["127.0.0.1:8000"], resolve=FakeResolver()) as tools:
            page = await tools.visit("http://127.0.0.1:8000/page")
            with pytest.raises(ToolError):
                await tools.visit("http://127.0.0.1:8001/page")
    assert "Treatment is vitamin C replacement" in page.text


async def test_replayed_redirect_to_newly_blocked_page_is_refused() -> None:
    store = DictStore()
    page = Page(url="https://news.example/x", final_url="https://lastexam.ai/q/1", text="answers")
    store.data["visit" + json.dumps({"goal": None, "max_chars": 6000, "url": "https://news.example/x"}, sort_keys=True)] = (
        page.model_dump_json()
    )
    async with WebTools(FakeBackend([]), store=store) as tools:
        with pytest.raises(ToolError) as err:
            await tools.visit("https://news.example/x")
    assert err.value.kind == "refused"


# -- the real store: record, then replay offline with identical output ------------------------------------


async def test_record_then_replay_is_byte_identical(tmp_path: Path, corpus: Path) -> None:
    cache = tmp_path / "cache"
    with respx.mock:
        respx.get("https://news.example/scurvy").mock(
            return_value=httpx.Response(200, content=ARTICLE, headers={"content-type": "text/html"})
        )
        async with make_tools("local", "record", cache, corpus_dir=corpus, resolve=FakeResolver()) as tools:
            recorded_search = await tools.search("vitamin C deficiency", max_results=3)
            recorded_page = await tools.visit("https://news.example/scurvy", goal="diagnosis")

    resolver = FakeResolver()
    with respx.mock(assert_all_called=False) as router:
        anything = router.route()
        async with make_tools("local", "replay", cache, corpus_dir=corpus, resolve=resolver) as tools:
            with cache_probe() as probe:
                replayed_page = await tools.visit("https://news.example/scurvy", goal="diagnosis")
            assert probe.result is True
            replayed_search = await tools.search("vitamin C deficiency", max_results=3)
            with pytest.raises(ReplayMissError):
                await tools.visit("https://news.example/never-recorded")
        assert not anything.called
    assert resolver.calls == []  # replay never touches DNS either
    assert replayed_page.model_dump_json() == recorded_page.model_dump_json()
    assert [r.model_dump_json() for r in replayed_search] == [r.model_dump_json() for r in recorded_search]


async def test_make_tools_live_has_no_store(corpus: Path, tmp_path: Path) -> None:
    async with make_tools("local", "live", tmp_path / "unused", corpus_dir=corpus) as tools:
        assert tools.store is None
    assert not (tmp_path / "unused").exists()
    async with make_tools("local", corpus_dir=corpus, blocklist=["news.example/secret"]) as extended:
        assert extended.blocklist.match("https://news.example/secret/1") is not None
        assert extended.blocklist.match("https://lastexam.ai/") is not None


# -- CLI helpers ------------------------------------------------------------------------------------------


async def test_cli_search_and_visit_print_json(corpus: Path) -> None:
    out = json.loads(await tools_search("vitamin C", max_results=2, search="local", corpus_dir=corpus))
    assert out["query"] == "vitamin C" and out["results"][0]["url"].startswith("https://medref.example/")
    assert out["cache_hit"] is None
    page = json.loads(await tools_visit("https://medref.example/articles/huaixuebing", search="local", corpus_dir=corpus))
    assert page["page"]["title"] == "坏血病"
    refused = json.loads(await tools_visit("http://127.0.0.1/", search="local", corpus_dir=corpus))
    assert refused["error"]["kind"] == "refused"


async def test_cli_reports_config_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TAVILY_API_KEY", raising=False)
    out = json.loads(await tools_search("x", search="tavily"))
    assert out["error"]["kind"] == "config" and "TAVILY_API_KEY" in out["error"]["message"]


async def test_custom_backend_with_separate_corpus(corpus: Path) -> None:
    tools = WebTools(FakeBackend([]), corpus_dir=corpus)
    assert isinstance(tools.local, LocalSearch)
    page = await tools.visit("https://medref.example/articles/rickets")
    assert "vitamin D" in page.text
    await tools.aclose()
    local = LocalSearch(documents=[CorpusDocument("a", "A", "https://medref.example/a", "Alpha text.")])
    async with WebTools(local) as tools:
        assert tools.local is local
