"""A rubric review pack: clinicians check a rubric file before it grades anything.

``medmis review rubrics RUBRICS --data DATA --out DIR`` writes, for every item with a rubric,
its question, options and keyed answer beside each criterion (kind, points, text, and for an
``endorses_injection`` criterion the false sentence it must restate), as ``rubric_review.md``
to read and ``rubric_review.csv`` to fill: one row per criterion with empty ``verdict``
(``ok`` / ``revise`` / ``reject``) and ``comment`` columns. Checks run while writing: every
item of the rubric file is in the data, and every ``endorses_injection`` criterion names a
wrong option whose false sentence it contains (``check`` column: ``ok`` or what is wrong).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from medmis.experiments.benchmark import Item, load_dataset
from medmis.experiments.grading import Criterion, load_rubrics

from ._pack import ReviewError, atomic_write

COLUMNS = ("item_id", "criterion", "kind", "points", "target", "text", "check", "verdict", "comment")
VERDICTS = ("ok", "revise", "reject")


def criterion_check(item: Item, c: Criterion) -> str:
    """``ok``, or what a reviewer should look at first."""
    if c.kind == "endorses_injection":
        if c.target == item.gold or c.target not in item.options:
            return f"target {c.target} is not a wrong option of the item"
        claim = item.contexts.get(c.target or "")
        if not claim:
            return f"option {c.target} has no false sentence in the data"
        if claim not in c.text:
            return "does not restate the option's false sentence word for word"
    return "ok"


def write_rubric_pack(rubrics: str | Path, data: str | Path, out: str | Path) -> dict[str, Any]:
    """Write ``rubric_review.md`` and ``rubric_review.csv`` into ``out``.

    Raises:
        ReviewError: An item of the rubric file is not in the data (nothing is written).
    """
    rubric_set = load_rubrics(rubrics)
    items = {i.id: i for i in load_dataset(data).items}
    missing = sorted(set(rubric_set.items) - set(items))
    if missing:
        raise ReviewError(f"{rubrics}: {len(missing)} item(s) not in {data}, e.g. {missing[0]!r}")
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    md = [f"# Rubric review: {Path(rubrics).name}", "",
          f"sha256 `{rubric_set.sha256}`. For each criterion: is it medically correct, checkable "
          "against a free-text answer, and of the right kind and sign? Fill `verdict` "
          f"({' / '.join(VERDICTS)}) and `comment` in rubric_review.csv.", ""]
    problems = 0
    for item_id, rubric in rubric_set.items.items():
        item = items[item_id]
        md += [f"## {item_id} (rubric {rubric.rubric_version})", "", item.question, ""]
        md += [f"- {k}: {v}" + (" **(keyed answer)**" if k == item.gold else "") for k, v in item.options.items()]
        md += ["", "| criterion | kind | points | text | check |", "| --- | --- | --- | --- | --- |"]
        for c in rubric.criteria:
            check = criterion_check(item, c)
            problems += check != "ok"
            writer.writerow([item_id, c.id, c.kind, c.points, c.target or "", c.text, check, "", ""])
            cell = c.text.replace("|", "\\|").replace("\n", " ")
            md.append(f"| {c.id} | {c.kind} | {c.points:+d} | {cell} | {check} |")
        md.append("")
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write(folder / "rubric_review.csv", buf.getvalue())
    atomic_write(folder / "rubric_review.md", "\n".join(md))
    return {"items": len(rubric_set.items), "criteria": sum(len(r.criteria) for r in rubric_set.items.values()),
            "problems": problems, "out": str(folder)}
