"""The bundled poisoned grid (``experiments/configs/poisoned_search.toml``, as docs/poisoned-retrieval.md runs it)
recorded once and replayed into another folder with the network refused: every run folder of the
grid (the clean web and each share) holds the same records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_poison_run import _strip

from medmis.experiments.cli import main

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "experiments" / "configs" / "poisoned_search.toml"


def grid_records(out: Path) -> dict[str, list[str]]:
    """Every records.jsonl of the grid, by folder relative to ``out``, as sorted JSON lines."""
    found = {}
    for path in sorted(out.rglob("records.jsonl")):
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
        found[path.parent.relative_to(out).as_posix()] = sorted(
            json.dumps(_strip(r), sort_keys=True) for r in rows)
    return found


@pytest.mark.medmis_no_network(loopback=False)
def test_the_poisoned_grid_replays_offline_to_identical_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, medmis_no_network: list[str]
) -> None:
    monkeypatch.chdir(ROOT)  # the config's data and pages paths are relative to the checkout
    common = ["--limit", "3", "--set", "poison.share=[0, 1.0]"]
    recorded, replayed = tmp_path / "recorded", tmp_path / "replayed"
    cache = tmp_path / "cache"
    assert main(["ablate", str(CONFIG), "--out", str(recorded), *common,
                 "--set", f"cache_dir={cache.as_posix()}"]) == 0
    assert main(["ablate", str(CONFIG), "--out", str(replayed), *common,
                 "--set", f"cache_dir={cache.as_posix()}", "--set", "cache=replay"]) == 0

    first, second = grid_records(recorded), grid_records(replayed)
    assert sorted(first) == [".", "poison/share-0", "poison/share-1"]
    assert first == second
    # the replayed share-1 run was poisoned, and its search defenders saw the poison
    share1 = [json.loads(line) for line in second["poison/share-1"]]
    seen = [r["poison"]["seen"] for r in share1
            if r["protocol"] == "type1" and r["defender"].startswith("search_agent")]
    assert seen and all(n > 0 for n in seen)
    assert medmis_no_network == []  # nothing tried to leave the machine
