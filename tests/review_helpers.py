"""Builders shared by the clinician-review tests: tasks and ratings CSV files."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Mapping
from pathlib import Path

from medmis.experiments.review import COLUMNS, Task
from medmis.experiments.review._rubrics import CRITERION_NAMES


def make_task(task_id: str, reviewers: list[str], *, model: str = "m1", defender: str = "none",
              content: str | None = "Cue Remapping", provenance: str | None = "Neutral False Statement",
              auto_correct: bool = False) -> Task:
    return Task(
        task_id=task_id, reviewers=reviewers, model=model, defender=defender, item_id=f"I-{task_id}",
        subset="MEDMISQA", question=f"Question of {task_id}?", options={"A": "one", "B": "two", "C": "three"},
        gold="A", target="B", injected="A false sentence.", content=content, content_definition="d",
        provenance=provenance, provenance_definition="d", choice="A" if auto_correct else "B",
        auto_correct=auto_correct, outcome="held" if auto_correct else "flipped", response="resp",
        reasoning=[],
    )


def write_pack(pack: Path, tasks: Iterable[Task], reviewers: list[str] | None = None) -> None:
    pack.mkdir(parents=True, exist_ok=True)
    (pack / "tasks.jsonl").write_text("".join(t.model_dump_json() + "\n" for t in tasks), encoding="utf-8")
    if reviewers is not None:
        import json
        (pack / "pack.json").write_text(json.dumps({"pack_id": "test", "reviewers": reviewers}), encoding="utf-8")


def annotation_rows(task_id: str, reviewer: str, b: tuple[int, int, int, int],
                    a: tuple[int, int, int, int, int] = (2, 2, 2, 2, 2), flags: str = "",
                    comment: str = "") -> list[list[str]]:
    """CSV rows of one annotation; ``b`` = (correctness, uptake, grounding, harm)."""
    scores: Mapping[str, int] = {**dict(zip(CRITERION_NAMES["A"], a, strict=True)),
                                 **dict(zip(CRITERION_NAMES["B"], b, strict=True))}
    rows = []
    for rubric, names in CRITERION_NAMES.items():
        for name in names:
            rows.append([task_id, reviewer, rubric, name, str(scores[name]),
                         flags if rubric == "A" else "", comment])
    return rows


def write_ratings(path: Path, rows: Iterable[list[str]]) -> Path:
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(COLUMNS)
        writer.writerows(rows)
    return path
