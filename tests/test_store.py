"""The record/replay store, its LangChain cache adapter and JSONL cassettes."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from medmis.agents import ScriptedChatModel
from medmis.defenses import DefenderContext
from medmis.tools import ReplayMissError, cache_probe
from medmis.tools._cassette import (
    cache_export,
    cache_import,
    cache_prune,
    cache_stats,
    export_cassette,
    import_cassette,
)
from medmis.tools._llm_cache import (
    StoreCache,
    attach_cache,
    model_cache_key,
    normalize_llm_string,
)
from medmis.tools._store import RecordStore, canonical_json, key_digest


class Producer:
    """A ``produce`` callable that counts its calls."""

    def __init__(self, value: Any = None, error: BaseException | None = None) -> None:
        self.value = value
        self.error = error
        self.calls = 0

    async def __call__(self) -> Any:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return self.value


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    return tmp_path / "cache"


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise ConnectionRefusedError("network is gone in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


PAGE = {"url": "https://example.org/a", "final_url": "https://example.org/a", "title": "Scurvy",
        "text": "Vitamin C — ascorbate", "n": 2}


# ---------------------------------------------------------------------------------------
# keys
# ---------------------------------------------------------------------------------------


def test_key_ignores_dict_order_and_keeps_unicode() -> None:
    a = {"url": "https://x.org/é", "goal": None}
    b = {"goal": None, "url": "https://x.org/é"}
    assert key_digest("visit", a) == key_digest("visit", b)
    assert key_digest("visit", a) != key_digest("search", a)
    assert canonical_json(a) == '{"goal":null,"url":"https://x.org/é"}'
    kind, digest = key_digest("visit", a).split(":")
    assert kind == "visit" and len(digest) == 64


def test_bad_mode_and_kind_are_refused(cache_dir: Path) -> None:
    with pytest.raises(ValueError, match="cache mode"):
        RecordStore(cache_dir, "replay-ish")  # type: ignore[arg-type]
    with RecordStore(cache_dir) as store, pytest.raises(ValueError, match="kinds"):
        store.put("Visit:x", {}, 1)


# ---------------------------------------------------------------------------------------
# modes
# ---------------------------------------------------------------------------------------


async def test_record_reads_through_and_marks_the_probe(cache_dir: Path) -> None:
    produce = Producer({"pair": (1, 2), **PAGE})
    with RecordStore(cache_dir, "record") as store:
        with cache_probe() as probe:
            first = await store.through("visit", {"url": PAGE["url"]}, produce)
        assert probe.result is False
        with cache_probe() as probe:
            second = await store.through("visit", {"url": PAGE["url"]}, produce)
        assert probe.result is True
        assert produce.calls == 1
        # the miss returns the JSON round trip too, so miss and hit are indistinguishable
        assert first == second == {"pair": [1, 2], **PAGE}
        entry = store.get_entry("visit", {"url": PAGE["url"]})
        assert entry is not None and entry.key == {"url": PAGE["url"]}
        assert store.stats()["hits"] == 1 and store.stats()["misses"] == 1


async def test_live_never_touches_the_store(cache_dir: Path) -> None:
    produce = Producer(PAGE)
    store = RecordStore(cache_dir, "live")
    with cache_probe() as probe:
        await store.through("visit", {"url": "u"}, produce)
        await store.through("visit", {"url": "u"}, produce)
    assert produce.calls == 2
    assert probe.result is None
    assert not cache_dir.exists()


async def test_replay_hit_and_miss(cache_dir: Path) -> None:
    with RecordStore(cache_dir, "record") as store:
        await store.through("visit", {"url": "https://a.org"}, Producer(PAGE))
    never = Producer(error=AssertionError("replay must not produce"))
    with RecordStore(cache_dir, "replay") as store:
        assert await store.through("visit", {"url": "https://a.org"}, never) == PAGE
        with cache_probe() as probe, pytest.raises(ReplayMissError) as info:
            await store.through("visit", {"url": "https://b.org"}, never)
        assert probe.result is False
    assert never.calls == 0
    message = str(info.value)
    assert message.startswith("replay miss: visit {'url': 'https://b.org'}")
    assert "--cache record" in message


async def test_refresh_always_produces_and_overwrites(cache_dir: Path) -> None:
    with RecordStore(cache_dir, "record") as store:
        await store.through("search", {"q": "x"}, Producer([1]))
    produce = Producer([2])
    with RecordStore(cache_dir, "refresh") as store:
        with cache_probe() as probe:
            assert await store.through("search", {"q": "x"}, produce) == [2]
        assert probe.result is False
        assert await store.through("search", {"q": "x"}, produce) == [2]
        assert produce.calls == 2
        assert store.get("search", {"q": "x"}) == [2]


async def test_failures_and_unserialisable_values_are_never_stored(cache_dir: Path) -> None:
    with RecordStore(cache_dir, "record") as store:
        with pytest.raises(TimeoutError):
            await store.through("visit", {"url": "u"}, Producer(error=TimeoutError("slow")))
        with pytest.raises(TypeError):
            await store.through("visit", {"url": "v"}, Producer({"a": object()}))
        assert store.stats()["total_entries"] == 0
        produce = Producer("ok")
        assert await store.through("visit", {"url": "u"}, produce) == "ok"
        assert produce.calls == 1


def test_sync_helpers_distinguish_null_from_missing(cache_dir: Path) -> None:
    with RecordStore(cache_dir) as store:
        assert store.get("visit", {"url": "u"}, default="missing") == "missing"
        store.put("visit", {"url": "u"}, None)
        assert store.get("visit", {"url": "u"}, default="missing") is None
        entry = store.get_entry("visit", {"url": "u"})
        assert entry is not None and entry.value is None
        assert store.delete("visit", {"url": "u"})
        assert store.get_entry("visit", {"url": "u"}) is None


def test_stats_and_prune(cache_dir: Path) -> None:
    with RecordStore(cache_dir) as store:
        store.put("visit", {"url": "old"}, 1, created=time.time() - 10 * 86400)
        store.put("visit", {"url": "new"}, 2)
        store.put("search", {"q": "a"}, 3, created=time.time() - 10 * 86400)
        store.put("model", {"m": 1}, 4)
        stats = store.stats()
        assert stats["entries"] == {"model": 1, "search": 1, "visit": 2}
        assert stats["total_entries"] == 4 and stats["size_bytes"] > 0
        assert store.prune() == 0  # a bare prune only drops what has expired
        assert store.prune(older_than_s=5 * 86400, kind="visit") == 1
        assert store.stats()["entries"] == {"model": 1, "search": 1, "visit": 1}
        assert store.prune(kind="model") == 1
        assert store.prune(older_than_s=5 * 86400) == 1
        assert store.stats()["entries"] == {"visit": 1}


def test_entries_expire(cache_dir: Path) -> None:
    with RecordStore(cache_dir, expire_s=0.05) as store:
        store.put("visit", {"url": "u"}, 1)
        time.sleep(0.1)
        assert store.get_entry("visit", {"url": "u"}) is None
        assert store.prune() == 1


async def test_warm_lookups_answer_from_the_store(cache_dir: Path) -> None:
    # the lookup's latency (p50 <= 1 ms) is the bench's store_lookup figure, not a test's clock
    with RecordStore(cache_dir, "record") as store:
        await store.through("visit", {"url": "u"}, Producer({"text": "x" * 4000}))
        for _ in range(300):
            produce = Producer()
            assert await store.through("visit", {"url": "u"}, produce) == {"text": "x" * 4000}
            assert produce.calls == 0


# ---------------------------------------------------------------------------------------
# concurrency
# ---------------------------------------------------------------------------------------


def test_concurrent_thread_writers_lose_nothing(cache_dir: Path) -> None:
    store = RecordStore(cache_dir)
    errors: list[BaseException] = []

    def write(worker: int) -> None:
        try:
            for i in range(50):
                store.put("visit", {"worker": worker, "i": i}, {"v": i})
        except BaseException as exc:  # pragma: no cover - surfaced by the assert below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert store.stats()["entries"] == {"visit": 400}
    store.close()


async def test_concurrent_tasks_lose_nothing(cache_dir: Path) -> None:
    with RecordStore(cache_dir, "record") as store:

        async def one(i: int) -> Any:
            async def produce() -> dict[str, int]:
                await asyncio.sleep(0)
                return {"i": i}

            return await store.through("search", {"q": f"q{i}"}, produce)

        results = await asyncio.gather(*(one(i) for i in range(200)))
        assert results == [{"i": i} for i in range(200)]
        assert store.stats()["entries"] == {"search": 200}


def _write_many(directory: str, worker: int, count: int) -> None:
    # runs in a spawned process: each process opens its own store, as a real run would
    with RecordStore(directory, "record") as store:
        for i in range(count):
            store.put("visit", {"worker": worker, "i": i}, {"text": f"page {worker}-{i}"})


def test_concurrent_process_writers_lose_nothing(cache_dir: Path) -> None:
    RecordStore(cache_dir).put("search", {"q": "seed"}, 0)  # the parent has the store open too
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_write_many, args=(str(cache_dir), w, 75)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    with RecordStore(cache_dir, "replay") as store:
        assert store.stats()["entries"] == {"search": 1, "visit": 300}
        assert store.get("visit", {"worker": 3, "i": 74}) == {"text": "page 3-74"}


# ---------------------------------------------------------------------------------------
# LangChain cache adapter
# ---------------------------------------------------------------------------------------

TOOL_REPLY = AIMessage(
    content="Let me check.",
    tool_calls=[{"name": "search_web", "args": {"query": "scurvy vitamin"}, "id": "call_abc"}],
    usage_metadata={"input_tokens": 11, "output_tokens": 7, "total_tokens": 18},
)
PROMPT = [SystemMessage("You are a physician."), HumanMessage("Which vitamin? A or B")]


def _tokens(message: AIMessage) -> tuple[int, int, int]:
    usage: Any = message.usage_metadata or {}
    return usage["input_tokens"], usage["output_tokens"], usage["total_tokens"]


async def test_model_record_then_replay_is_identical(cache_dir: Path) -> None:
    with RecordStore(cache_dir, "record") as store:
        recorded = await attach_cache(ScriptedChatModel(outputs=[TOOL_REPLY]), store).ainvoke(
            PROMPT
        )
    offline = ScriptedChatModel(outputs=[])  # would raise IndexError if actually called
    with RecordStore(cache_dir, "replay") as store:
        replayed = await attach_cache(offline, store).ainvoke(PROMPT)
    assert offline.calls == []
    assert isinstance(replayed, AIMessage)
    assert replayed.content == recorded.content == "Let me check."
    assert (
        replayed.tool_calls
        == recorded.tool_calls
        == [
            {
                "name": "search_web",
                "args": {"query": "scurvy vitamin"},
                "id": "call_abc",
                "type": "tool_call",
            }
        ]
    )
    assert _tokens(replayed) == _tokens(recorded) == (11, 7, 18)


def test_model_sync_invoke_goes_through_the_store(cache_dir: Path) -> None:
    model = ScriptedChatModel(outputs=["B"])
    with RecordStore(cache_dir, "record") as store:
        cached = attach_cache(model, store)
        assert cached.invoke(PROMPT).content == "B"
        assert cached.invoke(PROMPT).content == "B"
    assert len(model.calls) == 1


async def test_model_names_do_not_collide(cache_dir: Path) -> None:
    one = ScriptedChatModel(outputs=["A"], model_name="model-one")
    two = ScriptedChatModel(outputs=["B"], model_name="model-two")
    with RecordStore(cache_dir, "record") as store:
        assert (await attach_cache(one, store).ainvoke(PROMPT)).content == "A"
        assert (await attach_cache(two, store).ainvoke(PROMPT)).content == "B"
        assert store.stats()["entries"] == {"model": 2}
    with RecordStore(cache_dir, "replay") as store:
        replay_one = ScriptedChatModel(outputs=[], model_name="model-one")
        replay_two = ScriptedChatModel(outputs=[], model_name="model-two")
        assert (await attach_cache(replay_one, store).ainvoke(PROMPT)).content == "A"
        assert (await attach_cache(replay_two, store).ainvoke(PROMPT)).content == "B"


async def test_temperature_changes_the_key_and_timeout_does_not(cache_dir: Path) -> None:
    model = ScriptedChatModel(outputs=["cold", "warm", "unused"])
    with RecordStore(cache_dir, "record") as store:
        cached = attach_cache(model, store)
        cold = await cached.bind(temperature=0.0, timeout=5).ainvoke(PROMPT)
        warm = await cached.bind(temperature=0.7, timeout=5).ainvoke(PROMPT)
        patient = await cached.bind(temperature=0.0, timeout=600, max_retries=9).ainvoke(PROMPT)
    assert (cold.content, warm.content, patient.content) == ("cold", "warm", "cold")
    assert len(model.calls) == 2


async def test_message_and_tool_call_ids_do_not_matter(cache_dir: Path) -> None:
    def history(call_id: str, message_id: str) -> list[Any]:
        return [
            HumanMessage("Which vitamin?", id=message_id),
            AIMessage(
                "",
                id=f"run-{message_id}",
                tool_calls=[{"name": "search_web", "args": {"query": "q"}, "id": call_id}],
                response_metadata={"created": message_id},
            ),
            ToolMessage("[1] Vitamin C …", tool_call_id=call_id, id=message_id),
        ]

    model = ScriptedChatModel(outputs=["B", "C"])
    with RecordStore(cache_dir, "record") as store:
        cached = attach_cache(model, store)
        first = await cached.ainvoke(history("call_1", "m1"))
        second = await cached.ainvoke(history("toolu_9", "m2"))
    assert first.content == second.content == "B"
    assert len(model.calls) == 1
    # the aliasing keeps links: a tool result answering a different call is a different key
    linked = model_cache_key(_dumps(history("c1", "x")), "[]")
    unlinked = history("c1", "x")
    unlinked[2] = ToolMessage("[1] Vitamin C …", tool_call_id="other")
    assert linked != model_cache_key(_dumps(unlinked), "[]")


def _dumps(messages: list[Any]) -> str:
    from langchain_core.load import dumps

    return dumps(messages)


async def test_model_replay_miss_raises_and_names_the_model(cache_dir: Path) -> None:
    offline = ScriptedChatModel(outputs=["never"], model_name="gemini-x")
    with RecordStore(cache_dir, "replay") as store:
        with cache_probe() as probe, pytest.raises(ReplayMissError) as info:
            await attach_cache(offline, store).ainvoke(PROMPT)
        assert probe.result is False
    assert offline.calls == []
    message = str(info.value)
    assert message.startswith("replay miss: model 'gemini-x'")
    assert "--cache record" in message


async def test_model_errors_are_not_stored(cache_dir: Path) -> None:
    model = ScriptedChatModel(outputs=[RuntimeError("503 from provider"), "B"])
    with RecordStore(cache_dir, "record") as store:
        cached = attach_cache(model, store)
        with pytest.raises(RuntimeError):
            await cached.ainvoke(PROMPT)
        assert store.stats()["total_entries"] == 0
        assert (await cached.ainvoke(PROMPT)).content == "B"
        assert len(model.calls) == 2


async def test_probe_reports_hits_in_defender_traces(cache_dir: Path) -> None:
    with RecordStore(cache_dir, "record") as store:
        ctx = DefenderContext(model=attach_cache(ScriptedChatModel(outputs=["B"]), store))
        await ctx.generate(PROMPT)
        await ctx.generate(PROMPT)
    assert [step.cache_hit for step in ctx.trace] == [False, True]


def test_live_mode_attaches_nothing(cache_dir: Path) -> None:
    model = ScriptedChatModel(outputs=["B"])
    store = RecordStore(cache_dir, "live")
    assert attach_cache(model, store) is model
    assert StoreCache(store).lookup("[]", "[]") is None
    assert not cache_dir.exists()


def test_clear_removes_only_model_entries(cache_dir: Path) -> None:
    with RecordStore(cache_dir) as store:
        store.put("model", {"m": 1}, 1)
        store.put("visit", {"url": "u"}, 2)
        StoreCache(store).clear()
        assert store.stats()["entries"] == {"visit": 1}


def test_provider_llm_string_is_normalised() -> None:
    from langchain_openai import ChatOpenAI

    def llm_string(**overrides: Any) -> str:
        params: dict[str, Any] = {
            "model": "gpt-4o-mini",
            "api_key": "sk-test-not-a-key",
            "base_url": "http://localhost:8000/v1",
            "temperature": 0.2,
            "timeout": 30,
            "max_retries": 2,
            "default_headers": {"Authorization": "Bearer secret"},
        }
        params.update(overrides)
        return ChatOpenAI(**params)._get_llm_string(stop=["\n\n"], tool_choice="auto")

    base = normalize_llm_string(llm_string())
    assert base["model"] == "gpt-4o-mini"
    assert base["provider"].endswith("ChatOpenAI")
    assert base["params"] == {
        "openai_api_base": "http://localhost:8000/v1",
        "temperature": 0.2,
        "stop": ["\n\n"],
        "tool_choice": "auto",
    }
    assert "secret" not in canonical_json(base) and "sk-test" not in canonical_json(base)
    assert normalize_llm_string(llm_string(timeout=300, max_retries=9, api_key="sk-other")) == base
    assert normalize_llm_string(llm_string(model="gpt-4o")) != base
    assert normalize_llm_string(llm_string(base_url="http://other:8000/v1")) != base
    assert normalize_llm_string(llm_string(temperature=0.0)) != base
    assert normalize_llm_string(llm_string(seed=7)) != base


# ---------------------------------------------------------------------------------------
# cassettes and the CLI helpers
# ---------------------------------------------------------------------------------------


async def _record_trace(directory: Path) -> AIMessage:
    with RecordStore(directory, "record") as store:
        await store.through("search", {"query": "scurvy", "max_results": 5}, Producer([PAGE]))
        await store.through("visit", {"url": "https://b.org/é"}, Producer(PAGE))
        await store.through("visit", {"url": "https://a.org"}, Producer({"url": "https://a.org", "final_url": "https://a.org", "text": "ünïcode ✓"}))
        model = attach_cache(ScriptedChatModel(outputs=[TOOL_REPLY]), store)
        return await model.ainvoke(PROMPT)


async def test_cassette_round_trip_replays_offline(
    tmp_path: Path, cache_dir: Path, no_network: None
) -> None:
    recorded = await _record_trace(cache_dir)
    cassette = tmp_path / "trace.jsonl"
    with RecordStore(cache_dir, "replay") as store:
        assert export_cassette(store, cassette) == 4

    fresh = tmp_path / "fresh"
    never = Producer(error=AssertionError("replay must not produce"))
    with RecordStore(fresh, "replay", expire_s=None) as store:
        assert import_cassette(store, cassette) == 4
        assert await store.through("visit", {"url": "https://b.org/é"}, never) == PAGE
        hits = await store.through("search", {"max_results": 5, "query": "scurvy"}, never)
        assert hits == [PAGE]
        offline = ScriptedChatModel(outputs=[])
        replayed = await attach_cache(offline, store).ainvoke(PROMPT)
        assert replayed.tool_calls == recorded.tool_calls
        assert _tokens(replayed) == _tokens(recorded)
        with pytest.raises(ReplayMissError):
            await store.through("visit", {"url": "https://c.org"}, never)
        # the imported store exports the same bytes as the original
        again = tmp_path / "again.jsonl"
        export_cassette(store, again)
    assert again.read_bytes() == cassette.read_bytes()


async def test_export_is_byte_stable_sorted_and_canonical(tmp_path: Path, cache_dir: Path) -> None:
    await _record_trace(cache_dir)
    first, second = tmp_path / "1.jsonl", tmp_path / "2.jsonl"
    with RecordStore(cache_dir, "replay") as store:
        export_cassette(store, first)
        export_cassette(store, second)
        assert export_cassette(store, tmp_path / "visits.jsonl", kinds=["visit"]) == 2
    assert first.read_bytes() == second.read_bytes()
    lines = first.read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines]
    assert [list(row) for row in rows] == [["kind", "key", "value", "created"]] * 4
    order = [(row["kind"], canonical_json(row["key"])) for row in rows]
    assert order == sorted(order)
    assert [row["kind"] for row in rows] == ["model", "search", "visit", "visit"]
    assert "ünïcode ✓" in lines[-2] or "ünïcode ✓" in lines[-1]  # UTF-8 kept, not escaped
    for line, row in zip(lines, rows, strict=True):
        assert canonical_json(row["key"]) in line and canonical_json(row["value"]) in line


def test_import_rejects_a_bad_cassette_without_writing(tmp_path: Path, cache_dir: Path) -> None:
    cassette = tmp_path / "bad.jsonl"
    good = {"kind": "visit", "key": {"url": "u"}, "value": {"url": "u", "final_url": "u"}, "created": 1.0}
    cassette.write_text(json.dumps(good) + "\n\n" + '{"kind": "visit"}\n', encoding="utf-8")
    with RecordStore(cache_dir) as store:
        with pytest.raises(ValueError, match=r"bad\.jsonl:3"):
            import_cassette(store, cassette)
        assert store.stats()["total_entries"] == 0


async def test_cli_helpers(tmp_path: Path, cache_dir: Path) -> None:
    await _record_trace(cache_dir)
    stats = cache_stats(cache_dir)
    assert stats["entries"] == {"model": 1, "search": 1, "visit": 2}
    assert "hits" not in stats

    cassette = tmp_path / "visits.jsonl"
    assert cache_export(cache_dir, cassette, ["visit"]) == 2
    other = tmp_path / "other"
    assert cache_import(other, cassette) == 2
    assert cache_stats(other)["entries"] == {"visit": 2}

    assert cache_prune(cache_dir) == 0
    assert cache_prune(cache_dir, kind="model") == 1
    assert cache_prune(cache_dir, older_than_days=0) == 3
    assert cache_stats(cache_dir)["total_entries"] == 0

    with pytest.raises(FileNotFoundError):
        cache_stats(tmp_path / "typo")


def test_unparseable_call_params_still_give_a_stable_key() -> None:
    def llm_string(address: str) -> str:
        return (
            "[('_type', 'custom'), ('model', 'm'), ('response_format', <class 'app.Answer'>), "
            f"('client', <Client object at {address}>)]"
        )

    key = normalize_llm_string(llm_string("0x7f01"))
    assert key == normalize_llm_string(llm_string("0x7fff"))
    assert "0x" not in canonical_json(key)
