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
import sys
from pathlib import Path
from typing import Any

import pytest

from medmis.experiments import Harness, RunConfig

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


def replay_config(medmis_replay: Any, defender: str = "search_agent") -> RunConfig:
    # the cassette in a fresh store, replayed (the pytest plug-in's fixture)
    return medmis_replay(CASSETTE).config(
        data=str(ROOT / "fixtures" / "medmisbench_sample.jsonl"),
        subset="MEDMISHLE",
        models=["mock/examinee"],
        defenders=[defender],
        search="local",
    )


@pytest.mark.medmis_no_network(loopback=False)
async def test_replay_reproduces_the_recorded_run(medmis_replay: Any, medmis_no_network: list[str]) -> None:
    config = replay_config(medmis_replay)
    result = await Harness(config, argv=["test"]).run()
    assert result.new_records == 15 and result.stats.errors == 0
    run_dir = Path(config.out)
    expected = EXPECTED.read_text(encoding="utf-8").splitlines()
    assert normalised_output(run_dir) == expected
    # every model call and every search was answered by the store
    steps = [s for line in (run_dir / "traces").glob("*.jsonl") for t in map(json.loads, line.read_text().splitlines()) for s in t["steps"]]
    model_steps = [s for s in steps if s["kind"] == "model"]
    searches = [s for s in steps if s["kind"] == "tool" and s["name"] == "search_web"]
    assert model_steps and all(s["cache_hit"] is True for s in model_steps)
    assert searches and all(s["cache_hit"] is True for s in searches)


@pytest.mark.medmis_no_network(loopback=False)
async def test_replay_miss_fails_loudly_and_is_never_graded(medmis_replay: Any, medmis_no_network: list[str]) -> None:
    # the cassette holds search_agent's calls only: the warning prompt was never recorded
    config = replay_config(medmis_replay, defender="warning")
    result = await Harness(config, argv=["test"]).run()
    assert result.stats.errors == 15
    record = json.loads((Path(config.out) / "records.jsonl").read_text().splitlines()[0])
    assert record["choice"] is None and record["correct"] is None
    assert record["error"].startswith("ReplayMissError") and "model" in record["error"]


if __name__ == "__main__":  # regenerate the expected output from a recording run directory
    EXPECTED.write_text("\n".join(normalised_output(Path(sys.argv[1]))) + "\n", encoding="utf-8")
