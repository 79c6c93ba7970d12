"""Reading and appending ``records.jsonl`` safely (resume-friendly, torn-line tolerant)."""

from __future__ import annotations

import errno
import json
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from pydantic import ValidationError

from medmis.tools import (
    InputError,
    MedmisError,
    UserFileError,
    configured_secrets,
    json_needs_redaction,
    json_value,
    redact_obj,
    validation_line,
)

from ._record import Record


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
            records.append(Record.model_validate(json_value(raw, p, lineno)))
        except (UserFileError, ValidationError) as exc:
            is_last = all(not rest.strip() for rest in lines[lineno:])
            # a killed run tears its last line: it is cut short, never nested too deep or
            # holding a key twice
            if is_last and not (isinstance(exc, UserFileError) and exc.kind in ("depth", "duplicate")):
                break  # torn write of a killed run; the case will be redone
            why = exc.cause if isinstance(exc, UserFileError) else f"not a record ({validation_line(exc)})"
            raise unreadable_record(p, lineno, why) from None
    if not dedupe:
        return records
    latest: dict[tuple[str, str, str, str, str | None, int], Record] = {}
    rewritten: list[tuple[str, str, str, str, str | None, int]] = []
    for r in records:
        earlier = latest.get(r.key)
        if earlier is not None and earlier.error is None and _answer(earlier) != _answer(r):
            rewritten.append(r.key)
        latest[r.key] = r
    if rewritten:
        warn_rewritten(p, rewritten)
    return list(latest.values())


def unreadable_record(path: Path, line: int | None, why: str) -> RecordsFileError:
    """The error for a line of ``records.jsonl`` no reader accepts (the same for every reader)."""
    return RecordsFileError(f"{path}:{line}: unreadable record, {why}; only a torn last line is repaired "
                            "automatically: fix or delete this line, then re-run")


def _answer(record: Record) -> tuple[str | None, bool | None, str | None]:
    return record.choice, record.correct, record.error


_WARNED: set[tuple[str, tuple[str, str, str, str, str | None]]] = set()


def warn_rewritten(path: Path, keys: Sequence[tuple[Any, ...]]) -> None:
    """One warning line: ``path`` answers a key twice differently (the last line is used).

    ``--retry-errors`` legitimately appends a record after an error; an answered key given a
    different answer later is not that, and the report would silently change. Each key is
    announced once per process (reports read the records more than once).
    """
    fresh = [k for k in keys if (str(path), k) not in _WARNED]
    if not fresh:
        return
    _WARNED.update((str(path), k) for k in fresh)
    model, defender, protocol, item, target, *rest = fresh[0]
    epoch = f", epoch {rest[0]}" if rest and rest[0] else ""  # a key of a later --epochs repeat
    more = f" (and {len(fresh) - 1} more key(s))" if len(fresh) > 1 else ""
    print(f"medmis: warning: {path} records (model, defender, protocol, item, target) = "
          f"({model}, {defender}, {protocol}, {item}, {target}){epoch} again with another answer{more}; "
          "rule: the last line of a key is used", file=sys.stderr)


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
