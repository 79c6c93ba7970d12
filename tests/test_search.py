"""Search backends: Tavily against a mocked /search endpoint, and the local BM25 corpus."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import respx

from medmis.tools import (
    CorpusDocument,
    LocalSearch,
    SearchBackend,
    TavilySearch,
    ToolError,
    load_corpus,
)
from medmis.tools._text import tokenize

TAVILY_URL = "https://api.tavily.com/search"


def tavily_body(*results: dict[str, object]) -> dict[str, object]:
    """A /search response shaped like Tavily's API reference."""
    return {
        "query": "scurvy vitamin deficiency",
        "follow_up_questions": None,
        "answer": None,
        "images": [],
        "results": list(results),
        "response_time": 1.09,
        "request_id": "123e4567-e89b-12d3-a456-426614174111",
    }


def tavily_result(title: str, url: str, content: str, score: float) -> dict[str, object]:
    return {
        "title": title,
        "url": url,
        "content": content,
        "score": score,
        "raw_content": None,
        "favicon": "https://example.org/favicon.ico",
    }


@pytest.fixture
def tavily_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("TAVILY_API_KEY", "tvly-test-key")
    monkeypatch.delenv("TAVILY_BASE_URL", raising=False)
    return "tvly-test-key"


# -- Tavily ---------------------------------------------------------------------------------------------


async def test_tavily_maps_results(tavily_key: str) -> None:
    body = tavily_body(
        tavily_result("Scurvy - MedRef", "https://medref.example/scurvy", "Scurvy is  caused\nby a lack of vitamin C.", 0.91),
        tavily_result("Vitamin C", "https://medref.example/vitc", "Ascorbic acid " * 100, 0.42),
    )
    with respx.mock:
        route = respx.post(TAVILY_URL).mock(return_value=httpx.Response(200, json=body))
        search = TavilySearch()
        results = await search.search("scurvy vitamin deficiency", 3)
        await search.aclose()
    assert [r.url for r in results] == ["https://medref.example/scurvy", "https://medref.example/vitc"]
    assert results[0].title == "Scurvy - MedRef"
    assert results[0].snippet == "Scurvy is caused by a lack of vitamin C."
    assert results[0].score == pytest.approx(0.91)
    assert len(results[1].snippet) <= 500
    request = route.calls.last.request
    assert request.headers["authorization"] == f"Bearer {tavily_key}"
    assert "x-tavily-access-mode" not in request.headers  # never keyless
    sent = json.loads(request.content)
    assert sent["query"] == "scurvy vitamin deficiency"
    assert sent["max_results"] == 3
    assert sent["include_raw_content"] is False


async def test_tavily_without_key_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TAVILY_API_KEY", raising=False)
    with pytest.raises(ToolError) as err:
        TavilySearch()
    assert err.value.kind == "config"
    assert "TAVILY_API_KEY" in err.value.message
    with pytest.raises(ToolError):
        TavilySearch(api_key="   ")


async def test_tavily_401(tavily_key: str) -> None:
    with respx.mock:
        respx.post(TAVILY_URL).mock(
            return_value=httpx.Response(401, json={"detail": {"error": "Unauthorized: missing or invalid API key."}})
        )
        with pytest.raises(ToolError) as err:
            await TavilySearch().search("scurvy")
    assert err.value.kind == "http"
    assert "401" in err.value.message and "API key" in err.value.message
    assert tavily_key not in err.value.message


async def test_tavily_429(tavily_key: str) -> None:
    with respx.mock:
        respx.post(TAVILY_URL).mock(
            return_value=httpx.Response(
                429,
                headers={"retry-after": "30"},
                json={"detail": {"error": "Your request has been blocked due to excessive requests."}},
            )
        )
        with pytest.raises(ToolError) as err:
            await TavilySearch().search("scurvy")
    assert err.value.kind == "http"
    assert "rate limit" in err.value.message and "429" in err.value.message


async def test_tavily_server_error(tavily_key: str) -> None:
    with respx.mock:
        respx.post(TAVILY_URL).mock(return_value=httpx.Response(502, text="bad gateway"))
        with pytest.raises(ToolError) as err:
            await TavilySearch().search("scurvy")
    assert err.value.kind == "http" and "502" in err.value.message


async def test_tavily_timeout(tavily_key: str) -> None:
    with respx.mock:
        respx.post(TAVILY_URL).mock(side_effect=httpx.ReadTimeout("slow"))
        with pytest.raises(ToolError) as err:
            await TavilySearch(timeout=5).search("scurvy")
    assert err.value.kind == "timeout"


async def test_tavily_unreachable(tavily_key: str) -> None:
    with respx.mock:
        respx.post(TAVILY_URL).mock(side_effect=httpx.ConnectError("refused"))
        with pytest.raises(ToolError) as err:
            await TavilySearch().search("scurvy")
    assert err.value.kind == "http" and "could not reach" in err.value.message


async def test_tavily_base_url_from_env(tavily_key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAVILY_BASE_URL", "https://gateway.example/tavily/")
    with respx.mock:
        route = respx.post("https://gateway.example/tavily/search").mock(
            return_value=httpx.Response(200, json=tavily_body())
        )
        search = TavilySearch()
        assert await search.search("scurvy") == []
    assert route.called
    assert search.cache_id == "tavily@https://gateway.example/tavily"
    assert TavilySearch(base_url="https://api.tavily.com").cache_id == "tavily"


async def test_tavily_base_url_argument_wins(tavily_key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAVILY_BASE_URL", "https://ignored.example")
    with respx.mock:
        route = respx.post("http://localhost:9999/search").mock(
            return_value=httpx.Response(200, json=tavily_body())
        )
        await TavilySearch(base_url="http://localhost:9999").search("scurvy")
    assert route.called


# -- tokenisation ----------------------------------------------------------------------------------------


def test_tokenize_english_and_chinese() -> None:
    assert tokenize("The Vitamins of Scurvy") == ["vitamin", "scurvy"]
    assert tokenize("Vitamin A, hepatitis C") == ["vitamin", "a", "hepatitis", "c"]
    assert tokenize("坏血病") == ["坏血", "血病"]
    assert tokenize("缺乏维生素C的病") == ["缺乏", "乏维", "维生", "生素", "c", "的病"]
    assert tokenize("缺乏C病") == ["缺乏", "c", "病"]
    assert tokenize("ＦＵＬＬＷＩＤＴＨ") == ["fullwidth"]


# -- local corpus ------------------------------------------------------------------------------------------

DOCS = [
    CorpusDocument(
        "hyperkalemia",
        "Hyperkalemia",
        "https://medref.example/articles/hyperkalemia",
        "Hyperkalemia is a raised serum potassium. Severe hyperkalemia causes peaked T waves. "
        "Calcium gluconate stabilises the cardiac membrane. Insulin with glucose shifts potassium into cells.",
    ),
    CorpusDocument(
        "scurvy",
        "Scurvy",
        "https://medref.example/articles/scurvy",
        "Scurvy is a disease of the past in most countries. It is caused by a lack of vitamin C. "
        "Bleeding gums and poor wound healing are typical. Treatment is vitamin C replacement by mouth.",
    ),
    CorpusDocument(
        "rickets",
        "Rickets",
        "https://medref.example/articles/rickets",
        "Rickets is softening of bones in children due to vitamin D deficiency. Bowed legs are a sign.",
    ),
    CorpusDocument(
        "huaixuebing",
        "坏血病",
        "https://medref.example/articles/huaixuebing",
        "坏血病是由于长期缺乏维生素C引起的疾病。患者可出现牙龈出血和伤口愈合不良。治疗方法是口服补充维生素C。",
    ),
    CorpusDocument(
        "gaojiaxuezheng",
        "高钾血症",
        "https://medref.example/articles/gaojiaxuezheng",
        "高钾血症是指血清钾浓度升高。严重时可引起心律失常。葡萄糖酸钙可以稳定心肌细胞膜。",
    ),
]


@pytest.fixture(scope="module")
def local() -> LocalSearch:
    return LocalSearch(documents=DOCS)


async def test_local_ranks_relevant_english_doc_first(local: LocalSearch) -> None:
    assert isinstance(local, SearchBackend)
    results = await local.search("which vitamin deficiency causes bleeding gums", 3)
    assert results[0].url == "https://medref.example/articles/scurvy"
    assert [r.score for r in results] == sorted((r.score for r in results), reverse=True)
    assert "Bleeding gums" in results[0].snippet
    results = await local.search("treatment of high potassium with calcium gluconate")
    assert results[0].title == "Hyperkalemia"


async def test_local_ranks_relevant_chinese_doc_first(local: LocalSearch) -> None:
    results = await local.search("维生素C缺乏 牙龈出血", 3)
    assert results[0].url == "https://medref.example/articles/huaixuebing"
    assert "牙龈出血" in results[0].snippet
    results = await local.search("血钾升高 心律失常")
    assert results[0].title == "高钾血症"


async def test_local_snippet_is_the_best_sentence_and_short() -> None:
    long_text = " ".join(f"Filler sentence number {i} about general nutrition." for i in range(40))
    doc = CorpusDocument(
        "long", "Long", "https://medref.example/long",
        long_text + " Thiamine deficiency causes beriberi and Wernicke encephalopathy. " + long_text,
    )
    search = LocalSearch(documents=[doc, *DOCS])
    [result] = await search.search("thiamine beriberi", 1)
    assert result.snippet.startswith("Thiamine deficiency causes beriberi")
    assert len(result.snippet) <= 300


async def test_local_no_match_and_max_results(local: LocalSearch) -> None:
    assert await local.search("quantum chromodynamics") == []
    assert await local.search("   ") == []
    assert len(await local.search("vitamin", 1)) == 1


async def test_local_ranking_is_stable_for_ties() -> None:
    twins = [
        CorpusDocument(str(i), f"Twin {i}", f"https://medref.example/twin{i}", "Identical text about gout.")
        for i in range(4)
    ]
    search = LocalSearch(documents=[*twins, *DOCS])
    for _ in range(3):
        results = await search.search("gout", 4)
        assert [r.url for r in results] == [t.url for t in twins]


def test_document_lookup_ignores_trivial_url_differences(local: LocalSearch) -> None:
    doc = local.document("https://medref.example/articles/scurvy")
    assert doc is not None and doc.id == "scurvy"
    for variant in (
        "http://medref.example/articles/scurvy/",
        "https://www.MedRef.example/articles/scurvy#treatment",
        " https://medref.example/articles/scurvy ",
    ):
        assert local.document(variant) == doc
    assert local.document("https://medref.example/articles/unknown") is None
    assert local.document("not a url") is None


def test_load_corpus_from_folder(tmp_path: Path) -> None:
    rows = [
        {"id": "gout", "title": "Gout", "url": "https://medref.example/articles/gout", "text": "Gout is urate arthritis."},
        {"id": "dup", "title": "Gout again", "url": "https://medref.example/articles/gout/", "text": "dup"},
    ]
    (tmp_path / "documents.jsonl").write_text(
        "\n".join(json.dumps(r) for r in rows) + "\n{not json\n\n" + json.dumps({"title": "no url"}) + "\n",
        "utf-8",
    )
    sub = tmp_path / "notes"
    sub.mkdir()
    (sub / "anemia.md").write_text(
        "# Iron deficiency anaemia\nurl: https://medref.example/articles/anemia\n\nLow ferritin is diagnostic.\n",
        "utf-8",
    )
    (sub / "no_title.txt").write_text("just text\nurl: https://x.example/\n", "utf-8")
    (sub / "no_url.md").write_text("# Title\nbody\n", "utf-8")
    (sub / "image.png").write_bytes(b"\x89PNG")
    docs = load_corpus(tmp_path)
    assert [(d.id, d.title) for d in docs] == [("gout", "Gout"), ("anemia", "Iron deficiency anaemia")]
    assert docs[1].text == "Low ferritin is diagnostic."
    search = LocalSearch(tmp_path)
    assert search.document("https://medref.example/articles/anemia") is not None


def test_corpus_errors_and_cache_id(tmp_path: Path) -> None:
    with pytest.raises(ToolError) as err:
        LocalSearch(tmp_path / "missing")
    assert err.value.kind == "config"
    with pytest.raises(ToolError) as err:
        LocalSearch(tmp_path)  # exists but empty
    assert err.value.kind == "config"
    a = LocalSearch(documents=DOCS)
    b = LocalSearch(documents=DOCS)
    c = LocalSearch(documents=DOCS[:-1])
    assert a.cache_id == b.cache_id != c.cache_id
    assert a.cache_id.startswith("local:")
