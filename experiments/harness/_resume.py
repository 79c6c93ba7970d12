"""What a resumed run and its outcome need from ``records.jsonl``: keys, progress figures,
record count and error texts, read columnar (never one Python object per record)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._scan import (
    KEY,
    PARQUET_NAME,
    RecordKey,
    _fresh,
    connect,
    load_records_table,
    records_view,
)

if TYPE_CHECKING:
    import duckdb

@dataclass
class ResumeState:
    """What a resumed run needs from the records already written.

    ``done`` are the keys not to run again (with ``retry_errors``, keys whose last record is
    an error are left out of it); ``errored`` the keys whose last record is an error.
    The remaining fields are the live-progress figures over the ``done`` records.
    """

    done: set[RecordKey] = field(default_factory=set)
    errored: set[RecordKey] = field(default_factory=set)
    records: int = 0
    errors: int = 0
    graded: dict[str, list[int]] = field(default_factory=dict)
    flips: list[int] = field(default_factory=lambda: [0, 0])
    input_tokens: int = 0
    output_tokens: int = 0
    by_model_tokens: dict[str, list[int]] = field(default_factory=dict)
    clean: dict[tuple[str, str, str], bool] = field(default_factory=dict)

    def apply(self, stats: Any, clean_state: dict[tuple[str, str, str], bool]) -> None:
        """Add these figures to the runner's ``RunStats`` and clean-answer map."""
        stats.errors += self.errors
        for proto, (k, n) in self.graded.items():
            stats.graded[proto][0] += k
            stats.graded[proto][1] += n
        stats.flips[0] += self.flips[0]
        stats.flips[1] += self.flips[1]
        stats.input_tokens += self.input_tokens
        stats.output_tokens += self.output_tokens
        for model, (tin, tout) in self.by_model_tokens.items():
            tok = stats.by_model_tokens.setdefault(model, [0, 0])
            tok[0] += tin
            tok[1] += tout
        clean_state.update(self.clean)


_RESUME_COLUMNS = (*KEY, "correct", "error", "usage")


def resume_state(path: str | Path, *, retry_errors: bool = False) -> ResumeState:
    """Completed and errored keys of ``records.jsonl``, reading only the columns they need.

    Args:
        path: The run's ``records.jsonl`` (absent or empty: nothing done).
        retry_errors: Leave keys whose last record is an error out of ``done``.
    """
    p = Path(path)
    state = ResumeState()
    if not p.exists() or p.stat().st_size == 0:
        return state
    con = connect()
    try:
        parquet = p.with_name(PARQUET_NAME)
        if _fresh(con, parquet, p):
            con.execute("SET memory_limit='512MB'")  # scans only; the key set lives in Python
            records_view(con, parquet)
        else:
            load_records_table(con, p, columns=_RESUME_COLUMNS)
        done_if = "true" if not retry_errors else "error IS NULL"
        con.execute(f"CREATE TEMP VIEW done AS SELECT * FROM records WHERE {done_if}")
        _collect_keys(con, state, retry_errors)
        count = con.execute("SELECT count(*) FROM records").fetchone()
        state.records = int(count[0]) if count else 0
        _progress_figures(con, state)
    finally:
        con.close()
    return state


def _collect_keys(con: duckdb.DuckDBPyConnection, state: ResumeState, retry_errors: bool) -> None:
    # One group of (model, defender, protocol) at a time, with every string interned: a
    # million keys then share a few thousand string objects instead of holding five each.
    intern: dict[str | None, str | None] = {None: None}

    def same(s: str | None) -> str | None:
        return intern.setdefault(s, s)

    groups = con.execute("SELECT DISTINCT model, defender, protocol FROM records").fetchall()
    for model, defender, protocol in groups:
        head = (same(model), same(defender), same(protocol))
        rows = con.execute("SELECT item_key, target, error IS NOT NULL FROM records WHERE model = ? "
                           "AND defender = ? AND protocol = ?", [model, defender, protocol])
        while batch := rows.fetchmany(65536):
            for item_id, target, errored in batch:
                key = (*head, same(item_id), same(target))
                if errored:
                    state.errored.add(key)  # type: ignore[arg-type]
                if not (retry_errors and errored):
                    state.done.add(key)  # type: ignore[arg-type]


def _progress_figures(con: duckdb.DuckDBPyConnection, state: ResumeState) -> None:
    for model, tin, tout in con.execute(
            "SELECT model, sum(input_tokens), sum(output_tokens) FROM done GROUP BY model "
            "ORDER BY min(pos)").fetchall():
        state.by_model_tokens[model] = [int(tin), int(tout)]
        state.input_tokens += int(tin)
        state.output_tokens += int(tout)
    errors = con.execute("SELECT count(*) FROM done WHERE error IS NOT NULL").fetchone()
    state.errors = int(errors[0]) if errors else 0
    for proto, k, n in con.execute(
            "SELECT protocol, sum(coalesce(correct, false)::INT), count(*) FROM done "
            "WHERE error IS NULL GROUP BY protocol").fetchall():
        state.graded[proto] = [int(k), int(n)]
    for model, defender, item, ok in con.execute(
            "SELECT model, defender, item_key, coalesce(correct, false) FROM done "
            "WHERE error IS NULL AND protocol = 'clean' ORDER BY pos").fetchall():
        state.clean[(model, defender, item)] = bool(ok)
    flips = con.execute("""
        SELECT sum((NOT coalesce(t.correct, false))::INT), count(*) FROM done t
        JOIN (SELECT model, defender, item_key, coalesce(correct, false) AS ok FROM done
              WHERE error IS NULL AND protocol = 'clean') c
        USING (model, defender, item_key)
        WHERE t.error IS NULL AND t.protocol = 'type1' AND c.ok""").fetchone()
    if flips and flips[1]:
        state.flips = [int(flips[0] or 0), int(flips[1])]


def count_records(path: str | Path) -> int:
    """Distinct record keys in ``records.jsonl`` (as ``len(read_records(path))``), keys only."""
    p = Path(path)
    if not p.exists() or p.stat().st_size == 0:
        return 0
    con = connect()
    try:
        return load_records_table(con, p, columns=KEY)
    finally:
        con.close()


def error_texts(path: str | Path) -> tuple[int, list[str]]:
    """Distinct record keys and the error text of every key whose latest record is an error
    (what the run's outcome needs), without a Python object per record."""
    p = Path(path)
    if not p.exists() or p.stat().st_size == 0:
        return 0, []
    con = connect()
    try:
        parquet = p.with_name(PARQUET_NAME)
        if _fresh(con, parquet, p):
            records_view(con, parquet)
            row = con.execute("SELECT count(*) FROM records").fetchone()
            n = int(row[0]) if row else 0
        else:
            n = load_records_table(con, p, columns=(*KEY, "error"))
        errors = [str(e) for (e,) in con.execute("SELECT error FROM records WHERE error IS NOT NULL").fetchall()]
    finally:
        con.close()
    return n, errors
