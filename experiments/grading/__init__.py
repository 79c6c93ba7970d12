"""Free-text answers graded by a rubric jury (``medmis grade``) and the open-ended metrics.

Rubric files (:func:`load_rubrics`), HealthBench's score rule (:func:`answer_score`,
:func:`clipped_mean`, :func:`bootstrap_std`) and the jury's (:func:`jury_score`,
:func:`jury_met`), the judge prompt (:func:`judge_prompt`), the grading step (:func:`grade`)
and the paired open-ended metrics (:func:`open_metrics`).
"""

from ._analysis import OpenAnalysis, open_analysis
from ._cli import add_parser, run_grade
from ._grade import (
    DEFAULT_THRESHOLD,
    GRADES_FILE,
    GradeSettings,
    grade,
    grade_async,
    is_open_ended,
    judges_of,
    read_grades,
)
from ._metrics import INCORRECT, NOT_GRADED, answer_scores, graded_records, open_metrics
from ._prompt import JUDGE_PROMPT_VERSION, judge_prompt, read_verdict
from ._rubrics import (
    CRITERION_KINDS,
    Criterion,
    ItemRubric,
    RubricSet,
    dump_rubrics,
    load_rubrics,
    parse_rubrics,
)
from ._score import answer_score, bootstrap_std, clipped_mean, jury_met, jury_score

__all__ = [
    "CRITERION_KINDS",
    "DEFAULT_THRESHOLD",
    "GRADES_FILE",
    "INCORRECT",
    "JUDGE_PROMPT_VERSION",
    "NOT_GRADED",
    "Criterion",
    "GradeSettings",
    "ItemRubric",
    "OpenAnalysis",
    "RubricSet",
    "add_parser",
    "answer_score",
    "answer_scores",
    "bootstrap_std",
    "clipped_mean",
    "dump_rubrics",
    "grade",
    "grade_async",
    "graded_records",
    "is_open_ended",
    "judge_prompt",
    "judges_of",
    "jury_met",
    "jury_score",
    "load_rubrics",
    "open_analysis",
    "open_metrics",
    "parse_rubrics",
    "read_grades",
    "read_verdict",
    "run_grade",
]
