"""Record once, replay offline: a search_agent run replays to the same records and traces.

The cassette ``fixtures/cassettes/search_agent_hle.jsonl`` and the expected output
``search_agent_hle.expected.jsonl`` were made by a real recording run (see
``fixtures/cassettes/README.md``). Replaying with the network gone must give records and
traces identical to that recording, byte for byte, once the two fields that measure the
run itself rather than its content are set aside: wall-clock ``latency_s`` and each step's
``cache_hit`` (a miss when recording, a hit when replaying).

Regenerate after an intended change of prompts or graphs:
``python tests/test_replay.py RUN_DIR`` with RUN_DIR from the recording command.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

from medmis.experiments.harness._runner import DefenderConfig, Harness, RunConfig
from medmis.tools._cassette import import_cassette
from medmis.tools._store import RecordStore

ROOT = Path(__file__).resolve().parents[1]
CASSETTES = ROOT / "fixtures" / "cassettes"
CASSETTE = CASSETTES / "search_agent_hle.jsonl"
EXPECTED = CASSETTES / "search_agent_hle.expected.jsonl"
VOLATILE = {"latency_s", "cache_hit"}


def _strip(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in VOLATILE}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def normalised_output(run_dir: Path) -> list[str]:
    """Records and trace lines, sorted by case key, volatile fields removed, canonical JSON."""
    lines = []
    for path in [run_dir / "records.jsonl", *sorted((run_dir / "traces").glob("*.jsonl"))]:
        kind = "record" if path.name == "records.jsonl" else "trace"
        for line in path.read_text(encoding="utf-8").splitlines():
            obj = json.loads(line)
            key = [obj["protocol"], obj["item_id"], obj["target"] or ""]
            lines.append(json.dumps([kind, key, _strip(obj)], sort_keys=True, ensure_ascii=False))
    return sorted(lines)


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError("network disabled in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


def replay_config(tmp_path: Path, defender: str = "search_agent") -> RunConfig:
    store_dir = tmp_path / "store"
    with RecordStore(store_dir, "record", expire_s=None) as store:
        import_cassette(store, CASSETTE)
    return RunConfig(
        data=str(ROOT / "fixtures" / "medmisbench_sample.jsonl"),
        subset="MEDMISHLE",
        models=["mock/examinee"],
        defenders=[DefenderConfig(name=defender)],
        out=str(tmp_path / "run"),
        cache="replay",
        cache_dir=str(store_dir),
        search="local",
        progress=False,
        write_report=False,
        max_retries=0,
    )


async def test_replay_reproduces_the_recorded_run(tmp_path: Path, no_network: None) -> None:
    result = await Harness(replay_config(tmp_path), argv=["test"]).run()
    assert result.new_records == 15 and result.stats.errors == 0
    run_dir = tmp_path / "run"
    expected = EXPECTED.read_text(encoding="utf-8").splitlines()
    assert normalised_output(run_dir) == expected
    # every model call and every search was answered by the store
    steps = [s for line in (run_dir / "traces").glob("*.jsonl") for t in map(json.loads, line.read_text().splitlines()) for s in t["steps"]]
    model_steps = [s for s in steps if s["kind"] == "model"]
    searches = [s for s in steps if s["kind"] == "tool" and s["name"] == "search_web"]
    assert model_steps and all(s["cache_hit"] is True for s in model_steps)
    assert searches and all(s["cache_hit"] is True for s in searches)


async def test_replay_miss_fails_loudly_and_is_never_graded(tmp_path: Path, no_network: None) -> None:
    # the cassette holds search_agent's calls only: the warning prompt was never recorded
    result = await Harness(replay_config(tmp_path, defender="warning"), argv=["test"]).run()
    assert result.stats.errors == 15
    record = json.loads((tmp_path / "run" / "records.jsonl").read_text().splitlines()[0])
    assert record["choice"] is None and record["correct"] is None
    assert record["error"].startswith("ReplayMissError") and "model" in record["error"]


if __name__ == "__main__":  # regenerate the expected output from a recording run directory
    EXPECTED.write_text("\n".join(normalised_output(Path(sys.argv[1]))) + "\n", encoding="utf-8")
