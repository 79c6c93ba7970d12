"""Free-text answers graded by a rubric jury (``medmis grade``) and the open-ended metrics.

Rubric files (:func:`load_rubrics`), HealthBench's score rule (:func:`answer_score`,
:func:`clipped_mean`, :func:`bootstrap_std`) and the jury's (:func:`jury_score`,
:func:`jury_met`), the judge prompt (:func:`judge_prompt`), the grading step (:func:`grade`)
and the paired open-ended metrics (:func:`open_metrics`).
"""

from typing import TYPE_CHECKING

from medmis.tools import lazy_exports

if TYPE_CHECKING:
    from ._analysis import OpenAnalysis, open_analysis
    from ._beside import BESIDE_KEY, agreement, check_mcq_run, mcq_beside
    from ._cli import add_parser, run_grade
    from ._defaults import DEFAULT_THRESHOLD, GRADES_FILE
    from ._grade import (
        GradeSettings,
        grade,
        grade_async,
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

# Loaded on first use: `medmis --help` builds the grade parser and must not import numpy.
_HOME = {
    **dict.fromkeys(("OpenAnalysis", "open_analysis"), "_analysis"),
    **dict.fromkeys(("BESIDE_KEY", "agreement", "check_mcq_run", "mcq_beside"), "_beside"),
    **dict.fromkeys(("add_parser", "run_grade"), "_cli"),
    **dict.fromkeys(("DEFAULT_THRESHOLD", "GRADES_FILE"), "_defaults"),
    **dict.fromkeys(("GradeSettings", "grade", "grade_async",
                     "judges_of", "read_grades"), "_grade"),
    **dict.fromkeys(("INCORRECT", "NOT_GRADED", "answer_scores", "graded_records", "open_metrics"), "_metrics"),
    **dict.fromkeys(("JUDGE_PROMPT_VERSION", "judge_prompt", "read_verdict"), "_prompt"),
    **dict.fromkeys(("CRITERION_KINDS", "Criterion", "ItemRubric", "RubricSet", "dump_rubrics", "load_rubrics",
                     "parse_rubrics"), "_rubrics"),
    **dict.fromkeys(("answer_score", "bootstrap_std", "clipped_mean", "jury_met", "jury_score"), "_score"),
}
__getattr__ = lazy_exports(__name__, _HOME, globals())

__all__ = [
    "BESIDE_KEY",
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
    "agreement",
    "answer_score",
    "answer_scores",
    "bootstrap_std",
    "check_mcq_run",
    "clipped_mean",
    "dump_rubrics",
    "grade",
    "grade_async",
    "graded_records",
    "judge_prompt",
    "judges_of",
    "jury_met",
    "jury_score",
    "load_rubrics",
    "mcq_beside",
    "open_analysis",
    "open_metrics",
    "parse_rubrics",
    "read_grades",
    "read_verdict",
    "run_grade",
]
