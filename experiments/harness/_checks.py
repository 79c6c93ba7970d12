"""Checks of user input against a run folder's contents (one-line errors for the CLI)."""

from __future__ import annotations

from pathlib import Path

from medmis.experiments.records import read_records

from ._config import RunSetupError

__all__ = ["check_baseline"]


def check_baseline(records_path: Path, baseline: str | None) -> str:
    """The baseline defender to compare against.

    ``None`` (not given) means ``none``, compared only when the run has it. A baseline named
    by the user must be one of the run's defender labels.

    Raises:
        RunSetupError: The named baseline is not a defender of the run.
    """
    if baseline is None:
        return "none"
    labels = sorted({r.defender for r in read_records(records_path)})
    if baseline not in labels:
        raise RunSetupError(
            f"--baseline {baseline!r} is not a defender of this run (choose from {', '.join(labels) or 'none'})"
        )
    return baseline
