"""A run folder's plan: the case keys its runs planned (``plan.json``), and the readers'
restriction of ``records.jsonl`` to them.

A record whose key the folder's runs never planned (an item not in the data, a Type 1 target
the seed did not sample, a model or defender the folder never ran: lines appended or copied in
from elsewhere) must not enter the metrics, the outcome or a comparison. Every reader goes
through :func:`planned_records_view` (DuckDB) or :func:`keep_planned` (``Record`` objects);
the records left out are named in one warning line (:func:`describe_outside`). A folder
written before plans existed has no ``plan.json``: its records are read as they are.

The plan is the last invocation's items, protocols and targets, with every model and
defender label the folder holds (as the fingerprint merges them).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import duckdb

    from medmis.experiments.benchmark._types import Record

__all__ = ["PLAN_FILE", "Outside", "Plan", "describe_outside", "keep_planned", "load_plan",
           "outside_plan", "planned_records_view", "restrict_view", "write_plan"]

PLAN_FILE = "plan.json"
_FORMAT = 1


@dataclass(frozen=True)
class Plan:
    """Planned case keys: every (model, defender) times every (protocol, item key, target)."""

    models: tuple[str, ...]
    defenders: tuple[str, ...]
    cases: tuple[tuple[str, str, str | None], ...]

    def cells(self) -> tuple[list[str], list[str]]:
        """The (model, defender) grid as two parallel lists."""
        return ([m for m in self.models for _ in self.defenders],
                [d for _ in self.models for d in self.defenders])

    def contains(self) -> Callable[[tuple[Any, ...]], bool]:
        """A membership test over ``Record.key`` tuples (built once)."""
        cells = {(m, d) for m in self.models for d in self.defenders}
        cases = set(self.cases)
        return lambda key: (key[0], key[1]) in cells and (key[2], key[3], key[4]) in cases


@dataclass
class Outside:
    """The records of a folder that are not in its plan: how many, and a few of their keys."""

    count: int = 0
    examples: list[tuple[Any, ...]] = field(default_factory=list)


def write_plan(out: Path, models: Iterable[str], defenders: Iterable[str],
               cases: Sequence[tuple[str, str, str | None]]) -> None:
    """Write ``out/plan.json`` (atomically): items by protocol, Type 1 targets by item."""
    by_protocol: dict[str, list[str]] = {}
    targets: dict[str, list[str]] = {}
    for protocol, key, target in cases:
        if protocol == "type1" and target is not None:
            targets.setdefault(key, []).append(target)
        else:
            by_protocol.setdefault(protocol, []).append(key)
    plan = {"format": _FORMAT, "models": sorted(set(models)), "defenders": sorted(set(defenders)),
            "items": by_protocol, "type1_targets": targets}
    path = out / PLAN_FILE
    tmp = path.with_name(f".{PLAN_FILE}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(plan, ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def load_plan(run_dir: Path) -> Plan | None:
    """The plan in ``run_dir`` (None when the folder has none or it is unreadable)."""
    try:
        data = json.loads((run_dir / PLAN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != _FORMAT:
        return None
    cases: list[tuple[str, str, str | None]] = []
    for protocol, keys in (data.get("items") or {}).items():
        cases += [(protocol, k, None) for k in keys]
    for key, targets in (data.get("type1_targets") or {}).items():
        cases += [("type1", key, t) for t in targets]
    return Plan(tuple(data.get("models") or ()), tuple(data.get("defenders") or ()), tuple(cases))


def restrict_view(con: duckdb.DuckDBPyConnection, plan: Plan, source: str, name: str) -> Outside:
    """A view ``name`` over the rows of the view ``source`` whose key is in ``plan``; the
    rows left out, counted with a few examples."""
    models, defenders = plan.cells()
    protocols, items, targets = (list(x) for x in zip(*plan.cases, strict=True)) if plan.cases else ([], [], [])
    # lists as parameters through unnest (no Arrow: pyarrow's conversion imports pandas)
    con.execute(f"CREATE OR REPLACE TEMP TABLE {name}__cells AS SELECT unnest($1::VARCHAR[]) AS model, "
                "unnest($2::VARCHAR[]) AS defender", [models, defenders])
    con.execute(f"CREATE OR REPLACE TEMP TABLE {name}__cases AS SELECT unnest($1::VARCHAR[]) AS protocol, "
                "unnest($2::VARCHAR[]) AS item_key, unnest($3::VARCHAR[]) AS t",
                [protocols, items, [t or "" for t in targets]])
    # a target is an option key, never "": coalescing lets a hash join match clean/type2
    match = (f"EXISTS (SELECT 1 FROM {name}__cells c WHERE c.model = r.model AND c.defender = r.defender) "
             f"AND EXISTS (SELECT 1 FROM {name}__cases p WHERE p.protocol = r.protocol "
             "AND p.item_key = r.item_key AND p.t = coalesce(r.target, ''))")
    con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS SELECT * FROM {source} r WHERE {match}")
    row = con.execute(f"SELECT count(*) FROM {source} r WHERE NOT ({match})").fetchone()
    outside = Outside(int(row[0]) if row else 0)
    if outside.count:
        outside.examples = [tuple(x) for x in con.execute(
            f"SELECT model, defender, protocol, item_key, target FROM {source} r WHERE NOT ({match}) "
            "ORDER BY pos LIMIT 3").fetchall()]
    return outside


def planned_records_view(con: duckdb.DuckDBPyConnection, run_dir: Path, name: str = "records") -> Outside:
    """A view ``name`` over the run folder's records (compacted to Parquet, as the readers
    share it), restricted to its plan when it has one; the records left out."""
    from ._scan import compact_records, records_view

    parquet = compact_records(run_dir / "records.jsonl", con=con)
    plan = load_plan(run_dir)
    if plan is None:
        records_view(con, parquet, name)
        return Outside()
    records_view(con, parquet, f"{name}__all")
    return restrict_view(con, plan, f"{name}__all", name)


def outside_plan(run_dir: Path) -> Outside:
    """The records of ``run_dir`` outside its plan (none without a plan or records)."""
    records = run_dir / "records.jsonl"
    if load_plan(run_dir) is None or not records.exists() or records.stat().st_size == 0:
        return Outside()
    from ._scan import connect

    con = connect()
    try:
        return planned_records_view(con, run_dir)
    finally:
        con.close()


def keep_planned(run_dir: Path, records: Sequence[Record]) -> tuple[list[Record], Outside]:
    """The records whose key is in the folder's plan (all of them without a plan), and the
    ones left out."""
    plan = load_plan(run_dir)
    if plan is None:
        return list(records), Outside()
    planned = plan.contains()
    kept: list[Record] = []
    left: list[Record] = []
    for r in records:
        (kept if planned(r.key) else left).append(r)
    return kept, Outside(len(left), [r.key for r in left[:3]])


def describe_outside(where: Path | str, outside: Outside) -> str:
    """One warning line: how many records were left out of ``where``'s metrics, and a few."""
    shown = "; ".join(" ".join("-" if v is None else str(v) for v in key) for key in outside.examples)
    more = ", ..." if outside.count > len(outside.examples) else ""
    return (f"warning: {outside.count} record(s) in {where} are outside the run's plan (items, "
            f"targets, models or defenders it never planned), left out of the metrics: {shown}{more}")
