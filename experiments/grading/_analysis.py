"""A graded run folder's open-ended figures: the metrics of :mod:`._metrics` and the MCQ
machinery (metrics, paired comparisons, Holm, guards, verdict) over the jury-graded records."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from medmis.experiments.analysis import (
    MetricsReport,
    Verdict,
    VerdictSettings,
    compute_metrics,
    decide,
)
from medmis.experiments.records import read_records
from medmis.tools import json_file

from ._grade import GRADES_FILE, read_grades
from ._metrics import graded_records, open_metrics


@dataclass(frozen=True)
class OpenAnalysis:
    """What the report's open-ended section shows."""

    grading: dict[str, Any]
    """The manifest's ``grading`` block (rubric sha256, judges, threshold, prompt version)."""
    metrics: dict[str, dict[str, dict[str, Any]]]
    """:func:`open_metrics` (scores, score drops, uptake, disagreement)."""
    report: MetricsReport
    """The MCQ metrics over the jury-graded records (open-ended ASR = ``type1_asr``, ...)."""
    verdict: Verdict
    """The verdict rules over ``report``."""


def open_analysis(run_dir: str | Path, *, baseline: str = "none", seed: int = 0, simulated: bool = False,
                  settings: VerdictSettings | None = None) -> OpenAnalysis | None:
    """The open-ended figures of a run folder, or None when it has no grades.

    Raises:
        UserFileError: ``grades.jsonl`` or the manifest is unreadable.
    """
    run = Path(run_dir)
    if not (run / GRADES_FILE).is_file():
        return None
    manifest = json_file(run / "manifest.json") if (run / "manifest.json").is_file() else {}
    block = manifest.get("grading")
    grades = read_grades(run)
    if not isinstance(block, dict) or not grades:
        return None
    judges = [str(j) for j in block.get("judges", [])]
    threshold = float(block.get("threshold", 0.5))
    records = graded_records(read_records(run / "records.jsonl"), grades, judges, threshold)
    report = compute_metrics(records, baseline=baseline, seed=seed)
    sim = simulated or bool(block.get("simulated_judges"))
    return OpenAnalysis(grading=block, metrics=open_metrics(grades, judges, threshold), report=report,
                        verdict=decide(report, simulated=sim, settings=settings))
