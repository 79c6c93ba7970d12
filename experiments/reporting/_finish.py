"""The end of a run, the same for ``medmis run``, :func:`medmis.experiments.run` and every folder
of ``medmis ablate``: its report (re)written when due, its outcome handed back."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from medmis.experiments.analysis import VerdictSettings
    from medmis.experiments.harness import Outcome, RunResult

__all__ = ["finish_run"]


def finish_run(result: RunResult, *, report: bool = True, rewrite: bool = False, baseline: str = "none",
               figures: bool = True, settings: VerdictSettings | None = None,
               mcq_run: str | Path | None = None) -> Outcome:
    """Finish a run that returned: write its report files (into ``result.report``) and return
    its outcome (exit code and one-line summary, for the caller to show).

    Args:
        result: What the harness returned.
        report: Write the report at all (a run configured with ``write_report=False`` does not).
        rewrite: Write it even when the run had nothing to do and its ``report.md`` exists (an
            ablation's main report also reads its sub-runs, which may have changed).
        baseline: The defender the report compares the others with.
        figures: Draw the plots (an ablation's sub-runs leave them to the main report).
        settings: The verdict's settings (the defaults without them).
        mcq_run: The MCQ run of the same items, shown beside a graded open-ended run's figures.
    """
    from medmis.experiments.reporting import write_report

    stale = rewrite or not (result.nothing_to_do and (result.out / "report.md").exists())
    if report and stale:
        result.report = write_report(result.out, baseline=baseline, figures=figures, settings=settings,
                                     mcq_run=mcq_run)
    if result.outcome is None:  # every run that returns has one: a harness that forgot is a bug
        raise RuntimeError(f"the run in {result.out} returned without an outcome")
    return result.outcome
