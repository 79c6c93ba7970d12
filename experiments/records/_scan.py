"""Columnar reads of ``records.jsonl`` through DuckDB: compaction to Parquet and resume keys.

A run at the scale of the full release holds over a million records; parsing each into a
pydantic ``Record`` costs minutes and gigabytes. DuckDB scans the JSON lines in C++ with a
fixed column list (unknown fields are ignored, missing ones are null, ``extra`` stays JSON
text), so readers pay only for the columns they use.

Semantics are those of :func:`read_records`: the last record of a key wins (it takes the
position of the key's first record, as a dict would), and an unreadable *last* line is a torn
write of a killed run and is skipped. Anything the fast path cannot vouch for (an unreadable
line elsewhere, a record missing a required field) goes through ``read_records`` itself, so
errors carry its line numbers and messages.
"""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from medmis.tools import UserFileError, deep_line

from ._io import complete_length, read_records, unreadable_record, warn_rewritten

if TYPE_CHECKING:
    import duckdb

PARQUET_NAME = "records.parquet"
"""The compacted copy of ``records.jsonl`` kept beside it (rebuilt when the JSONL changes)."""

_FORMAT = "medmis-records-4"  # bump when the Parquet layout changes

RECORD_COLUMNS: dict[str, str] = {
    "model": "VARCHAR", "defender": "VARCHAR", "protocol": "VARCHAR", "item_id": "VARCHAR",
    "subset": "VARCHAR", "target": "VARCHAR", "gold": "VARCHAR", "choice": "VARCHAR",
    "correct": "BOOLEAN", "content_type": "VARCHAR", "provenance": "VARCHAR",
    "error": "VARCHAR", "usage": "STRUCT(input_tokens BIGINT, output_tokens BIGINT)",
    "llm_calls": "BIGINT", "tool_calls": "BIGINT", "latency_s": "DOUBLE", "method": "VARCHAR",
    "extra": "JSON", "trace_file": "VARCHAR", "epoch": "INTEGER",
}
"""The fields analysis reads; other fields (traces, options, fields added later) are skipped."""

KEY = ("model", "defender", "protocol", "subset", "item_id", "target", "epoch")
"""Columns of a record's identity (``Record.key`` joins subset and item id as ``item_key``)."""
_ITEM_KEY = "subset || '/' || item_id AS item_key"

# Defaults as Record would fill them in for absent fields.
_DEFAULTS = {"llm_calls": "0", "tool_calls": "0", "latency_s": "0.0", "method": "'none'",
             "extra": "'{}'", "epoch": "0"}


def _select(columns: tuple[str, ...]) -> str:
    out = []
    for c in columns:
        if c == "usage":
            out += ["coalesce(usage.input_tokens, 0) AS input_tokens",
                    "coalesce(usage.output_tokens, 0) AS output_tokens"]
        elif c in _DEFAULTS:
            out.append(f"coalesce({c}, {_DEFAULTS[c]}) AS {c}")
        else:
            out.append(c)
    return ", ".join(out)


_REQUIRED = "model, defender, protocol, item_id, subset, gold"
_OUTPUT_COLUMNS = (
    "model", "defender", "protocol", "item_id", "subset", "target", "gold", "choice", "correct",
    "content_type", "provenance", "error", "input_tokens", "output_tokens", "llm_calls",
    "tool_calls", "latency_s", "method", "extra", "trace_file", "epoch",
)


def connect(threads: int | None = None, memory_limit: str = "1GB",
            database: str = ":memory:", *, private: bool = False) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection (in memory unless ``database`` names a file) with bounded resources.

    An in-memory connection is a cursor on the process's one in-memory database: opening a
    database costs 30-70 ms, a cursor microseconds, and a report opens several. Each cursor has
    its own TEMP tables and views (everything the toolkit creates in memory is TEMP), so callers
    never see each other's; ``threads`` and ``memory_limit`` are the database's, the last one
    set holds. ``private=True`` opens a database of its own (for a caller that creates
    ordinary tables, such as the view server's).
    """
    import duckdb

    con = duckdb.connect(database) if private or database != ":memory:" else _memory_database().cursor()
    con.execute(f"SET threads={int(threads or min(4, os.cpu_count() or 1))}")
    con.execute(f"SET memory_limit='{memory_limit}'")
    # past the limit, operators spill here rather than fail (an in-memory database has no file)
    con.execute(f"SET temp_directory={_sql_str(os.path.join(tempfile.gettempdir(), 'medmis-duckdb'))}")
    con.execute("SET enable_progress_bar=false")
    con.execute("SET preserve_insertion_order=true")  # file order is what "last wins" means
    return con


@functools.cache
def _memory_database() -> duckdb.DuckDBPyConnection:
    """The process's in-memory DuckDB database, opened once; :func:`connect` hands out cursors."""
    import duckdb

    return duckdb.connect(":memory:")


def fingerprint(path: Path) -> str:
    """Changes whenever ``records.jsonl`` is appended to or replaced."""
    st = path.stat()
    return f"{_FORMAT}:{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"


def _sql_str(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@contextmanager
def _complete_lines(path: Path) -> Iterator[Path]:
    """``path``, or a temporary copy up to its last newline when the last line is torn.

    Raises:
        RecordsFileError: A line nests deeper than ``read_records`` accepts (DuckDB would
            read it: the fast path refuses what the exact reader refuses).
    """
    try:
        deep_line(path)
    except UserFileError as exc:
        raise unreadable_record(path, exc.line, exc.cause) from None
    size = path.stat().st_size
    with path.open("rb") as fh:
        cut = complete_length(fh, size)
    if cut == size:
        yield path
        return
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".records-", suffix=".jsonl",
                                     delete=False) as tmp, path.open("rb") as src:
        copied = 0
        while copied < cut:  # kernel-side copy: no pass through Python buffers
            n = os.sendfile(tmp.fileno(), src.fileno(), copied, cut - copied)
            if n == 0:
                break
            copied += n
    try:
        yield Path(tmp.name)
    finally:
        os.unlink(tmp.name)


def _scan_sql(path: Path, columns: dict[str, str]) -> str:
    spec = "{" + ", ".join(f"{_sql_str(k)}: {_sql_str(v)}" for k, v in columns.items()) + "}"
    return f"read_json({_sql_str(str(path))}, format='newline_delimited', columns={spec})"


@contextmanager
def scan_jsonl(path: Path, columns: dict[str, str]) -> Iterator[str]:
    """A DuckDB ``read_json`` expression over ``path``'s complete lines (a torn last line left
    out), reading only ``columns`` (name -> DuckDB type): for fields the compacted Parquet
    does not keep."""
    with _complete_lines(path) as readable:
        yield _scan_sql(readable, columns)


def _python_rows(path: Path) -> Any:
    """The exact (slow) reader: ``read_records`` as an Arrow table in file order."""
    import pyarrow as pa

    rows = []
    for r in read_records(path):
        d = r.model_dump(mode="json")
        rows.append({k: d.get(k) for k in _OUTPUT_COLUMNS}
                    | {"input_tokens": r.usage.input_tokens, "output_tokens": r.usage.output_tokens,
                       "extra": _json(d.get("extra") or {}), "epoch": r.epoch})  # a line leaves epoch 0 out
    return pa.Table.from_pylist(rows) if rows else None


def _json(value: Any) -> str:
    import json

    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def load_records_table(con: duckdb.DuckDBPyConnection, path: Path, table: str = "records",
                       columns: tuple[str, ...] = tuple(RECORD_COLUMNS)) -> int:
    """Create ``table`` in ``con``: the deduplicated records of ``path`` with their position.

    Columns: those of :data:`RECORD_COLUMNS` (``usage`` flattened to ``input_tokens`` and
    ``output_tokens``, defaults filled in) plus ``pos``, the index of the key's first line.
    ``table`` may be a view over a temporary table named ``{table}__raw``. ``columns``
    narrows the fields read (the key and required fields are always read).

    Returns:
        The number of records (distinct keys).

    Raises:
        ValueError: An unreadable record that is not the last line (as ``read_records``).
    """
    raw = f"{table}__raw"
    wanted = tuple(c for c in RECORD_COLUMNS if c in columns or c in KEY or c in _REQUIRED)
    try:
        with _complete_lines(path) as readable:
            # insertion order is preserved, so rowid is the line's position among records
            con.execute(f"CREATE OR REPLACE TEMP TABLE {raw} AS SELECT {_select(wanted)} "
                        f"FROM {_scan_sql(readable, {c: RECORD_COLUMNS[c] for c in wanted})}")
        bad = con.execute(
            f"SELECT count(*), max(rowid), (SELECT count(*) FROM {raw}) FROM {raw} WHERE "
            + " OR ".join(f"{c.strip()} IS NULL" for c in _REQUIRED.split(","))
            + " OR protocol NOT IN ('clean', 'type1', 'type2')").fetchone()
        ok = bad is not None and (bad[0] == 0 or (bad[0] == 1 and bad[1] == bad[2] - 1))
        if ok and bad is not None and bad[0] == 1:
            con.execute(f"DELETE FROM {raw} WHERE rowid = {int(bad[1])}")  # a torn last line
    except Exception as exc:  # DuckDB's parse errors have no stable type across versions
        if not any(s in str(exc) for s in ("Malformed JSON", "Conversion Error", "Invalid Input")):
            raise
        ok = False
    if not ok:
        _load_exact(con, path, raw, wanted)
    keys = ", ".join(KEY)
    con.execute(f"DROP VIEW IF EXISTS {table}")
    dupes = con.execute(f"SELECT count(*) - count(DISTINCT ({keys})) FROM {raw}").fetchone()
    if dupes and dupes[0]:
        if {"choice", "correct", "error"} <= set(wanted):
            _warn_rewritten(con, path, f"(SELECT *, rowid AS rn FROM {raw})")
        # the last line of a key wins, at the position of its first line (dict semantics)
        con.execute(f"""CREATE OR REPLACE TEMP TABLE {raw} AS
            SELECT * EXCLUDE (rn, last_rn, first_rn), first_rn AS pos FROM (
              SELECT *, rowid AS rn, max(rowid) OVER k AS last_rn, min(rowid) OVER k AS first_rn
              FROM {raw} WINDOW k AS (PARTITION BY {keys})) WHERE rn = last_rn ORDER BY pos""")
        con.execute(f"CREATE TEMP VIEW {table} AS SELECT *, {_ITEM_KEY} FROM {raw}")
    else:
        con.execute(f"CREATE TEMP VIEW {table} AS SELECT *, rowid AS pos, {_ITEM_KEY} FROM {raw}")
    count = con.execute(f"SELECT count(*) FROM {raw}").fetchone()
    return int(count[0]) if count else 0


def _load_exact(con: duckdb.DuckDBPyConnection, path: Path, raw: str,
                wanted: tuple[str, ...]) -> None:
    """``raw`` from ``read_records``: exact errors and torn-line handling, at Python speed."""
    arrow = _python_rows(path)
    types = RECORD_COLUMNS | {"input_tokens": "BIGINT", "output_tokens": "BIGINT"}
    names = [n for c in wanted for n in (("input_tokens", "output_tokens") if c == "usage" else (c,))]
    if arrow is None:
        cols = ", ".join(f"NULL::{types[c]} AS {c}" for c in names)
        con.execute(f"CREATE OR REPLACE TEMP TABLE {raw} AS SELECT {cols} WHERE false")
        return
    con.register("__medmis_rows", arrow)
    cols = ", ".join(f"CAST(__medmis_rows.{c} AS {types[c]}) AS {c}" for c in names)
    con.execute(f"CREATE OR REPLACE TEMP TABLE {raw} AS SELECT {cols} FROM __medmis_rows")
    con.unregister("__medmis_rows")


def compact_records(path: str | Path, *, con: duckdb.DuckDBPyConnection | None = None) -> Path:
    """``records.parquet`` beside ``path``, rebuilt only when ``records.jsonl`` changed.

    The Parquet file holds the deduplicated records in position order (a key at the
    position of its first line, with its last line's values), so a reader's
    ``file_row_number`` orders records as ``read_records`` lists them; :func:`records_view`
    exposes it as ``pos``. The key-value metadata carries the JSONL's fingerprint.
    """
    src = Path(path)
    dest = src.with_name(PARQUET_NAME)
    stamp = fingerprint(src)
    own = con is None
    con = con or connect()
    meta = f"KV_METADATA {{medmis: {_sql_str(stamp)}}}"
    try:
        if parquet_is_fresh(con, dest, src):
            return dest
        tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
        final = tmp
        try:
            # one streaming pass from JSON lines to Parquet; checks run on the columnar copy
            with _complete_lines(src) as readable:
                con.execute(f"COPY (SELECT {_select(tuple(RECORD_COLUMNS))} FROM "
                            f"{_scan_sql(readable, RECORD_COLUMNS)}) TO {_sql_str(str(tmp))} "
                            f"(FORMAT parquet, {meta})")
            fixed = _checked(con, tmp, src)
        except Exception as exc:
            if not any(s in str(exc) for s in ("Malformed JSON", "Conversion Error", "Invalid Input")):
                raise
            fixed = None
        if fixed is None:  # the exact reader decides (and raises with a line number)
            _load_exact(con, src, "records_exact", tuple(RECORD_COLUMNS))
            fixed = "SELECT * FROM records_exact"
        if fixed:
            final = dest.with_name(f".{dest.name}.{os.getpid()}.2.tmp")
            con.execute(f"COPY ({fixed}) TO {_sql_str(str(final))} (FORMAT parquet, {meta})")
            con.execute("DROP TABLE IF EXISTS records_exact")
        os.replace(final, dest)  # readers never see a half-written file
        if final != tmp and tmp.exists():
            tmp.unlink()
        return dest
    finally:
        if own:
            con.close()


def _warn_rewritten(con: duckdb.DuckDBPyConnection, path: Path, rows: str) -> None:
    """:func:`~._io.warn_rewritten` for the keys of ``rows`` (with a position ``rn``) whose
    answered record is followed by one with another answer: the rule of ``read_records``."""
    on = " AND ".join(f"a.{c} IS NOT DISTINCT FROM b.{c}" for c in KEY)
    found = con.execute(f"""WITH d AS (SELECT *, max(rn) OVER (PARTITION BY {", ".join(KEY)}) AS last_rn
                                    FROM {rows})
        SELECT DISTINCT a.model, a.defender, a.protocol, a.subset || '/' || a.item_id, a.target, a.epoch, min(a.rn)
        FROM d a JOIN d b ON {on} AND b.rn = b.last_rn
        WHERE a.rn < a.last_rn AND a.error IS NULL AND (a.choice IS DISTINCT FROM b.choice
              OR a.correct IS DISTINCT FROM b.correct OR a.error IS DISTINCT FROM b.error)
        GROUP BY ALL ORDER BY min(a.rn)""").fetchall()
    if found:
        warn_rewritten(path, [tuple(row[:6]) for row in found])


def _checked(con: duckdb.DuckDBPyConnection, parquet: Path, source: Path) -> str | None:
    """Validate a fresh Parquet copy: "" if usable as is, a SELECT that repairs it, or None.

    None means a line other than the last is unusable: only the exact reader may judge it.
    The repair drops a torn last line and keeps the last record of a repeated key.
    """
    scan = f"read_parquet({_sql_str(str(parquet))}, file_row_number=true)"
    bad = con.execute(
        f"SELECT count(*), max(file_row_number), (SELECT count(*) FROM {scan}) FROM {scan} WHERE "
        + " OR ".join(f"{c.strip()} IS NULL" for c in _REQUIRED.split(","))
        + " OR protocol NOT IN ('clean', 'type1', 'type2')").fetchone()
    if bad is None or (bad[0] and not (bad[0] == 1 and bad[1] == bad[2] - 1)):
        return None
    keys = ", ".join(KEY)
    where = f"WHERE file_row_number <> {int(bad[1])}" if bad[0] else ""
    dupes = con.execute(f"SELECT count(*) - count(DISTINCT ({keys})) FROM {scan} {where}").fetchone()
    if not bad[0] and not (dupes and dupes[0]):
        return ""
    if dupes and dupes[0]:
        _warn_rewritten(con, source, f"(SELECT *, file_row_number AS rn FROM {scan} {where})")
    cols = ", ".join(_OUTPUT_COLUMNS)
    return f"""SELECT {cols} FROM (
        SELECT *, max(file_row_number) OVER k AS last_rn, min(file_row_number) OVER k AS first_rn
        FROM {scan} {where} WINDOW k AS (PARTITION BY {keys}))
        WHERE file_row_number = last_rn ORDER BY first_rn"""


def records_view(con: duckdb.DuckDBPyConnection, parquet: Path, name: str = "records") -> None:
    """A view ``name`` over a compacted Parquet file, with ``pos`` the record's position."""
    con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS SELECT * EXCLUDE (file_row_number), "
                f"file_row_number AS pos, {_ITEM_KEY} FROM read_parquet({_sql_str(str(parquet))}, "
                "file_row_number=true)")


def parquet_is_fresh(con: duckdb.DuckDBPyConnection, parquet: Path, src: Path) -> bool:
    """Whether ``parquet`` is the compacted copy of ``src`` as it is now (its fingerprint matches)."""
    if not parquet.exists():
        return False
    try:
        meta = con.execute("SELECT value FROM parquet_kv_metadata(?) WHERE key = 'medmis'",
                           [str(parquet)]).fetchone()
    except Exception:
        return False
    return meta is not None and bytes(meta[0]).decode() == fingerprint(src)
