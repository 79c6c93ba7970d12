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
from medmis.tools import ConfigError, json_file

from ._beside import check_mcq_run, mcq_beside
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
    beside: dict[str, Any] | None = None
    """The MCQ run of the same items beside this one (:func:`mcq_beside`), when one was named."""


def open_analysis(run_dir: str | Path, *, baseline: str = "none", seed: int = 0, simulated: bool = False,
                  settings: VerdictSettings | None = None, mcq_run: str | Path | None = None) -> OpenAnalysis | None:
    """The open-ended figures of a run folder, or None when it has no grades; ``mcq_run``: the
    multiple-choice run of the same items, whose figures go beside them (:mod:`._beside`).

    Raises:
        UserFileError: ``grades.jsonl`` or the manifest is unreadable.
        ConfigError: ``mcq_run`` is not an MCQ run of the same models, defenders and items.
    """
    run = Path(run_dir)
    raw, mcq_records = None, None
    if mcq_run is not None:  # checked first: a wrong folder is refused with nothing written
        raw = read_records(run / "records.jsonl")
        mcq_records = check_mcq_run(run, mcq_run, raw)
        if not (run / GRADES_FILE).is_file():
            raise ConfigError(f"--mcq-run {mcq_run}: {run} has no grades to set beside it (run `medmis grade` first)")
    if not (run / GRADES_FILE).is_file():
        return None
    manifest = json_file(run / "manifest.json") if (run / "manifest.json").is_file() else {}
    block = manifest.get("grading")
    grades = read_grades(run)
    if not isinstance(block, dict) or not grades:
        return None
    judges = [str(j) for j in block.get("judges", [])]
    threshold = float(block.get("threshold", 0.5))
    if raw is None:
        raw = read_records(run / "records.jsonl")
    records = graded_records(raw, grades, judges, threshold)
    report = compute_metrics(records, baseline=baseline, seed=seed)
    sim = simulated or bool(block.get("simulated_judges"))
    beside = (mcq_beside(report, records, mcq_run, mcq_records, baseline=baseline, seed=seed)
              if mcq_run is not None and mcq_records is not None else None)
    return OpenAnalysis(grading=block, metrics=open_metrics(grades, judges, threshold), report=report,
                        verdict=decide(report, simulated=sim, settings=settings), beside=beside)
