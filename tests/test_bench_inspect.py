"""The bench's Inspect AI comparison: the same calls as the lean client, and a turn counts only
when Inspect's log says every sample completed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medmis.experiments.bench._inspect import completed_samples
from medmis.experiments.bench._items import write_items


def test_inspect_task_makes_the_lean_clients_calls(tmp_path: Path) -> None:
    pytest.importorskip("inspect_ai")
    from medmis.experiments.bench._inspect_task import prompts, throughput
    from medmis.experiments.bench._throughput import _LEAN

    data = tmp_path / "items.jsonl"
    write_items(data, 5)
    texts = prompts(str(data))
    assert len(texts) == 15 and len(set(texts)) == 15
    # the lean client builds its bodies with the same expression
    assert 'f"{context}Question: {row[\'question\']}\\n{options}\\nAnswer with the letter."' in _LEAN
    assert texts[2].startswith("The first option is labelled first. Filler sentence")
    assert len(throughput(str(data)).dataset) == 15


def _log(folder: Path, status: str, completed: int, errors: int, samples: int) -> Path:
    folder.mkdir()
    rows = [{"id": i, "error": {"message": "x"} if i < errors else None} for i in range(samples)]
    (folder / "log.json").write_text(json.dumps({"status": status, "samples": rows,
                                                 "results": {"completed_samples": completed}}))
    return folder


def test_completed_samples_reads_status_completions_and_errors(tmp_path: Path) -> None:
    assert completed_samples(_log(tmp_path / "a", "success", 15, 0, 15)) == ("success", 15, 0)
    assert completed_samples(_log(tmp_path / "b", "error", 12, 3, 15)) == ("error", 12, 3)
    with pytest.raises(RuntimeError, match="expected one Inspect log"):
        completed_samples(tmp_path)
