"""How a run ended, as an exit status and one summary line (the contract in docs/contracts.md).

==== ===================================================================================
0    finished: every case ran and was graded (no case errors in the folder)
1    finished with case errors (summary: how many, by kind, and the command that redoes them)
2    usage, config or data error (one line, nothing created)
3    stopped early (budget cap, interruption); re-running the same command resumes
==== ===================================================================================
"""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from medmis.experiments.benchmark import Record

from ._manifest import mark_outcome
from ._resume import error_texts

__all__ = [
    "EXIT_CASE_ERRORS",
    "EXIT_OK",
    "EXIT_STOPPED",
    "EXIT_USAGE",
    "Outcome",
    "RunInterrupted",
    "error_kind",
    "record_outcome",
    "run_outcome",
]

EXIT_OK = 0
EXIT_CASE_ERRORS = 1
EXIT_USAGE = 2
EXIT_STOPPED = 3

def error_kind(error: str) -> str:
    """The kind of a record's error: its exception name (``RateLimitError: ...``) or the
    first words of a message without one."""
    head, sep, _ = error.partition(":")
    if sep and head and " " not in head.strip():
        return head.strip()
    return " ".join(error.split()[:4]) or "error"


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped a run after its folder ``out`` noted why (the caller may still
    write that folder's report, which then says the run is incomplete)."""

    def __init__(self, out: Path) -> None:
        super().__init__(str(out))
        self.out = out


@dataclass(frozen=True)
class Outcome:
    """An exit status and the line that explains it (``None`` when all went well)."""

    code: int
    message: str | None = None


def run_outcome(
    records: Sequence[Record], *, stopped: str | None, argv: Sequence[str] = (),
) -> Outcome:
    """The outcome of a run folder after an invocation.

    Args:
        records: The folder's records (latest per key).
        stopped: Why the run stopped early, or None when it ran to the end.
        argv: The command as typed (``medmis run ...``), to suggest the ``--retry-errors`` rerun.
    """
    return outcome_of(len(records), [r.error for r in records if r.error], stopped=stopped, argv=argv)


def outcome_of(
    n_records: int, errors: Sequence[str], *, stopped: str | None, argv: Sequence[str] = (),
) -> Outcome:
    """:func:`run_outcome` from the record count and the error texts of the failed keys."""
    if stopped:
        return Outcome(EXIT_STOPPED, f"stopped early: {stopped}; re-run the same command to resume")
    failed = list(errors)
    if not failed:
        return Outcome(EXIT_OK)
    kinds = Counter(error_kind(e) for e in failed)
    by_kind = ", ".join(f"{n} {kind}" for kind, n in kinds.most_common(5))
    if len(kinds) > 5:
        by_kind += f", {sum(n for _, n in kinds.most_common()[5:])} other"
    args = [a for a in argv if a != "--retry-errors"]
    redo = f"; redo them with: {shlex.join([*args, '--retry-errors'])}" if args else ""
    return Outcome(
        EXIT_CASE_ERRORS,
        f"{len(failed)} of {n_records} cases failed ({by_kind}){redo}",
    )


def record_outcome(out: Path, records_path: Path, stopped: str | None,
                   argv: Sequence[str], concurrency: dict[str, Any] | None = None,
                   tally: tuple[int, list[str]] | None = None) -> tuple[int, Outcome]:
    """Decide the outcome from the folder's records (their keys and error texts, read
    columnar) and note it (and any early stop, and how the run's concurrency adapted) in
    ``out/manifest.json``; returns the number of records and the outcome.

    ``tally`` is the record count and error texts when the caller wrote every record of the
    folder itself (one per key, as a run into an empty folder does): then the file is not read.
    """
    n, errors = tally if tally is not None else error_texts(records_path)
    outcome = outcome_of(n, errors, stopped=stopped, argv=argv)
    mark_outcome(out, outcome, stopped=stopped, errors=len(errors), concurrency=concurrency)
    return n, outcome
