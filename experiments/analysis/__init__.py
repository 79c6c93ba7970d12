"""Records -> metrics -> verdict: paired accuracy, ASR, TASR, recovery, strata, comparisons,
cost, and the decision drawn from them.

``compare`` (two run folders) and ``compare_records`` pair two runs of the same grid on two
versions of the items.
``compute_metrics`` (or ``compute_run_metrics`` on a run folder; ``run_metrics`` before) turns a run's records into a
:class:`MetricsReport`; ``decide`` turns that into a :class:`Verdict` (``Verdict.to_json()`` is
``verdict.json``). The interval and test functions they use are public for reuse.
"""

from ._cluster import (
    cluster_bootstrap_interval,
    cluster_sign_test,
    clustered_paired_diff,
    clustered_proportion,
    tango_interval,
)
from ._columnar import compute_run_metrics
from ._compare import CompareRow, compare, compare_records
from ._compute import compare_defenders, compute_metrics
from ._metrics import (
    PAIRWISE_METRICS,
    Cost,
    DefenderMetrics,
    MetricsReport,
    PairedComparison,
    UnitOutcomes,
    canonical_order,
    compare_paired,
    cost_of,
    item_tags,
)
from ._poison import (
    EXPOSURE_METRICS,
    POISON_DIR,
    POISON_METRICS,
    ShareRun,
    StopVerdict,
    exposure,
    planned_shares,
    share_cells,
    share_dir,
    share_label,
    stops_being_better,
    write_plan,
)
from ._removals import removal_rates, run_removal_rates
from ._same_answers import same_answers
from ._stats import mcnemar_exact, p50, p95, paired_bootstrap_diff, percentile, wilson
from ._units import (
    ERRORS_AS_FAILURES,
    FAILURE_METRICS,
    INDICATOR_METRICS,
    METRICS,
    PAIRED_METRICS,
    PROTOCOL_METRICS,
    STRATUM_JOIN,
    STRATUM_KINDS,
    UNSPECIFIED,
    Proportion,
    errors_as_failures,
    indicator_maps,
    is_correct,
    item_key,
    metric_block,
    unit_key,
)
from ._verdict import (
    ALPHA,
    CLEAN_DROP_TOLERANCE,
    DEFAULT_SETTINGS,
    FAMILY_METHOD,
    MIN_UNITS,
    OVERCORRECT_DROP,
    FamilyMember,
    Finding,
    Guard,
    LikeControl,
    ModelVerdict,
    Pairwise,
    Prices,
    Verdict,
    VerdictSettings,
    decide,
    decide_family,
    usd,
)

__all__ = [
    "ALPHA",
    "CLEAN_DROP_TOLERANCE",
    "DEFAULT_SETTINGS",
    "ERRORS_AS_FAILURES",
    "EXPOSURE_METRICS",
    "FAILURE_METRICS",
    "FAMILY_METHOD",
    "INDICATOR_METRICS",
    "METRICS",
    "MIN_UNITS",
    "OVERCORRECT_DROP",
    "PAIRED_METRICS",
    "PAIRWISE_METRICS",
    "POISON_DIR",
    "POISON_METRICS",
    "PROTOCOL_METRICS",
    "STRATUM_JOIN",
    "STRATUM_KINDS",
    "UNSPECIFIED",
    "CompareRow",
    "Cost",
    "DefenderMetrics",
    "FamilyMember",
    "Finding",
    "Guard",
    "LikeControl",
    "MetricsReport",
    "ModelVerdict",
    "PairedComparison",
    "Pairwise",
    "Prices",
    "Proportion",
    "ShareRun",
    "StopVerdict",
    "UnitOutcomes",
    "Verdict",
    "VerdictSettings",
    "canonical_order",
    "cluster_bootstrap_interval",
    "cluster_sign_test",
    "clustered_paired_diff",
    "clustered_proportion",
    "compare",
    "compare_defenders",
    "compare_paired",
    "compare_records",
    "compute_metrics",
    "compute_run_metrics",
    "cost_of",
    "decide",
    "decide_family",
    "errors_as_failures",
    "exposure",
    "indicator_maps",
    "is_correct",
    "item_key",
    "item_tags",
    "mcnemar_exact",
    "metric_block",
    "p50",
    "p95",
    "paired_bootstrap_diff",
    "percentile",
    "planned_shares",
    "removal_rates",
    "run_removal_rates",
    "same_answers",
    "share_cells",
    "share_dir",
    "share_label",
    "stops_being_better",
    "tango_interval",
    "unit_key",
    "usd",
    "wilson",
    "write_plan",
]


def __getattr__(name: str) -> object:
    # ``run_metrics`` was this package's name for ``compute_run_metrics`` (a verb for what it
    # does: ``run`` names the command that makes a run folder)
    if name == "run_metrics":
        import warnings

        warnings.warn("medmis.experiments.analysis.run_metrics is deprecated: use compute_run_metrics",
                      DeprecationWarning, stacklevel=2)
        return compute_run_metrics
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
