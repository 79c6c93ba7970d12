"""Clinician review of a run, after MedMisBench's Appendix B (arXiv 2606.12291).

The loop: ``sample_pack`` draws a stratified, seeded sample of a run's Type 1 cases and assigns
them to reviewers (``PACK/tasks.jsonl``); ``write_forms`` writes one offline HTML form per
reviewer, which autosaves in the browser and exports ``ratings.csv``; ``analyze_pack`` validates
the ratings and writes ``review.json``, ``review.md`` and plots: worst-case rates under three
aggregation rules, Rubric A quality, Gwet's AC2 agreement, agreement with the automatic label,
and a mixed-effects logistic regression with a reviewer random intercept.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._agreement import AC2, gwet_ac2, ordinal_weights
    from ._analyze import RULES, analyze, falsehood_stratum, task_worst
    from ._cli import add_parser as add_parser  # `medmis review`: not in __all__
    from ._cli import run_review as run_review
    from ._form import render_form, write_forms
    from ._glmm import fit_worst_case_glmm
    from ._keys import DEFAULT_REVIEWERS, DEFAULT_STRATIFY, STRATA
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
    from ._sample import sample_pack

# Loaded on first use: `medmis --help` must not pay for numpy, scipy and matplotlib.
_SOURCES: dict[str, str] = {
    "add_parser": "_cli",
    "run_review": "_cli",
    "AC2": "_agreement",
    "Annotation": "_ratings",
    "COLUMNS": "_ratings",
    "CONTENT_DEFINITIONS": "_rubrics",
    "Criterion": "_rubrics",
    "DEFAULT_REVIEWERS": "_keys",
    "DEFAULT_STRATIFY": "_keys",
    "FLAGS": "_rubrics",
    "Flag": "_rubrics",
    "PROVENANCE_DEFINITIONS": "_rubrics",
    "RUBRIC_A": "_rubrics",
    "RUBRIC_B": "_rubrics",
    "RULES": "_analyze",
    "ReviewError": "_pack",
    "STRATA": "_keys",
    "Task": "_pack",
    "TraceLine": "_pack",
    "analyze": "_analyze",
    "analyze_pack": "_report",
    "falsehood_stratum": "_analyze",
    "fit_worst_case_glmm": "_glmm",
    "gwet_ac2": "_agreement",
    "ordinal_weights": "_agreement",
    "read_ratings": "_ratings",
    "read_reviewers": "_pack",
    "read_tasks": "_pack",
    "render_form": "_form",
    "render_markdown": "_report",
    "sample_pack": "_sample",
    "task_worst": "_analyze",
    "write_forms": "_form",
}

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


def __getattr__(name: str) -> Any:
    module = _SOURCES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
