"""Reading and appending ``records.jsonl`` safely (resume-friendly, torn-line tolerant)."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO

from pydantic import ValidationError

from medmis.experiments.benchmark import Record
from medmis.tools import (
    InputError,
    MedmisError,
    configured_secrets,
    json_needs_redaction,
    redact_obj,
)


def scrub_lines(record: Record, trace: dict[str, Any],
                secrets: list[str] | None = None) -> tuple[Record, str, str]:
    """A case's record and trace with credentials masked, as the lines to write to disk.

    Every string goes through :func:`~medmis.tools._redact.redact` with the keys this process
    was configured with (``secrets``; default: :func:`~medmis.tools._redact.configured_secrets`):
    a provider error that echoes the rejected key, a base URL with ``user:pass@`` or a
    key-shaped string in a reply never reaches records or traces. Each is serialised once;
    the walk over its strings runs only when its JSON text could hold something to mask
    (:func:`~medmis.tools._redact.json_needs_redaction`), which nearly no case's does.

    Returns:
        The (possibly masked) record, its ``records.jsonl`` line and its trace line, both
        without the newline. Objects ``json`` cannot encode in the trace are written as ``str()``.
    """
    secrets = configured_secrets() if secrets is None else secrets
    record_line = record.model_dump_json()
    if json_needs_redaction(record_line, secrets):
        dumped = record.model_dump(mode="json")
        scrubbed = redact_obj(dumped, secrets)
        if scrubbed != dumped:
            record = Record.model_validate(scrubbed)
            record_line = record.model_dump_json()
    trace_line = json.dumps(trace, ensure_ascii=False, default=str)
    if json_needs_redaction(trace_line, secrets):
        trace_line = json.dumps(redact_obj(json.loads(trace_line), secrets), ensure_ascii=False)
    return record, record_line, trace_line


class RecordsFileError(InputError, ValueError):
    """A line before the last one of ``records.jsonl`` is unreadable (``file:line: why``)."""


def os_error_text(error: OSError) -> str:
    """``[Errno 28 ENOSPC] No space left on device``: the number, its name and its text."""
    code = f"Errno {error.errno} {errno.errorcode.get(error.errno, '')}".strip() if error.errno else "error"
    return f"[{code}] {error.strerror or str(error) or type(error).__name__}"


class WriteFailed(MedmisError):
    """Writing into the run folder failed (a full disk, a read-only folder, a directory where
    a file should be): one line naming the path and the error number.

    ``written`` is how many records this invocation had written before: none means nothing
    ran (exit 2), otherwise the run stopped early with its folder resumable (exit 3).
    """

    def __init__(self, path: str | Path, error: OSError, written: int = 0) -> None:
        self.path = Path(path)
        self.errno = error.errno
        self.written = written
        self.why = os_error_text(error)
        super().__init__(self.path, self.why)

    def __str__(self) -> str:
        done = (f"; {self.written} record(s) written before it, re-run the same command to resume"
                if self.written else "; nothing was written")
        return f"cannot write {self.path}: {self.why}{done}"

    @property
    def exit_code(self) -> int:
        return 3 if self.written else 2


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
    with p.open("rb") as fh:
        lines = fh.read().split(b"\n")  # decoded line by line: a bad byte names its line
    for lineno, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            records.append(Record.model_validate(json.loads(raw.decode("utf-8"))))
        except (UnicodeDecodeError, json.JSONDecodeError, ValidationError) as exc:
            is_last = all(not rest.strip() for rest in lines[lineno:])
            if is_last:
                break  # torn write of a killed run; the case will be redone
            if isinstance(exc, UnicodeDecodeError):
                why = f"not UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})"
            elif isinstance(exc, json.JSONDecodeError):
                why = f"not JSON ({exc.msg})"
            else:
                why = f"not a record ({_first_problem(exc)})"
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


def complete_length(fh: BinaryIO, size: int) -> int:
    """How many bytes of a JSONL file of ``size`` bytes end on a newline (all of them unless
    its last line is torn); the last newline is looked for backwards in blocks, since a run's
    file can be gigabytes."""
    if size == 0:
        return 0
    fh.seek(size - 1)
    if fh.read(1) == b"\n":
        return size
    end, block = size, 1 << 16
    while end > 0:
        start = max(0, end - block)
        fh.seek(start)
        at = fh.read(end - start).rfind(b"\n")
        if at >= 0:
            return start + at + 1
        end = start
    return 0
