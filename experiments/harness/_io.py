"""Reading and appending ``records.jsonl`` safely (resume-friendly, torn-line tolerant)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from medmis.experiments.benchmark._types import Record
from medmis.tools._redact import configured_secrets, redact_obj

from ._scan import complete_length


def scrub_outputs(record: Record, trace: dict[str, Any]) -> tuple[Record, dict[str, Any]]:
    """A case's record and trace with credentials masked, as they may be written to disk.

    Every string goes through :func:`~medmis.tools._redact.redact` with the keys this process
    was configured with: a provider error that echoes the rejected key, a base URL with
    ``user:pass@`` or a key-shaped string in a reply never reaches records or traces.
    """
    secrets = configured_secrets()
    dumped = record.model_dump(mode="json")
    scrubbed = redact_obj(dumped, secrets)
    # nearly every record has nothing to mask: keep it rather than validating a copy
    clean = record if scrubbed == dumped else Record.model_validate(scrubbed)
    # the trace may hold objects json.dumps only knows through str(): redact those texts too
    plain = json.loads(json.dumps(trace, ensure_ascii=False, default=str))
    return clean, redact_obj(plain, secrets)


class RecordsFileError(ValueError):
    """A line before the last one of ``records.jsonl`` is unreadable (``file:line: why``)."""


def read_records(path: str | Path, *, dedupe: bool = True) -> list[Record]:
    """Read records; a torn (partial) last line from a killed run is skipped.

    Raises:
        RecordsFileError: Any other line is unreadable (one line naming file and line).

    With ``dedupe`` the last record for a key wins (``--retry-errors`` appends a fresh
    record for a key that previously failed).
    """
    p = Path(path)
    if not p.exists():
        return []
    records: list[Record] = []
    with p.open("r", encoding="utf-8") as fh:
        lines = fh.read().split("\n")
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(Record.model_validate(json.loads(line)))
        except (json.JSONDecodeError, ValidationError) as exc:
            is_last = all(not rest.strip() for rest in lines[lineno:])
            if is_last:
                break  # torn write of a killed run; the case will be redone
            why = (f"not JSON ({exc.msg})" if isinstance(exc, json.JSONDecodeError)
                   else f"not a record ({_first_problem(exc)})")
            raise RecordsFileError(
                f"{p}:{lineno}: unreadable record, {why}; only a torn last line is repaired "
                "automatically: fix or delete this line, then re-run"
            ) from None
    if not dedupe:
        return records
    latest: dict[tuple[str, str, str, str, str | None], Record] = {}
    for r in records:
        latest[r.key] = r
    return list(latest.values())


def _first_problem(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "record"
    return f"{where}: {first['msg']}"


def repair_torn_tail(path: str | Path) -> None:
    """Cut a partial last line so that appends start on a fresh line."""
    p = Path(path)
    if not p.exists() or p.stat().st_size == 0:
        return
    size = p.stat().st_size
    with p.open("rb+") as fh:
        cut = complete_length(fh, size)
        if cut < size:
            fh.truncate(cut)


def append_records(path: str | Path, records: Iterable[Record]) -> None:
    """Append whole lines and flush them to disk, one write per record."""
    with open(path, "a", encoding="utf-8") as fh:
        for r in records:
            fh.write(r.model_dump_json() + "\n")
            fh.flush()
        os.fsync(fh.fileno())
