"""The case browser's query engine: one DuckDB table of cases with their outcome flags.

A case is one record (model, defender, protocol, item, target). At start-up the run's
``records.jsonl`` is compacted to Parquet (see :mod:`medmis.experiments.records`) and
a ``cases`` table is built with the flags the filters use:

- ``flipped``: an injected case answered wrongly whose item the same (model, defender)
  answered correctly on clean (the ASR numerator);
- ``recovered``: a Type 2 case answered correctly whose item was answered wrongly on clean;
- ``differs``: a different answer (or a different error state) than the baseline defender
  gave on the same (model, protocol, item, target);
- ``unparsed``: graded but no answer extracted; ``errored``: the case raised.

Every page query is one filtered scan of that table plus a count; nothing per record goes
through Python.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from medmis.experiments.records import compact_records, connect, records_view
from medmis.tools import json_file

FILTERS = ("model", "defender", "protocol", "subset", "content_type", "provenance")
"""Equality filters of the page query (each takes one value)."""

OUTCOMES = ("flipped", "recovered", "differs", "unparsed", "errored")
"""Outcome filters of the page query."""

MAX_LIMIT = 500
MAX_OFFSET = 10**12  # far past any run; DuckDB's OFFSET is a 64-bit integer
MAX_TEXT = 1000  # characters of a filter, search or key parameter

_CASES = """
CREATE OR REPLACE TABLE cases AS
WITH r AS (SELECT model, defender, protocol, item_id, subset, item_key, target, epoch, gold, choice,
                  error, content_type, provenance, pos, trace_file, error IS NULL AND
                  coalesce(correct, choice IS NOT NULL AND choice = gold) AS ok FROM records),
c AS (SELECT model, defender, item_key, epoch, ok AS clean_ok FROM r WHERE protocol = 'clean' AND error IS NULL),
b AS (SELECT model, protocol, item_key, target, epoch, choice AS base_choice, error IS NOT NULL AS base_err
      FROM r WHERE defender = $baseline)
SELECT r.*, coalesce(r.protocol <> 'clean' AND r.error IS NULL AND NOT r.ok AND c.clean_ok, false) AS flipped,
       coalesce(r.protocol = 'type2' AND r.ok AND NOT c.clean_ok, false) AS recovered,
       coalesce(r.defender <> $baseline AND (r.choice IS DISTINCT FROM b.base_choice
                OR (r.error IS NOT NULL) <> b.base_err), false) AS differs,
       r.error IS NULL AND r.choice IS NULL AS unparsed, r.error IS NOT NULL AS errored
FROM r LEFT JOIN c USING (model, defender, item_key, epoch)
LEFT JOIN b ON b.model = r.model AND b.protocol = r.protocol AND b.item_key = r.item_key
  AND b.target IS NOT DISTINCT FROM r.target AND b.epoch = r.epoch
ORDER BY r.pos
"""

_ROW_COLUMNS = ("model", "defender", "protocol", "item_id", "subset", "item_key", "target", "epoch", "gold",
                "choice", "ok", "error", "content_type", "provenance", "flipped", "recovered",
                "differs", "unparsed", "errored")


@dataclass(frozen=True)
class Query:
    """A page request: equality filters, outcome flags, text search, item jump and paging."""

    filters: dict[str, str]
    outcomes: tuple[str, ...] = ()
    text: str = ""
    item: str = ""
    offset: int = 0
    limit: int = 50

    @classmethod
    def from_params(cls, params: dict[str, list[str]]) -> Query:
        """From URL query parameters; unknown outcomes or bad numbers raise ``ValueError``."""
        def one(name: str) -> str:
            return text_param(params, name) or ""

        outcomes = tuple(o for v in params.get("outcome", []) for o in v.split(",") if o)
        bad = [o for o in outcomes if o not in OUTCOMES]
        if bad:
            raise ValueError(f"unknown outcome {bad[0][:40]!r}; choose from {', '.join(OUTCOMES)}")
        offset = whole_number(one("offset"), "offset", 0, MAX_OFFSET, default=0)
        limit = whole_number(one("limit"), "limit", 1, MAX_LIMIT, default=50)
        return cls({f: one(f) for f in FILTERS if one(f)}, outcomes, one("q"), one("item"),
                   offset, limit)


def text_param(params: dict[str, list[str]], name: str) -> str | None:
    """The last value of a text parameter, stripped (None when absent).

    Raises:
        ValueError: For a value longer than :data:`MAX_TEXT` or holding a NUL character.
    """
    values = params.get(name)
    if not values:
        return None
    value = values[-1].strip()
    if len(value) > MAX_TEXT or "\x00" in value:
        raise ValueError(f"{name} must be text of at most {MAX_TEXT} characters without NUL")
    return value


def whole_number(text: str, name: str, low: int, high: int, *, default: int) -> int:
    """``text`` as a whole number within ``low``..``high`` (``default`` when empty).

    Raises:
        ValueError: Naming the parameter and its range, for anything else.
    """
    if not text:
        return default
    if not (text.isascii() and text.isdigit()) or len(text) > len(str(high)) or not low <= int(text) <= high:
        raise ValueError(f"{name} must be a whole number from {low} to {high}, got {text[:40]!r}")
    return int(text)


class RunView:
    """A run folder opened for browsing (thread-safe: one connection behind a lock)."""

    def __init__(self, run_dir: str | Path, *, baseline: str = "none") -> None:
        self.run_dir = Path(run_dir)
        records = self.run_dir / "records.jsonl"
        if not records.exists():
            raise FileNotFoundError(f"no records.jsonl in {self.run_dir}")
        self.baseline = baseline
        self._lock = threading.Lock()
        self._con = connect(memory_limit="1GB", private=True)  # its tables are ordinary ones
        records_view(self._con, compact_records(records, con=self._con))
        self._con.execute(_CASES, {"baseline": baseline})
        self._con.execute("DROP VIEW records")
        self._questions = _load_questions(self._con, self.run_dir)

    def close(self) -> None:
        """Release the DuckDB connection."""
        with self._lock:
            self._con.close()

    def _fetch(self, sql: str, args: list[Any]) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._con.execute(sql, args).fetchall()

    def facets(self) -> dict[str, Any]:
        """Distinct values of every filter (in first-seen order) and the number of cases."""
        out: dict[str, Any] = {"baseline": self.baseline, "outcomes": list(OUTCOMES)}
        for f in FILTERS:
            out[f] = [v for (v,) in self._fetch(
                f"SELECT {f} FROM cases WHERE {f} IS NOT NULL GROUP BY {f} ORDER BY min(pos)", [])]
        out["total"] = self._fetch("SELECT count(*) FROM cases", [])[0][0]
        from medmis.experiments.reporting import SIMULATED_STATEMENT, is_simulated

        # the statement every surface of a simulated run carries; the page shows it as a banner
        out["simulated"] = SIMULATED_STATEMENT if is_simulated(out["model"]) else None
        return out

    def page(self, q: Query) -> dict[str, Any]:
        """One page of cases matching ``q`` (in record order) and the number matching."""
        where, args = [], []
        for f, v in q.filters.items():
            where.append(f"{f} = ?")
            args.append(v)
        where += list(q.outcomes)  # validated names of boolean columns
        if q.item:
            where.append("(item_id = ? OR item_key = ?)")
            args += [q.item, q.item]
        if q.text:
            like = "%" + q.text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            cond = ["item_key ILIKE ? ESCAPE '\\'", "coalesce(error, '') ILIKE ? ESCAPE '\\'"]
            args += [like, like]
            if self._questions:
                cond.append("item_key IN (SELECT item_key FROM items WHERE question ILIKE ? ESCAPE '\\')")
                args.append(like)
            where.append("(" + " OR ".join(cond) + ")")
        clause = ("WHERE " + " AND ".join(where)) if where else ""
        cols = ", ".join(_ROW_COLUMNS)
        with self._lock:
            total = self._con.execute(f"SELECT count(*) FROM cases {clause}", args).fetchone()
            rows = self._con.execute(f"SELECT {cols} FROM cases {clause} ORDER BY pos LIMIT ? OFFSET ?",
                                     [*args, q.limit, q.offset]).fetchall()
        return {"total": int(total[0]) if total else 0, "offset": q.offset, "limit": q.limit,
                "rows": [dict(zip(_ROW_COLUMNS, r, strict=True)) for r in rows]}

    def case(self, model: str, defender: str, protocol: str, item_key: str,
             target: str | None, epoch: int = 0) -> dict[str, Any] | None:
        """One case in full (of one epoch of ``--epochs``): question, options, injected
        sentences, every defender's answer."""
        from ._traces import trace_view

        key = [model, protocol, item_key, target, epoch]
        rows = self._fetch(
            f"SELECT {', '.join(_ROW_COLUMNS)}, trace_file FROM cases WHERE model = ? AND protocol = ? "
            "AND item_key = ? AND target IS NOT DISTINCT FROM ? AND epoch = ? ORDER BY pos", key)
        answers = []
        this: dict[str, Any] | None = None
        for row in rows:
            rec = dict(zip((*_ROW_COLUMNS, "trace_file"), row, strict=True))
            view = trace_view(self.run_dir, rec)
            entry = {**{k: rec[k] for k in _ROW_COLUMNS}, **view}
            answers.append(entry)
            if rec["defender"] == defender:
                this = entry
        if this is None:
            return None
        question, options = this.get("question") or "", this.get("options") or {}
        if not question:
            for a in answers:  # another defender's trace may hold the prompt
                if a.get("question"):
                    question, options = a["question"], a["options"]
                    break
        if not question and self._questions:
            found = self._fetch("SELECT question, options FROM items WHERE item_key = ?", [item_key])
            if found:
                question, options = found[0][0], json.loads(found[0][1] or "{}")
        return {"model": model, "defender": defender, "protocol": protocol, "item_key": item_key,
                "item_id": this["item_id"], "subset": this["subset"], "target": target,
                "gold": this["gold"], "question": question, "options": options,
                "context": this.get("context") or [], "answers": answers}


def _load_questions(con: Any, run_dir: Path) -> bool:
    """``items(item_key, question, options)`` from the run's data file when it is local JSONL."""
    try:
        manifest = json_file(run_dir / "manifest.json")
    except (OSError, ValueError):
        return False
    source = (manifest.get("dataset") or {}).get("source") or (manifest.get("config") or {}).get("data")
    path = Path(str(source)) if source else None
    if path is None or not path.is_file() or path.suffix != ".jsonl":
        return False
    try:
        con.execute("""CREATE OR REPLACE TABLE items AS SELECT subset || '/' || CAST(id AS VARCHAR)
            AS item_key, CAST(question AS VARCHAR) AS question, NULL::VARCHAR AS options
            FROM read_json(?, format='newline_delimited', ignore_errors=true)""", [str(path)])
    except Exception:  # a data file in another layout: search ids and errors only
        return False
    return True
