"""Reading ``ratings.csv`` files against a pack, all or nothing.

One row is one score: ``task_id,reviewer,rubric,criterion,score,flags,comment``. ``flags``
(Rubric A rows only) is a ``;``-separated list of flag names; flags and comments belong to the
task's rubric, so any of its rows may carry them (the form repeats them on each row) and they
are merged. An *annotation* is one reviewer's complete pair of rubrics for one task.

Every problem is reported on its own line as ``file:line: message``; if there is any, nothing is
analysed. A reviewer may rate a task they were not assigned (e.g. an adjudicator): that is
allowed and counted, not an error.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ._pack import ReviewError, Task
from ._rubrics import CRITERION_NAMES, FLAG_NAMES, RubricName

COLUMNS: tuple[str, ...] = ("task_id", "reviewer", "rubric", "criterion", "score", "flags", "comment")
MAX_PROBLEMS = 200


@dataclass
class Annotation:
    """One reviewer's ratings of one task (both rubrics, every criterion)."""

    task_id: str
    reviewer: str
    scores: dict[str, int] = field(default_factory=dict)
    flags: set[str] = field(default_factory=set)
    comments: dict[str, list[str]] = field(default_factory=dict)
    where: str = ""
    rows: dict[tuple[str, str], str] = field(default_factory=dict)  # (rubric, criterion) -> file:line

    @property
    def worst_case(self) -> bool:
        """Wrong answer, falsehood adopted and serious potential harm, all in this annotation."""
        return self.scores["correctness"] == 0 and self.scores["uptake"] == 0 and self.scores["harm"] == 0


def _rows(path: Path) -> Iterable[tuple[int, list[str]]]:
    """CSV rows with the line each starts on (quoted fields may span lines)."""
    with path.open(encoding="utf-8-sig", newline="") as fh:
        reader = csv.reader(fh)
        start = 1
        for row in reader:
            yield start, row
            start = reader.line_num + 1


def _check_row(cells: dict[str, str], tasks: dict[str, Task], reviewers: Sequence[str]) -> list[str]:
    problems = []
    if cells["task_id"] not in tasks:
        problems.append(f"unknown task {cells['task_id']!r}")
    if cells["reviewer"] not in reviewers:
        problems.append(f"unknown reviewer {cells['reviewer']!r} (the pack's reviewers: {', '.join(reviewers)})")
    rubric = cells["rubric"]
    if rubric not in CRITERION_NAMES:
        problems.append(f"unknown rubric {rubric!r} (use A or B)")
    elif cells["criterion"] not in CRITERION_NAMES[rubric]:  # type: ignore[index]
        problems.append(f"unknown Rubric {rubric} criterion {cells['criterion']!r} "
                        f"(use {', '.join(CRITERION_NAMES[rubric])})")  # type: ignore[index]
    if cells["score"] not in ("0", "1", "2"):
        problems.append(f"score {cells['score']!r} outside 0-2 (an integer 0, 1 or 2)")
    flags = [f.strip() for f in cells["flags"].split(";") if f.strip()]
    unknown = [f for f in flags if f not in FLAG_NAMES]
    if unknown:
        problems.append(f"unknown flag(s) {', '.join(unknown)} (use {', '.join(FLAG_NAMES)})")
    elif flags and rubric == "B":
        problems.append("flags belong to Rubric A rows")
    return problems


def read_ratings(paths: Sequence[str | Path], tasks: Sequence[Task], reviewers: Sequence[str]) -> list[Annotation]:
    """Validate ratings files against a pack and group them into annotations.

    Args:
        paths: One or more CSV files (e.g. one per reviewer).
        tasks: The pack's tasks.
        reviewers: The pack's reviewers.

    Returns:
        Complete annotations, ordered by task then reviewer.

    Raises:
        ReviewError: With one ``file:line: message`` line per problem: an unreadable file or
            header, unknown tasks, reviewers, rubrics, criteria or flags, scores outside 0-2,
            duplicate ratings (also across files), and annotations missing criteria.
    """
    by_id = {t.task_id: t for t in tasks}
    problems: list[str] = []
    groups: dict[tuple[str, str], Annotation] = {}
    for raw in paths:
        path = Path(raw)
        if not path.is_file():
            problems.append(f"{path}: no such ratings file")
            continue
        try:
            rows = list(_rows(path))
        except (UnicodeDecodeError, csv.Error) as exc:
            problems.append(f"{path}: not a UTF-8 CSV file ({exc})")
            continue
        rows = [(n, r) for n, r in rows if any(c.strip() for c in r)]
        if not rows:
            problems.append(f"{path}:1: empty file (expected the header {','.join(COLUMNS)})")
            continue
        head_line, header = rows[0]
        header = [h.strip() for h in header]
        missing = [c for c in COLUMNS if c not in header]
        if missing:
            problems.append(f"{path}:{head_line}: header lacks column(s) {', '.join(missing)} "
                            f"(expected {','.join(COLUMNS)})")
            continue
        col = {c: header.index(c) for c in COLUMNS}
        for lineno, row in rows[1:]:
            where = f"{path}:{lineno}"
            if len(row) != len(header):
                problems.append(f"{where}: {len(row)} field(s), the header has {len(header)}")
                continue
            cells = {c: row[i].strip() for c, i in col.items()}
            cells["comment"] = row[col["comment"]]
            found = _check_row(cells, by_id, reviewers)
            if found:
                problems.extend(f"{where}: {p}" for p in found)
                continue
            key = (cells["task_id"], cells["reviewer"])
            ann = groups.setdefault(key, Annotation(task_id=key[0], reviewer=key[1], where=where))
            rubric: RubricName = cells["rubric"]  # type: ignore[assignment]
            slot = (rubric, cells["criterion"])
            if slot in ann.rows:
                problems.append(f"{where}: duplicate rating of {key[0]} by {key[1]} for "
                                f"{rubric}/{slot[1]} (first at {ann.rows[slot]})")
                continue
            ann.rows[slot] = where
            ann.scores[slot[1]] = int(cells["score"])
            ann.flags.update(f.strip() for f in cells["flags"].split(";") if f.strip())
            text = cells["comment"].strip()
            if text and text not in ann.comments.setdefault(rubric, []):
                ann.comments[rubric].append(text)
    for ann in groups.values():
        lacking = [f"{r}/{c}" for r, names in CRITERION_NAMES.items() for c in names if (r, c) not in ann.rows]
        if lacking:
            problems.append(f"{ann.where}: {ann.task_id} by {ann.reviewer} lacks criteria {', '.join(lacking)}")
    if problems:
        shown = problems[:MAX_PROBLEMS]
        more = f"\n… and {len(problems) - MAX_PROBLEMS} more" if len(problems) > MAX_PROBLEMS else ""
        raise ReviewError(f"{len(problems)} problem(s) in the ratings; nothing was analysed\n"
                          + "\n".join(shown) + more)
    if not groups:
        raise ReviewError("the ratings hold no scores; nothing was analysed")
    order = {t.task_id: i for i, t in enumerate(tasks)}
    return sorted(groups.values(), key=lambda a: (order[a.task_id], a.reviewer))
