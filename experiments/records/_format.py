"""Which answer format a run folder holds: ``mcq`` (graded by the harness) or ``open``
(free-text answers, graded afterwards by ``medmis grade``).

One definition, read from ``manifest.json`` (``answer_format``, or the fingerprint's), so every
reader of a folder (metrics, report, compare) tells the two apart the same way. A folder
written before open-ended answers existed says nothing and is ``mcq``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from medmis.tools import InputError

GRADE_HINT = "run `medmis grade RUN_DIR --rubrics FILE --judge SPEC --judge SPEC`"
"""What to do with an open-ended run's answers (the grading step owns them)."""


class UngradedRunError(InputError):
    """Multiple-choice metrics asked of an open-ended run, whose answers are ungraded free text."""


def answer_format_of(run_dir: str | Path) -> str:
    """``open`` when the folder's manifest says its cases were asked without options, else
    ``mcq`` (also for a folder without a readable manifest: older runs were all ``mcq``)."""
    try:
        manifest: Any = json.loads((Path(run_dir) / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "mcq"
    if not isinstance(manifest, dict):
        return "mcq"
    fingerprint = manifest.get("fingerprint")
    found = manifest.get("answer_format") or (
        fingerprint.get("answer_format") if isinstance(fingerprint, dict) else None)
    return "open" if found == "open" else "mcq"


def refuse_open(run_dir: str | Path, what: str = "multiple-choice metrics") -> None:
    """Raise :class:`UngradedRunError` when ``run_dir`` is an open-ended run: its records have
    no choice and no ``correct``, and counting them as wrong or unparsed would be false.

    Raises:
        UngradedRunError: The folder holds open-ended answers.
    """
    if answer_format_of(run_dir) == "open":
        raise UngradedRunError(
            f"{run_dir}: an open-ended run (answer_format open): its answers are free text, not "
            f"graded here, so it has no {what}; {GRADE_HINT}")
