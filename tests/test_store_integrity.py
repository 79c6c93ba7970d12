"""The store never lies: damaged entries are loud errors, cassettes import all or nothing."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from medmis.experiments.cli import main
from medmis.tools import RecordStore, ReplayMissError, StoreCorruptError
from medmis.tools._cassette import CassetteError, cache_verify, export_cassette, import_cassette
from medmis.tools._entry import canonical_json, key_digest

# diskcache keeps text under 32 KiB inside SQLite and longer text in a value file of its own;
# the values are shaped as recorded pages and search responses both (the shape is checked on
# import and by verify; see medmis.tools._shapes)
_URL = "https://example.org/scurvy"
SMALL = {"url": _URL, "final_url": _URL, "query": "q", "text": "Vitamin C deficiency causes scurvy.", "n": 1}
LARGE = {"url": _URL, "final_url": _URL, "query": "q", "text": "Vitamin C deficiency causes scurvy. " * 2000, "n": 2}
OTHER = {"url": "b", "final_url": "b"}
KEY = {"url": "https://example.org/scurvy"}


class Never:
    """A ``produce`` that must not run: a damaged entry is not a miss to be re-fetched."""

    calls = 0

    async def __call__(self) -> Any:
        self.calls += 1
        raise AssertionError("produce called for a damaged entry")


def _db(cache_dir: Path) -> sqlite3.Connection:
    return sqlite3.connect(cache_dir / "cache.db")


def _value_file(cache_dir: Path) -> Path:
    with _db(cache_dir) as db:
        (name,) = db.execute("SELECT filename FROM Cache WHERE filename IS NOT NULL").fetchone()
    return cache_dir / name


def _edit_small(cache_dir: Path, old: str, new: str) -> None:
    """Edit the only entry of a one-entry store in place."""
    db = _db(cache_dir)
    with db:
        ((text,),) = db.execute("SELECT value FROM Cache").fetchall()
        assert old in text
        db.execute("UPDATE Cache SET value = ?", (text.replace(old, new),))
    db.close()


@pytest.mark.parametrize("mode", ["record", "replay"])
async def test_an_edited_small_value_is_corruption_not_a_hit(tmp_path: Path, mode: str) -> None:
    cache_dir = tmp_path / "cache"
    with RecordStore(cache_dir) as store:
        store.put("visit", KEY, SMALL)
    _edit_small(cache_dir, "scurvy", "rickets")
    never = Never()
    store = RecordStore(cache_dir, mode)  # type: ignore[arg-type]
    with store, pytest.raises(StoreCorruptError) as caught:
        await store.through("visit", KEY, never)
    assert never.calls == 0
    message = str(caught.value)
    assert message.startswith("cache corrupt:") and str(cache_dir) in message
    assert key_digest("visit", KEY) in message and "content hash" in message
    assert "\n" not in message


async def test_an_edited_value_file_is_corruption(tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"
    with RecordStore(cache_dir) as store:
        store.put("visit", KEY, LARGE)
    path = _value_file(cache_dir)
    path.write_text(path.read_text(encoding="utf-8").replace("scurvy", "rickets", 1), "utf-8")
    with RecordStore(cache_dir, "replay") as store, pytest.raises(StoreCorruptError, match="hash"):
        await store.through("visit", KEY, Never())


async def test_a_deleted_value_file_is_corruption_not_a_replay_miss(tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"
    with RecordStore(cache_dir) as store:
        store.put("visit", KEY, LARGE)
    _value_file(cache_dir).unlink()
    for mode in ("replay", "record"):
        store = RecordStore(cache_dir, mode)  # type: ignore[arg-type]
        with store, pytest.raises(StoreCorruptError, match="missing") as caught:
            await store.through("visit", KEY, Never())
        assert not isinstance(caught.value, ReplayMissError)
    # refresh re-records the entry, after which it reads back sound
    async def produce() -> Any:
        return LARGE

    with RecordStore(cache_dir, "refresh") as store:
        await store.through("visit", KEY, produce)
    with RecordStore(cache_dir, "replay") as store:
        assert await store.through("visit", KEY, Never()) == LARGE


def test_an_entry_moved_under_another_key_and_an_unhashed_entry_are_caught(tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"
    other = {"url": "https://example.org/rickets"}
    with RecordStore(cache_dir) as store:
        store.put("visit", KEY, SMALL)
        store.put("visit", other, {"text": "vitamin D"})
    db = _db(cache_dir)
    with db:
        (text,) = db.execute("SELECT value FROM Cache WHERE key = ?", (key_digest("visit", KEY),)).fetchone()
        db.execute("UPDATE Cache SET value = ? WHERE key = ?", (text, key_digest("visit", other)))
    db.close()
    with RecordStore(cache_dir, "replay") as store:
        with pytest.raises(StoreCorruptError, match="disk key"):
            store.get("visit", other)
        assert store.get("visit", KEY) == SMALL
        # an entry written before values carried hashes vouches for nothing
        unhashed = {"kind": "visit", "key": KEY, "value": SMALL, "created": 1.0}
        store.cache.set(key_digest("visit", KEY), canonical_json(unhashed))
        with pytest.raises(StoreCorruptError, match="no content hash"):
            store.get("visit", KEY)


async def test_recorded_entries_do_not_expire(tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"
    with RecordStore(cache_dir, "record") as store:
        store.put("visit", KEY, SMALL, created=time.time() - 400 * 86400)
        assert store.expire_s is None
    with _db(cache_dir) as db:
        (expire,) = db.execute("SELECT expire_time FROM Cache").fetchone()
    assert expire is None
    with RecordStore(cache_dir, "replay") as store:
        assert store.prune() == 0
        assert await store.through("visit", KEY, Never()) == SMALL


def _generation(text: str) -> Any:
    from langchain_core.load import dumps
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration

    return json.loads(dumps(ChatGeneration(message=AIMessage(text))))


def test_verify_lists_every_damaged_entry(tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"
    with RecordStore(cache_dir) as store:
        store.put("visit", KEY, SMALL)
        store.put("search", {"q": "scurvy"}, LARGE)
        store.put("model", {"m": 1}, {"generations": [_generation("B")]})
    assert cache_verify(cache_dir) == (3, [])
    _edit_small_one(cache_dir, key_digest("visit", KEY))
    _value_file(cache_dir).unlink()
    checked, problems = cache_verify(cache_dir)
    assert checked == 3
    assert sorted(p.digest or "" for p in problems) == sorted(
        [key_digest("visit", KEY), key_digest("search", {"q": "scurvy"})]
    )
    with RecordStore(cache_dir) as store:
        assert store.prune(corrupt=True) == 2
    assert cache_verify(cache_dir) == (1, [])


# -- cassettes ---------------------------------------------------------------------------


def _row(value: Any, created: float = 1.0, key: dict[str, Any] | None = None) -> str:
    return json.dumps({"kind": "visit", "key": key or KEY, "value": value, "created": created})


def test_import_accepts_identical_duplicates(tmp_path: Path) -> None:
    cassette = tmp_path / "c.jsonl"
    cassette.write_text("\n".join([_row(SMALL), _row(SMALL, 2.0), _row(OTHER, key={"url": "b"})]) + "\n")
    with RecordStore(tmp_path / "cache") as store:
        assert import_cassette(store, cassette) == 2
        entry = store.get_entry("visit", KEY)
        assert entry is not None and entry.value == SMALL and entry.created == 1.0


def test_import_refuses_two_values_for_one_key(tmp_path: Path) -> None:
    cassette = tmp_path / "c.jsonl"
    cassette.write_text("\n".join([_row(SMALL), _row(OTHER, key={"url": "b"}), _row(LARGE)]) + "\n")
    with RecordStore(tmp_path / "cache") as store:
        with pytest.raises(CassetteError) as caught:
            import_cassette(store, cassette)
        assert store.stats()["total_entries"] == 0
    message = str(caught.value)
    assert f"{cassette}:3:" in message and "line 1" in message
    assert "example.org/scurvy" in message and "\n" not in message


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"kind": "visit", "key": {"url": "u"}, "value": [1, 2\n', "not a cassette entry"),
        ('{"kind": "visit", "key": {"url": "u"}}\n', "missing field 'value'"),
        ('{"kind": "Visit!", "key": {"url": "u"}, "value": 1}\n', "lower-case"),
        ('{"kind": "visit", "key": {}, "value": 1, "created": "yesterday"}\n', "created"),
        ("[1, 2, 3]\n", "'key' object"),
    ],
)
def test_a_garbled_cassette_is_one_line_with_file_and_line(
    tmp_path: Path, text: str, reason: str
) -> None:
    cassette = tmp_path / "bad.jsonl"
    cassette.write_text(_row(SMALL) + "\n\n" + text, encoding="utf-8")
    with RecordStore(tmp_path / "cache") as store:
        with pytest.raises(CassetteError, match=reason) as caught:
            import_cassette(store, cassette)
        assert store.stats()["total_entries"] == 0
    assert str(caught.value).startswith(f"{cassette}:3: ") and "\n" not in str(caught.value)


def test_export_refuses_an_entry_holding_a_configured_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-live-0123456789abcdefXYZ"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    with RecordStore(tmp_path / "cache") as store:
        store.put("visit", KEY, {"text": f"echo {secret}"})
        with pytest.raises(CassetteError, match="configured API key") as caught:
            export_cassette(store, tmp_path / "out.jsonl")
    assert secret not in str(caught.value)
    assert not (tmp_path / "out.jsonl").exists()


# -- the CLI -----------------------------------------------------------------------------


def _one_line_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("medmis: ") and "\n" not in err and "Traceback" not in err
    return err


def test_cli_reports_an_unreadable_store_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    (cache_dir / "cache.db").write_bytes(b"this is not a database " * 100)
    for command in (["stats"], ["export", str(tmp_path / "c.jsonl")], ["verify"]):
        err = _one_line_exit_2(["cache", *command, "--cache-dir", str(cache_dir)], capsys)
        assert "cache corrupt" in err and str(cache_dir) in err
    assert not (tmp_path / "c.jsonl").exists()


def test_cli_export_of_a_damaged_entry_and_a_garbled_import_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache_dir = tmp_path / "cache"
    with RecordStore(cache_dir) as store:
        store.put("visit", KEY, SMALL)
    _edit_small(cache_dir, "scurvy", "rickets")
    err = _one_line_exit_2(["cache", "export", "--cache-dir", str(cache_dir), str(tmp_path / "c")], capsys)
    assert key_digest("visit", KEY) in err
    garbled = tmp_path / "garbled.jsonl"
    garbled.write_text(_row(SMALL) + "\n" + "{not json\n" * 19, encoding="utf-8")
    err = _one_line_exit_2(["cache", "import", "--cache-dir", str(tmp_path / "new"), str(garbled)], capsys)
    assert f"{garbled}:2:" in err


def test_cli_verify_exit_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cache_dir = tmp_path / "cache"
    with RecordStore(cache_dir) as store:
        store.put("visit", KEY, SMALL)
        store.put("search", {"q": "scurvy"}, SMALL)
    assert main(["cache", "verify", "--cache-dir", str(cache_dir)]) == 0
    assert "ok: 2 entries" in capsys.readouterr().out
    _edit_small_one(cache_dir, key_digest("visit", KEY))
    assert main(["cache", "verify", "--cache-dir", str(cache_dir)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"damaged: {key_digest('visit', KEY)}: value does not match its content hash"
    assert out[-1].startswith("1 of 2 entries") and len(out) == 2
    assert main(["cache", "prune", "--corrupt", "--cache-dir", str(cache_dir)]) == 0
    assert main(["cache", "verify", "--cache-dir", str(cache_dir)]) == 0
    _one_line_exit_2(["cache", "verify", "--cache-dir", str(tmp_path / "typo")], capsys)


def _edit_small_one(cache_dir: Path, disk_key: str) -> None:
    db = _db(cache_dir)
    with db:
        (text,) = db.execute("SELECT value FROM Cache WHERE key = ?", (disk_key,)).fetchone()
        db.execute("UPDATE Cache SET value = ? WHERE key = ?", (text.replace("scurvy", "gout"), disk_key))
    db.close()


async def test_an_edited_model_reply_is_never_replayed(tmp_path: Path) -> None:
    from langchain_core.messages import AIMessage, HumanMessage

    from medmis.agents import ScriptedChatModel
    from medmis.tools import attach_cache

    cache_dir = tmp_path / "cache"
    prompt = [HumanMessage("Which vitamin prevents scurvy? A or B")]
    with RecordStore(cache_dir, "record") as store:
        model = attach_cache(ScriptedChatModel(outputs=[AIMessage("Final answer: B")]), store)
        assert (await model.ainvoke(prompt)).content == "Final answer: B"
    _edit_small(cache_dir, "Final answer: B", "Final answer: A")
    for mode in ("record", "replay"):
        store = RecordStore(cache_dir, mode)  # type: ignore[arg-type]
        # an empty script: a model call would raise IndexError, not the corruption
        model = attach_cache(ScriptedChatModel(outputs=[]), store)
        with store, pytest.raises(StoreCorruptError, match="content hash"):
            await model.ainvoke(prompt)


# -- import never overwrites silently; wrong shapes and bad bytes are named ------------------


def test_import_refuses_to_overwrite_a_recording_with_another_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache_dir = tmp_path / "cache"
    with RecordStore(cache_dir) as store:
        store.put("visit", KEY, SMALL, created=5.0)
    edited = {**SMALL, "text": "Vitamin C deficiency causes gout."}
    cassette = tmp_path / "c.jsonl"
    cassette.write_text(_row(OTHER, key={"url": "b"}) + "\n" + _row(edited) + "\n", encoding="utf-8")
    err = _one_line_exit_2(["cache", "import", "--cache-dir", str(cache_dir), str(cassette)], capsys)
    assert f"{cassette}:2:" in err and "example.org/scurvy" in err and "already recorded" in err
    assert "--overwrite" in err
    with RecordStore(cache_dir) as store:  # nothing written: not even the new key
        entry = store.get_entry("visit", KEY)
        assert entry is not None and entry.value == SMALL
        assert store.get_entry("visit", {"url": "b"}) is None
    # the same value again is no change (the recording keeps its time)
    same = tmp_path / "same.jsonl"
    same.write_text(_row(SMALL, created=9.0) + "\n", encoding="utf-8")
    assert main(["cache", "import", "--cache-dir", str(cache_dir), str(same)]) == 0
    with RecordStore(cache_dir) as store:
        entry = store.get_entry("visit", KEY)
        assert entry is not None and entry.created == 5.0
    # --overwrite replaces on purpose
    assert main(["cache", "import", "--overwrite", "--cache-dir", str(cache_dir), str(cassette)]) == 0
    with RecordStore(cache_dir) as store:
        entry = store.get_entry("visit", KEY)
        assert entry is not None and entry.value == edited


@pytest.mark.parametrize(
    ("kind", "value", "reason"),
    [
        ("visit", None, "visit entry"),
        ("visit", {"text": "no url"}, "url: Field required"),
        ("search", {"results": "none"}, "search entry"),
        ("search", 5, "expected a list of results"),
        ("model", None, "'generations' list"),
        ("model", {"generations": [{"text": "B"}]}, "model entry"),
        ("model", {"generations": []}, "empty"),
    ],
)
def test_a_value_of_the_wrong_shape_fails_at_import_and_at_verify(
    tmp_path: Path, kind: str, value: Any, reason: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cassette = tmp_path / "c.jsonl"
    bad = json.dumps({"kind": kind, "key": {"q": 1}, "value": value, "created": 1.0})
    cassette.write_text(_row(SMALL) + "\n" + bad + "\n", encoding="utf-8")
    err = _one_line_exit_2(["cache", "import", "--cache-dir", str(tmp_path / "new"), str(cassette)], capsys)
    assert f"{cassette}:2: {kind} " in err and "wrong shape" in err and reason in err
    with RecordStore(tmp_path / "new") as store:
        assert store.stats()["total_entries"] == 0
    # the same value written past the import (an older toolkit, a hand-made store) is damage to verify
    cache_dir = tmp_path / "cache"
    with RecordStore(cache_dir) as store:
        store.put("visit", KEY, SMALL)
        store.put(kind, {"q": 1}, value)
    assert main(["cache", "verify", "--cache-dir", str(cache_dir)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"damaged: {key_digest(kind, {'q': 1})}: value has the wrong shape")
    assert out[-1].startswith("1 of 2 entries")
    assert main(["cache", "prune", "--corrupt", "--cache-dir", str(cache_dir)]) == 0
    assert cache_verify(cache_dir) == (1, [])


def test_a_non_utf8_line_is_named_by_its_own_number(tmp_path: Path) -> None:
    # far past the first read buffer, where a text-mode reader would blame an earlier line
    cassette = tmp_path / "c.jsonl"
    rows = [_row(OTHER, key={"url": f"https://example.org/{i}"}).encode() for i in range(400)]
    rows[300] = rows[300].replace(b"example.org/300", b"example.org/\xff\xfe")
    cassette.write_bytes(b"\n".join(rows) + b"\n")
    with RecordStore(tmp_path / "cache") as store:
        with pytest.raises(CassetteError) as caught:
            import_cassette(store, cassette)
        assert store.stats()["total_entries"] == 0
    assert str(caught.value) == f"{cassette}:301: not UTF-8 text"


def test_hashes_catch_edits_but_are_not_signatures(tmp_path: Path) -> None:
    # the integrity model docs/record-replay.md states: an edit with its hash recomputed is served
    import hashlib

    cache_dir = tmp_path / "cache"
    with RecordStore(cache_dir) as store:
        store.put("visit", KEY, SMALL)
    forged = {**SMALL, "text": "Vitamin C deficiency causes gout."}
    db = _db(cache_dir)
    with db:
        ((text,),) = db.execute("SELECT value FROM Cache").fetchall()
        data = json.loads(text)
        data["value"] = forged
        data["sha256"] = hashlib.sha256(canonical_json(forged).encode()).hexdigest()
        db.execute("UPDATE Cache SET value = ?", (canonical_json(data),))
    db.close()
    assert cache_verify(cache_dir) == (1, [])
    with RecordStore(cache_dir, "replay") as store:
        entry = store.get_entry("visit", KEY)
        assert entry is not None and entry.value == forged
