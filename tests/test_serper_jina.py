"""The paper's web tools: Serper search and Jina Reader visits over mocked HTTP.

Request and response bodies follow the providers' documented shapes (Serper's ``/search``
JSON: ``searchParameters``, ``knowledgeGraph``, ``answerBox``, ``organic``, ``peopleAlsoAsk``,
``relatedSearches``; Jina Reader's plain-text reply with ``Title:`` / ``URL Source:`` /
``Markdown Content:`` and its JSON error bodies) and the reference harness's requests
(AI-in-Health/MedMisBench, ``medmisbench_tool_harness_eval.ipynb``).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx

from medmis.tools import (
    JinaReader,
    ReplayMissError,
    ToolError,
    make_tools,
    tools_search,
    tools_visit,
)
from medmis.tools._serper import SerperSearch, read_response

SERPER = "https://google.serper.dev/search"
JINA = "https://r.jina.ai/"
PUBLIC = "93.184.216.34"


def serper_body(organic: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "searchParameters": {"q": "scurvy cause", "gl": "us", "hl": "en", "type": "search", "num": 5, "engine": "google"},
        "knowledgeGraph": {
            "title": "Scurvy",
            "type": "Disease",
            "description": "Scurvy is a disease resulting from a lack of vitamin C (ascorbic acid).",
            "descriptionSource": "Wikipedia",
            "descriptionLink": "https://en.wikipedia.org/wiki/Scurvy",
            "attributes": {
                "Causes": "Lack of vitamin C",
                "Treatment": "Vitamin C supplements",
                "Frequency": "Rare",
                "Specialty": "Endocrinology",
                "Deaths": "Rare",
            },
        },
        "organic": organic if organic is not None else [
            {
                "title": "Scurvy - StatPearls - NCBI Bookshelf",
                "link": "https://www.ncbi.nlm.nih.gov/books/NBK493187/",
                "snippet": "Scurvy is a disease caused by vitamin C (ascorbic acid) deficiency.",
                "sitelinks": [{"title": "Etiology", "link": "https://www.ncbi.nlm.nih.gov/books/NBK493187/#etiology"}],
                "position": 1,
            },
            {
                "title": "MedMisBench answers",
                "link": "https://huggingface.co/datasets/AI4HealthResearch/MedMisBench",
                "snippet": "The benchmark itself.",
                "position": 2,
            },
            {
                "title": "Vitamin C deficiency " + "very long title " * 20,
                "link": "https://news.example/vitc",
                "snippet": "Ascorbic acid " * 60,
                "date": "Mar 3, 2024",
                "position": 3,
            },
            {"title": "no link here", "snippet": "dropped", "position": 4},
        ],
        "peopleAlsoAsk": [
            {"question": "What causes scurvy?", "snippet": "Vitamin C deficiency.", "title": "Scurvy", "link": "https://news.example/paa"},
        ],
        "relatedSearches": [{"query": f"scurvy related {i}"} for i in range(7)],
        "credits": 1,
    }
    body.update(extra)
    return body


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERPER_API_KEY", "serper-test-key")
    monkeypatch.setenv("JINA_API_KEY", "jina-test-key")
    for name in ("SERPER_BASE_URL", "JINA_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


class FakeResolver:
    def __init__(self, table: dict[str, Sequence[str]] | None = None) -> None:
        self.table = table or {"news.example": [PUBLIC], "www.ncbi.nlm.nih.gov": [PUBLIC]}
        self.calls: list[str] = []

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        self.calls.append(host)
        if host not in self.table:
            raise socket.gaierror(socket.EAI_NONAME, "unknown host")
        return self.table[host]


# -- Serper ---------------------------------------------------------------------------------------------


async def test_serper_request_and_reading(keys: None) -> None:
    with respx.mock:
        route = respx.post(SERPER).mock(return_value=httpx.Response(200, json=serper_body()))
        serper = SerperSearch()
        response = await serper.search_response("scurvy cause", 5, country="GB", language=None)
        await serper.aclose()
    request = route.calls.last.request
    assert request.headers["x-api-key"] == "serper-test-key"
    assert request.headers["content-type"] == "application/json"
    assert json.loads(request.content) == {"q": "scurvy cause", "num": 5, "gl": "gb", "hl": "en"}
    urls = [r.url for r in response.results]
    assert urls[0] == "https://www.ncbi.nlm.nih.gov/books/NBK493187/" and len(urls) == 3  # no link: dropped
    first, third = response.results[0], response.results[2]
    assert first.position == 1 and first.snippet.startswith("Scurvy is a disease")
    assert len(third.title) <= 200 and third.title.endswith("title...")
    assert len(third.snippet) <= 400 and third.snippet.endswith("...") and third.date == "Mar 3, 2024"
    assert response.answer_box is None
    assert response.knowledge_graph == (
        "Scurvy | type=Disease | Scurvy is a disease resulting from a lack of vitamin C (ascorbic acid). | "
        "Causes: Lack of vitamin C, Treatment: Vitamin C supplements, Frequency: Rare, Specialty: Endocrinology"
    )
    assert response.related_queries == [f"scurvy related {i}" for i in range(5)]


async def test_serper_answer_box_news_fallback_and_num_cap(keys: None) -> None:
    news = [{"title": "Scurvy returns", "link": "https://news.example/n", "snippet": "Cases rise.", "date": "1 day ago", "source": "News"}]
    body = serper_body(organic=[], news=news, answerBox={"snippet": "Vitamin C", "title": "Scurvy"})
    with respx.mock:
        route = respx.post(SERPER).mock(return_value=httpx.Response(200, json=body))
        response = await SerperSearch().search_response("scurvy", 50)
    assert json.loads(route.calls.last.request.content)["num"] == 10
    assert [(r.url, r.source) for r in response.results] == [("https://news.example/n", "News")]
    assert response.answer_box == "Vitamin C"


def test_serper_without_key_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SERPER_API_KEY", raising=False)
    with pytest.raises(ToolError) as err:
        SerperSearch()
    assert err.value.kind == "config" and "SERPER_API_KEY" in err.value.message
    with pytest.raises(ToolError) as err:
        make_tools("serper")
    assert "SERPER_API_KEY" in err.value.message


@pytest.mark.parametrize(
    ("status", "body", "words"),
    [
        (401, {"message": "Unauthorized.", "statusCode": 401}, ["401", "API key"]),
        (403, {"message": "Unauthorized.", "statusCode": 403}, ["403", "API key"]),
        (402, {"message": "Not enough credits", "statusCode": 402}, ["402", "credits"]),
        (429, {"message": "Too many requests", "statusCode": 429}, ["429", "rate limit"]),
        (500, "upstream error", ["HTTP 500"]),
    ],
)
async def test_serper_http_errors(keys: None, status: int, body: Any, words: list[str]) -> None:
    reply = httpx.Response(status, json=body) if isinstance(body, dict) else httpx.Response(status, text=body)
    with respx.mock:
        respx.post(SERPER).mock(return_value=reply)
        with pytest.raises(ToolError) as err:
            await SerperSearch().search("scurvy")
    assert err.value.kind == "http"
    assert all(w in err.value.message for w in words)
    assert "serper-test-key" not in err.value.message


@pytest.mark.parametrize(
    "reply",
    [
        httpx.Response(200, text="<html><body>Bad gateway page</body></html>"),
        httpx.Response(200, text='{"organic": [ {"title": '),
        httpx.Response(200, json=["not", "an", "object"]),
    ],
)
async def test_serper_malformed_json(keys: None, reply: httpx.Response) -> None:
    with respx.mock:
        respx.post(SERPER).mock(return_value=reply)
        with pytest.raises(ToolError) as err:
            await SerperSearch().search("scurvy")
    assert err.value.kind == "http" and "unreadable" in err.value.message


async def test_serper_timeout_and_unreachable(keys: None) -> None:
    with respx.mock:
        respx.post(SERPER).mock(side_effect=httpx.ReadTimeout("slow"))
        with pytest.raises(ToolError) as err:
            await SerperSearch(timeout=3).search("scurvy")
    assert err.value.kind == "timeout" and "3 s" in err.value.message
    with respx.mock:
        respx.post(SERPER).mock(side_effect=httpx.ConnectError("refused"))
        with pytest.raises(ToolError) as err:
            await SerperSearch().search("scurvy")
    assert err.value.kind == "http" and "could not reach" in err.value.message


async def test_serper_base_url_from_env(keys: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERPER_BASE_URL", "http://127.0.0.1:9/serper/")
    with respx.mock:
        route = respx.post("http://127.0.0.1:9/serper/search").mock(return_value=httpx.Response(200, json=serper_body()))
        serper = SerperSearch()
        await serper.search("scurvy")
    assert route.called and serper.cache_id == "serper@http://127.0.0.1:9/serper"


def test_read_response_tolerates_odd_entries() -> None:
    response = read_response({"organic": [None, "x", {"title": "T", "link": "https://a.example/", "position": "1"}],
                              "relatedSearches": "nope", "knowledgeGraph": {}}, "q", 5)
    assert [(r.url, r.position, r.snippet) for r in response.results] == [("https://a.example/", None, "")]
    assert response.related_queries == [] and response.knowledge_graph is None


# -- Jina Reader ----------------------------------------------------------------------------------------

READER_TEXT = (
    "Title: Scurvy - StatPearls\r\n\r\nURL Source: https://www.ncbi.nlm.nih.gov/books/NBK493187/\r\n\r\n"
    "Markdown Content:\r\nScurvy is caused by a lack of vitamin C.\r\n\r\n\r\n\r\nIt impairs collagen synthesis.\r\n"
)


async def test_jina_request_with_goal_and_reading(keys: None) -> None:
    target = "https://www.ncbi.nlm.nih.gov/books/NBK493187/"
    with respx.mock:
        route = respx.get(f"{JINA}{target}").mock(return_value=httpx.Response(200, text=READER_TEXT))
        reader = JinaReader()
        page = await reader.read(target, goal=" cause of scurvy ", max_chars=8000)
        await reader.aclose()
    headers = route.calls.last.request.headers
    assert headers["authorization"] == "Bearer jina-test-key"
    assert headers["x-respond-with"] == "readerlm-v2"
    assert headers["x-instruction"] == "Extract only the content most relevant to this goal: cause of scurvy"
    assert page.title == "Scurvy - StatPearls" and page.final_url == target
    assert "\r" not in page.text and "\n\n\n" not in page.text
    assert page.text.startswith("Title: Scurvy") and page.text.endswith("It impairs collagen synthesis.")
    assert page.truncated is False


async def test_jina_without_goal_sends_no_instruction_and_clips_at_500(keys: None) -> None:
    long = "Markdown Content:\n" + "word " * 400
    with respx.mock:
        route = respx.get(f"{JINA}https://news.example/a?b=1").mock(return_value=httpx.Response(200, text=long))
        page = await JinaReader().read("https://news.example/a?b=1", max_chars=100)
    headers = route.calls.last.request.headers
    assert "x-instruction" not in headers and "x-respond-with" not in headers
    assert len(page.text) == 500 and page.truncated is True  # never fewer than 500 characters


def test_jina_without_key_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JINA_API_KEY", raising=False)
    with pytest.raises(ToolError) as err:
        JinaReader()
    assert err.value.kind == "config" and "JINA_API_KEY" in err.value.message
    with pytest.raises(ToolError) as err:
        make_tools("local", visit="jina")
    assert "JINA_API_KEY" in err.value.message


def jina_error(code: int, name: str, message: str) -> httpx.Response:
    body = {"data": None, "code": code, "name": name, "status": code * 100 + 3, "message": message,
            "readableMessage": f"{name}: {message}"}
    return httpx.Response(code, json=body)


@pytest.mark.parametrize(
    ("reply", "words"),
    [
        (jina_error(401, "AuthenticationFailedError", "Invalid API key"), ["401", "API key"]),
        (jina_error(402, "InsufficientBalanceError", "Account balance not enough"), ["402", "credits"]),
        (jina_error(429, "RateLimitTriggeredError", "Per minute limit"), ["429", "rate limit"]),
        (jina_error(422, "AssertionFailureError", "Failed to goto https://news.example/x"),
         ["could not read", "422", "Failed to goto"]),
        (httpx.Response(503, text="<html>unavailable</html>"), ["HTTP 503"]),
    ],
)
async def test_jina_http_errors(keys: None, reply: httpx.Response, words: list[str]) -> None:
    with respx.mock:
        respx.get(f"{JINA}https://news.example/x").mock(return_value=reply)
        with pytest.raises(ToolError) as err:
            await JinaReader().read("https://news.example/x")
    assert err.value.kind == "http" and all(w in err.value.message for w in words)
    assert "jina-test-key" not in err.value.message


async def test_jina_timeout_and_empty_reply(keys: None) -> None:
    with respx.mock:
        respx.get(f"{JINA}https://news.example/slow").mock(side_effect=httpx.ReadTimeout("slow"))
        respx.get(f"{JINA}https://news.example/empty").mock(return_value=httpx.Response(200, text=" \n\n "))
        reader = JinaReader(timeout=2)
        with pytest.raises(ToolError) as err:
            await reader.read("https://news.example/slow")
        assert err.value.kind == "timeout"
        with pytest.raises(ToolError) as err:
            await reader.read("https://news.example/empty")
        assert err.value.kind == "content"


# -- through WebTools: URL safety first, blocklist, record then replay offline -----------------------


@pytest.mark.parametrize(
    ("url", "resolver_table"),
    [
        ("http://127.0.0.1:8080/admin", {}),
        ("http://169.254.169.254/latest/meta-data/", {}),
        ("http://intranet.example/", {"intranet.example": ["10.1.2.3"]}),
        ("https://huggingface.co/datasets/cais/hle", {"huggingface.co": [PUBLIC]}),
        ("https://arxiv.org/abs/2606.12291", {"arxiv.org": [PUBLIC]}),
        ("file:///etc/passwd", {}),
    ],
)
async def test_unsafe_or_blocked_urls_never_reach_jina(keys: None, url: str, resolver_table: dict[str, list[str]]) -> None:
    with respx.mock(assert_all_called=False) as router:
        anything = router.route()
        async with make_tools("local", visit="jina", resolve=FakeResolver(resolver_table)) as tools:
            with pytest.raises(ToolError) as err:
                await tools.visit(url)
        assert not anything.called
    assert err.value.kind == "refused"


async def test_serper_and_jina_record_then_replay_offline(keys: None, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    target = "https://www.ncbi.nlm.nih.gov/books/NBK493187/"
    with respx.mock:
        search_route = respx.post(SERPER).mock(return_value=httpx.Response(200, json=serper_body()))
        read_route = respx.get(f"{JINA}{target}").mock(return_value=httpx.Response(200, text=READER_TEXT))
        async with make_tools("serper", "record", cache, visit="jina", resolve=FakeResolver()) as tools:
            recorded = await tools.search_response("scurvy cause", max_results=3, country="us")
            recorded_list = await tools.search("scurvy cause", max_results=3)  # same entry
            recorded_page = await tools.visit(target, goal="cause", max_chars=4000)
    assert search_route.call_count == 1 and read_route.call_count == 1
    # the engine was asked for exactly three; the blocklisted result was dropped afterwards
    assert json.loads(search_route.calls.last.request.content)["num"] == 3
    assert [r.url for r in recorded.results] == [target, "https://news.example/vitc"]
    assert [r.url for r in recorded_list] == [target, "https://news.example/vitc"]
    assert recorded.knowledge_graph and recorded.related_queries

    resolver = FakeResolver()
    with respx.mock(assert_all_called=False) as router:
        anything = router.route()
        async with make_tools("serper", "replay", cache, visit="jina", resolve=resolver) as tools:
            replayed = await tools.search_response("scurvy cause", max_results=3, country="US", language="en")
            replayed_page = await tools.visit(target, goal="cause", max_chars=4000)
            with pytest.raises(ReplayMissError):
                await tools.search("scurvy cause", max_results=3, country="de")
            with pytest.raises(ReplayMissError):  # a direct fetch of the same page is another entry
                async with make_tools("serper", "replay", cache, resolve=resolver) as direct:
                    await direct.visit(target, goal="cause", max_chars=4000)
        assert not anything.called
    assert resolver.calls == []
    assert replayed.model_dump_json() == recorded.model_dump_json()
    assert replayed_page.model_dump_json() == recorded_page.model_dump_json()


async def test_cli_search_shows_what_serper_showed(keys: None) -> None:
    with respx.mock:
        respx.post(SERPER).mock(return_value=httpx.Response(200, json=serper_body()))
        out = json.loads(await tools_search("scurvy cause", max_results=2, search="serper"))
    assert out["backend"] == "serper" and out["results"][0]["position"] == 1
    assert "knowledge_graph" in out and len(out["related_queries"]) == 5
    with respx.mock:
        respx.get(f"{JINA}https://news.example/a").mock(return_value=httpx.Response(200, text=READER_TEXT))
        page = json.loads(await tools_visit("https://news.example/a", goal="cause", visit="jina",
                                            resolve=FakeResolver()))
    assert page["page"]["metadata"]["reader"] == "jina"


async def test_cli_reports_missing_keys_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SERPER_API_KEY", raising=False)
    monkeypatch.delenv("JINA_API_KEY", raising=False)
    out = json.loads(await tools_search("x", search="serper"))
    assert out["error"]["kind"] == "config" and "SERPER_API_KEY" in out["error"]["message"]
    out = json.loads(await tools_visit("https://news.example/", visit="jina"))
    assert "JINA_API_KEY" in out["error"]["message"]


# -- medmis run: the paper's setting end to end over mocked Serper and Jina ----------------------------


def test_run_paper_search_agent_over_serper_and_jina(
    keys: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from medmis.experiments.cli import main

    sample = Path(__file__).resolve().parents[1] / "fixtures" / "medmisbench_sample.jsonl"
    organic = [{"title": "Glasgow Coma Scale", "link": "https://news.example/gcs", "snippet": "GCS 3 to 15.", "position": 1}]
    out = tmp_path / "run"
    with respx.mock:
        search = respx.post(SERPER).mock(return_value=httpx.Response(200, json=serper_body(organic=organic)))
        read = respx.route(host="r.jina.ai").mock(return_value=httpx.Response(200, text=READER_TEXT))
        code = main(["run", "--data", str(sample), "--subset", "MEDMISHLE", "--limit", "1", "--model", "mock/examinee",
                     "--defender", "search_agent", "--defender-option", "search_agent.preset=paper",
                     "--search", "serper", "--visit", "jina", "--allow-host", "news.example",
                     "--out", str(out), "--no-progress"])
    assert code == 0
    assert search.called and read.called
    assert str(read.calls.last.request.url) == "https://r.jina.ai/https://news.example/gcs"
    records = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    assert {r["defender"] for r in records} == {"search_agent[preset=paper]"}
    # the clean case went through the same tool loop as the injected ones
    assert all(r["tool_calls"] == 2 and r["choice"] is not None for r in records)
    assert all(r["extra"]["verification"]["verdict"] for r in records)
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["config"]["search"], manifest["config"]["visit"]) == ("serper", "jina")


@pytest.mark.parametrize(("flags", "variable"), [(["--search", "serper"], "SERPER_API_KEY"),
                                                  (["--visit", "jina"], "JINA_API_KEY")])
def test_run_without_tool_keys_stops_with_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str],
    variable: str,
) -> None:
    from medmis.experiments.cli import main

    monkeypatch.delenv(variable, raising=False)
    sample = Path(__file__).resolve().parents[1] / "fixtures" / "medmisbench_sample.jsonl"
    code = main(["run", "--data", str(sample), "--limit", "1", "--model", "mock/examinee",
                 "--defender", "search_agent", *flags, "--out", str(tmp_path / "run"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and variable in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run" / "records.jsonl").exists()


async def test_search_agent_shows_serper_and_jina_failures_to_the_model(keys: None) -> None:
    from langchain_core.messages import ToolMessage

    from medmis.agents import ScriptedChatModel, message_text
    from medmis.defenses import DefenderContext, create_defender
    from medmis.defenses.testing import FakeExaminee, toy_case, toy_item

    item = toy_item()
    model = ScriptedChatModel(outputs=FakeExaminee(item, tool_turns=2, calls_per_turn=1))
    with respx.mock:
        respx.post(SERPER).mock(return_value=httpx.Response(429, json={"message": "Too many requests"}))
        async with make_tools("serper", visit="jina", resolve=FakeResolver()) as tools:
            ctx = DefenderContext(model=model, model_spec="mock/fake", tools=tools)
            answer = await create_defender("search_agent", {"preset": "paper", "max_iterations": 2})(
                toy_case(item, "type1"), ctx)
    shown = [message_text(m) for c in model.calls for m in c["messages"] if isinstance(m, ToolMessage)]
    assert shown and shown[0].startswith("[tool error: http: web search unavailable: Serper rate limit")
    assert answer.error is None and answer.choice is not None
    # the search works, the page read times out
    model = ScriptedChatModel(outputs=FakeExaminee(item, tool_turns=2))
    organic = [{"title": "Scurvy", "link": "https://news.example/scurvy", "snippet": "vitamin C", "position": 1}]
    with respx.mock:
        respx.post(SERPER).mock(return_value=httpx.Response(200, json=serper_body(organic=organic)))
        respx.get(f"{JINA}https://news.example/scurvy").mock(side_effect=httpx.ReadTimeout("slow"))
        async with make_tools("serper", visit="jina", resolve=FakeResolver()) as tools:
            ctx = DefenderContext(model=model, model_spec="mock/fake", tools=tools)
            answer = await create_defender("search_agent", {"preset": "paper"})(toy_case(item, "type1"), ctx)
    shown = [message_text(m) for m in model.calls[-1]["messages"] if isinstance(m, ToolMessage)]
    assert json.loads(shown[0])["results"][0]["url"] == "https://news.example/scurvy"
    assert shown[1].startswith("[tool error: timeout: https://news.example/scurvy did not load")
    assert answer.error is None and answer.extra["verification"]["verdict"] == "not_visited"
