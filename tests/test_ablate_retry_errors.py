"""``medmis ablate --retry-errors`` (a run's case errors suggest it): the keys whose last record
is an error are run again, in every run folder of the grid, and nothing else is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medmis.experiments.cli import main

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "fixtures" / "medmisbench_sample.jsonl"


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def test_retry_errors_reruns_the_failed_keys_of_every_run_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    config = tmp_path / "grid.toml"
    config.write_text(f"""
data = "{SAMPLE.as_posix()}"
limit = 3
protocols = ["clean", "type1", "type2"]
out = "{out.as_posix()}"

[[models]]
spec = "mock/examinee"

[[defenders]]
name = "none"

[delivery]
type2_shuffled = true
""", encoding="utf-8")
    assert main(["ablate", str(config), "--no-progress"]) == 0
    # a failed attempt of one key in the main folder and one in the shuffled pass's folder
    failed = {}
    for folder in (out, out / "type2_shuffled"):
        path = folder / "records.jsonl"
        first = lines(path)[0]
        failed[folder] = (first["protocol"], first["item_id"], first["target"])
        with path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps({**first, "choice": None, "correct": None, "error": "HTTPError: 503"}) + "\n")
    before = {f: len(lines(f / "records.jsonl")) for f in failed}
    capsys.readouterr()

    assert main(["ablate", str(config), "--no-progress"]) == 1  # nothing to do, errors left
    assert "nothing to do" in capsys.readouterr().out

    assert main(["ablate", str(config), "--no-progress", "--retry-errors"]) == 0
    for folder, key in failed.items():
        rows = lines(folder / "records.jsonl")
        assert len(rows) == before[folder] + 1  # only the failed key ran again
        last = [r for r in rows if (r["protocol"], r["item_id"], r["target"]) == key][-1]
        assert last["error"] is None and last["choice"] is not None
    capsys.readouterr()
    assert main(["ablate", str(config), "--no-progress", "--retry-errors"]) == 0
    assert "nothing to do" in capsys.readouterr().out
