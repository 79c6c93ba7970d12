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

from medmis.tools import json_file

if TYPE_CHECKING:
    import duckdb

    from ._record import Record

__all__ = ["PLAN_FILE", "Outside", "Plan", "describe_outside", "has_plan", "keep_planned", "load_plan",
           "outside_plan", "planned_records_view", "restrict_view", "write_plan", "write_plan_of"]

PLAN_FILE = "plan.json"
_FORMAT = 1
_COLUMNS = {"format": "INTEGER", "models": "VARCHAR[]", "defenders": "VARCHAR[]", "clean": "VARCHAR[]", "type2": "VARCHAR[]",
            "type1_items": "VARCHAR[]", "type1_targets": "VARCHAR[]", "epochs": "INTEGER"}
"""``plan.json``: the folder's models and defender labels, the item keys of its clean and
type2 cases, and its type1 cases as two parallel lists (item key, target); flat lists, so that
DuckDB reads the file itself (no Python object per case on the readers' side). ``epochs``
(``--epochs E``, written when above 1; absent: 1): every case is planned for epochs 0 to E-1."""


@dataclass(frozen=True)
class Plan:
    """Planned case keys: every (model, defender) times every (protocol, item key, target)."""

    models: tuple[str, ...]
    defenders: tuple[str, ...]
    cases: tuple[tuple[str, str, str | None], ...]
    epochs: int = 1
    """Every case is planned for epochs 0 to ``epochs - 1`` (``--epochs``)."""

    def contains(self) -> Callable[[tuple[Any, ...]], bool]:
        """A membership test over ``Record.key`` tuples (built once)."""
        models, defenders, cases, epochs = set(self.models), set(self.defenders), set(self.cases), self.epochs
        return lambda key: (key[0] in models and key[1] in defenders and (key[2], key[3], key[4]) in cases
                            and (key[5] if len(key) > 5 else 0) < epochs)


@dataclass
class Outside:
    """The records of a folder that are not in its plan: how many, and a few of their keys."""

    count: int = 0
    examples: list[tuple[Any, ...]] = field(default_factory=list)


def write_plan(out: Path, models: Iterable[str], defenders: Iterable[str], items: Sequence[Any],
               planned: Sequence[tuple[int, str, str | None]], epochs: int = 1) -> None:
    """Write ``out/plan.json`` (atomically) for the folder's models and defender labels and
    the planned ``(item index, protocol, target)`` of ``items``, each for ``epochs`` epochs."""
    write_plan_of(out, Plan(tuple(models), tuple(defenders),
                            tuple((protocol, items[i].key, target) for i, protocol, target in planned), epochs))


def write_plan_of(out: Path, planned: Plan) -> None:
    """Write ``out/plan.json`` (atomically) holding ``planned`` (its cases in their order)."""
    plan: dict[str, Any] = {"format": _FORMAT, "models": sorted(set(planned.models)),
                            "defenders": sorted(set(planned.defenders)),
                            "clean": [], "type2": [], "type1_items": [], "type1_targets": []}
    if planned.epochs > 1:  # a one-epoch plan reads as before epochs existed
        plan["epochs"] = planned.epochs
    for protocol, key, target in planned.cases:
        if protocol == "type1":
            plan["type1_items"].append(key)
            plan["type1_targets"].append(target)
        else:
            plan[protocol].append(key)
    path = out / PLAN_FILE
    tmp = path.with_name(f".{PLAN_FILE}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(plan, ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def has_plan(run_dir: Path) -> bool:
    """Whether ``run_dir`` has a ``plan.json`` (a folder written before plans existed has none)."""
    return (run_dir / PLAN_FILE).is_file()


def _read(run_dir: Path) -> dict[str, Any] | None:
    try:
        data = json_file(run_dir / PLAN_FILE)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != _FORMAT:
        return None
    return data


def load_plan(run_dir: Path) -> Plan | None:
    """The plan in ``run_dir`` (None when the folder has none or it is unreadable)."""
    data = _read(run_dir)
    if data is None:
        return None
    cases: list[tuple[str, str, str | None]] = [("clean", k, None) for k in data.get("clean") or ()]
    cases += [("type2", k, None) for k in data.get("type2") or ()]
    cases += [("type1", k, t) for k, t in zip(data.get("type1_items") or (), data.get("type1_targets") or (),
                                              strict=False)]
    return Plan(tuple(data.get("models") or ()), tuple(data.get("defenders") or ()), tuple(cases),
                int(data.get("epochs") or 1))


def _sql_list(values: Iterable[str]) -> str:
    return "[" + ", ".join("'" + v.replace("'", "''") + "'" for v in values) + "]"


def restrict_view(con: duckdb.DuckDBPyConnection, plan: Plan | Path, source: str, name: str) -> Outside:
    """A view ``name`` over the rows of the view ``source`` whose key is in ``plan`` (a
    :class:`Plan`, or the folder whose ``plan.json`` DuckDB reads itself); the rows left out,
    counted with a few examples. With none left out, the view is the source itself."""
    cases = f"{name}__cases"
    if isinstance(plan, Path):
        path = plan / PLAN_FILE
        columns = "{" + ", ".join(f"'{k}': '{v}'" for k, v in _COLUMNS.items()) + "}"
        con.execute(f"CREATE OR REPLACE TEMP TABLE {name}__plan AS SELECT * FROM read_json("
                    f"'{str(path).replace(chr(39), chr(39) * 2)}', format='auto', "
                    f"maximum_object_size={path.stat().st_size + 4096}, columns={columns})")
        row = con.execute(f"SELECT format, models, defenders, epochs FROM {name}__plan").fetchone()
        if row is None or row[0] != _FORMAT:  # another version's plan: read the records as they are
            con.execute(f"DROP TABLE {name}__plan")
            con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS SELECT * FROM {source}")
            return Outside()
        models, defenders, epochs = list(row[1] or []), list(row[2] or []), int(row[3] or 1)
        # a target is an option key, never "": coalescing lets a hash join match clean/type2
        con.execute(f"CREATE OR REPLACE TEMP TABLE {cases} AS "
                    f"SELECT 'clean' AS protocol, unnest(clean) AS item_key, '' AS t FROM {name}__plan "
                    f"UNION ALL SELECT 'type2', unnest(type2), '' FROM {name}__plan "
                    f"UNION ALL SELECT 'type1', unnest(type1_items), unnest(type1_targets) FROM {name}__plan")
        con.execute(f"DROP TABLE {name}__plan")
    else:
        models, defenders, epochs = list(plan.models), list(plan.defenders), plan.epochs
        protocols, items, targets = (list(x) for x in zip(*plan.cases, strict=True)) if plan.cases else ([], [], [])
        # lists as parameters through unnest (no Arrow: pyarrow's conversion imports pandas)
        con.execute(f"CREATE OR REPLACE TEMP TABLE {cases} AS SELECT unnest($1::VARCHAR[]) AS protocol, "
                    "unnest($2::VARCHAR[]) AS item_key, unnest($3::VARCHAR[]) AS t",
                    [protocols, items, [t or "" for t in targets]])
    # the grid is every model by every defender: two short IN lists, then one hash semi-join
    cells = (f"list_contains({_sql_list(models)}, r.model) AND list_contains({_sql_list(defenders)}, r.defender)"
             if models and defenders else "false")
    kept = (f"SELECT r.* FROM {source} r SEMI JOIN {cases} p ON p.protocol = r.protocol "
            f"AND p.item_key = r.item_key AND p.t = coalesce(r.target, '') WHERE {cells} AND r.epoch < {epochs}")
    row = con.execute(f"SELECT (SELECT count(*) FROM {source}) - (SELECT count(*) FROM ({kept}))").fetchone()
    outside = Outside(int(row[0]) if row else 0)
    if not outside.count:  # the usual case: the readers' queries pay no join
        con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS SELECT * FROM {source}")
        return outside
    con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS {kept}")
    # ``pos`` is a record's own position: the rows of the source without one in the view
    outside.examples = [tuple(x) for x in con.execute(
        f"SELECT r.model, r.defender, r.protocol, r.item_key, r.target FROM {source} r "
        f"ANTI JOIN {name} k ON k.pos = r.pos ORDER BY r.pos LIMIT 3").fetchall()]
    return outside


def planned_records_view(con: duckdb.DuckDBPyConnection, run_dir: Path, name: str = "records") -> Outside:
    """A view ``name`` over the run folder's records (compacted to Parquet, as the readers
    share it), restricted to its plan when it has one; the records left out."""
    from ._scan import compact_records, records_view

    parquet = compact_records(run_dir / "records.jsonl", con=con)
    if not has_plan(run_dir):
        records_view(con, parquet, name)
        return Outside()
    records_view(con, parquet, f"{name}__all")
    return restrict_view(con, run_dir, f"{name}__all", name)


def outside_plan(run_dir: Path) -> Outside:
    """The records of ``run_dir`` outside its plan (none without a plan or records)."""
    records = run_dir / "records.jsonl"
    if not has_plan(run_dir) or not records.exists() or records.stat().st_size == 0:
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
