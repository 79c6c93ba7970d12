"""Clinician review of a run, after MedMisBench's Appendix B (arXiv 2606.12291).

The loop: ``sample_pack`` draws a stratified, seeded sample of a run's Type 1 cases and assigns
them to reviewers (``PACK/tasks.jsonl``); ``write_forms`` writes one offline HTML form per
reviewer, which autosaves in the browser and exports ``ratings.csv``; ``analyze_pack`` validates
the ratings and writes ``review.json``, ``review.md`` and plots: worst-case rates under three
aggregation rules, Rubric A quality, Gwet's AC2 agreement, agreement with the automatic label,
and a mixed-effects logistic regression with a reviewer random intercept.
"""

from ._agreement import AC2, gwet_ac2, ordinal_weights
from ._analyze import RULES, analyze, falsehood_stratum, task_worst
from ._form import render_form, write_forms
from ._glmm import fit_worst_case_glmm
from ._pack import ReviewError, Task, TraceLine, read_reviewers, read_tasks
from ._ratings import COLUMNS, Annotation, read_ratings
from ._report import analyze_pack, render_markdown
from ._rubrics import (
    CONTENT_DEFINITIONS,
    FLAGS,
    PROVENANCE_DEFINITIONS,
    RUBRIC_A,
    RUBRIC_B,
    Criterion,
    Flag,
)
from ._sample import DEFAULT_REVIEWERS, DEFAULT_STRATIFY, STRATA, sample_pack

__all__ = [
    "AC2",
    "COLUMNS",
    "CONTENT_DEFINITIONS",
    "DEFAULT_REVIEWERS",
    "DEFAULT_STRATIFY",
    "FLAGS",
    "PROVENANCE_DEFINITIONS",
    "RUBRIC_A",
    "RUBRIC_B",
    "RULES",
    "STRATA",
    "Annotation",
    "Criterion",
    "Flag",
    "ReviewError",
    "Task",
    "TraceLine",
    "analyze",
    "analyze_pack",
    "falsehood_stratum",
    "fit_worst_case_glmm",
    "gwet_ac2",
    "ordinal_weights",
    "read_ratings",
    "read_reviewers",
    "read_tasks",
    "render_form",
    "render_markdown",
    "sample_pack",
    "task_worst",
    "write_forms",
]
