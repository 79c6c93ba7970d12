"""File formats: JSON Lines, JSON lists, CSV and Parquet files, and folders of them.

Each reader returns the rows it could parse, each with the line (or row number) where it
starts, plus a ``RowIssue`` for every part it could not parse.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from medmis.tools import (
    UNIQUE_KEYS,
    DuplicateKeyError,
    UserFileError,
    json_value,
    too_deep,
    too_deep_cause,
)

from ._dataset import DataError, RowIssue

DATA_SUFFIXES: tuple[str, ...] = (".jsonl", ".json", ".csv", ".parquet")

Row = tuple[int | None, Any]
"""A parsed row and where it starts: 1-based physical line (JSONL, JSON, CSV) or 1-based row
number (Parquet, hub)."""


def _duplicate_issue(file: str, line: int | None, loose: Any, key: str) -> RowIssue:
    """The problem of a row naming ``key`` twice (``loose``: the row read without the check)."""
    item_id = str(loose["id"]) if isinstance(loose, dict) and loose.get("id") is not None else None
    return RowIssue(file, line, item_id, key,
                    f"duplicate key {key!r} in the row (JSON would keep only its last value)")


def _file_issue(error: UserFileError) -> RowIssue:
    """A row the shared loader refused (nested too deep, not JSON, a key named twice)."""
    if error.key is not None:
        return _duplicate_issue(error.file, error.line, None, error.key)
    return RowIssue(error.file, error.line, None, "row", error.cause)


def _read_jsonl(data: bytes, file: str) -> tuple[list[Row], list[RowIssue]]:
    rows: list[Row] = []
    issues: list[RowIssue] = []
    for lineno, raw in enumerate(data.split(b"\n"), 1):
        # Decode with replacement: the U+FFFD then marks the exact field for the report.
        text = raw.decode("utf-8", errors="replace").strip()
        if lineno == 1:
            text = text.removeprefix("\ufeff")
        if not text:
            continue
        try:
            rows.append((lineno, json_value(text, file, lineno)))
        except UserFileError as exc:
            if exc.key is not None:  # the row read without the check names its id
                issues.append(_duplicate_issue(file, lineno, json_value(text, file, lineno, unique=False), exc.key))
            else:
                issues.append(_file_issue(exc))
    return rows, issues


def _read_json(data: bytes, file: str) -> tuple[list[Row], list[RowIssue]]:
    text = data.decode("utf-8", errors="replace").removeprefix("\ufeff")
    start = len(text) - len(text.lstrip())
    if text[start : start + 1] == "{":
        return _read_jsonl(data, file)  # a JSON Lines file saved as .json
    if text[start : start + 1] != "[":
        return [], [RowIssue(file, 1, None, "file", "expected a JSON list of row objects")]
    deep = too_deep(text)
    if deep is not None:  # json recurses once a level: refuse before decoding any element
        return [], [_file_issue(UserFileError(file, text.count("\n", 0, deep) + 1, too_deep_cause()))]
    # Decode element by element so each row keeps the line where it starts.
    decoder = UNIQUE_KEYS
    rows: list[Row] = []
    issues: list[RowIssue] = []
    pos = start + 1

    def at(p: int) -> int:
        return text.count("\n", 0, p) + 1

    def skip_space(p: int) -> int:
        while p < len(text) and text[p].isspace():
            p += 1
        return p

    while True:
        pos = skip_space(pos)
        if text[pos : pos + 1] == "]":
            rest = skip_space(pos + 1)
            if rest < len(text):
                # e.g. rows appended as JSON Lines after the list: never drop them silently
                return rows, [*issues, RowIssue(file, at(rest), None, "file",
                                                "unexpected content after the JSON list's closing ']'")]
            return rows, issues
        try:
            obj, end = decoder.raw_decode(text, pos)
        except DuplicateKeyError as dup:
            # the element's extent, read without the check, to go on with the next row
            loose, end = json.JSONDecoder().raw_decode(text, pos)
            issues.append(_duplicate_issue(file, at(pos), loose, dup.key))
        except json.JSONDecodeError as exc:
            return rows, [*issues, RowIssue(file, exc.lineno, None, "row", f"unparsable JSON: {exc.msg}")]
        else:
            rows.append((at(pos), obj))
        pos = skip_space(end)
        sep = text[pos : pos + 1]
        if sep == ",":
            pos += 1
        elif sep != "]":
            return rows, [
                *issues, RowIssue(file, at(pos), None, "row", "unparsable JSON: expected ',' or ']'")
            ]


def _read_csv(data: bytes, file: str) -> tuple[list[Row], list[RowIssue]]:
    text = data.decode("utf-8-sig", errors="replace")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    twice = _named_twice(reader.fieldnames or [])
    if twice:  # DictReader would keep the last column of the name in every row
        return [], [RowIssue(file, 1, None, twice, f"duplicate column {twice!r} in the header")]
    rows: list[Row] = []
    start = 1
    try:
        for row in reader:
            rows.append((start + 1, row))
            start = reader.line_num
    except csv.Error as exc:
        return rows, [RowIssue(file, reader.line_num, None, "row", f"unparsable CSV: {exc}")]
    return rows, []


def _read_parquet(path: Path, file: str) -> tuple[list[Row], list[RowIssue]]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several unrelated types for corrupt files
        return [], [RowIssue(file, None, None, "file", f"unreadable Parquet: {exc}")]
    twice = _named_twice(table.column_names)
    if twice:
        return [], [RowIssue(file, None, None, twice, f"duplicate column {twice!r}")]
    return [(i, row) for i, row in enumerate(table.to_pylist(), 1)], []


def _named_twice(names: Iterable[str]) -> str | None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            return name
        seen.add(name)
    return None


def read_file(path: Path) -> tuple[list[Row], list[RowIssue], bytes]:
    """The rows of one data file, the problems met parsing it, and its bytes (for hashing).

    Raises:
        DataError: The file type is not one of ``DATA_SUFFIXES``.
    """
    file = str(path)
    data = path.read_bytes()
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        rows, issues = _read_jsonl(data, file)
    elif suffix == ".json":
        rows, issues = _read_json(data, file)
    elif suffix == ".csv":
        rows, issues = _read_csv(data, file)
    elif suffix == ".parquet":
        rows, issues = _read_parquet(path, file)
    else:
        raise DataError(f"{file}: unsupported file type (use {', '.join(DATA_SUFFIXES)})")
    return rows, issues, data


def files_in(directory: Path) -> list[Path]:
    """Data files under a folder, recursively, in path order; hidden entries are skipped."""
    return sorted(
        p
        for p in directory.rglob("*")
        if p.is_file()
        and p.suffix.lower() in DATA_SUFFIXES
        and not any(part.startswith(".") for part in p.relative_to(directory).parts)
    )
