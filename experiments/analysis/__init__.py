"""Records -> metrics -> verdict: paired accuracy, ASR, TASR, recovery, strata, comparisons,
cost, and the decision drawn from them.

``compute_metrics`` (or ``run_metrics`` on a run folder) turns a run's records into a
:class:`MetricsReport`; ``decide`` turns that into a :class:`Verdict` (``Verdict.to_json()`` is
``verdict.json``). The interval and test functions they use are public for reuse.
"""

from ._cluster import (
    cluster_sign_test,
    clustered_paired_diff,
    clustered_proportion,
    tango_interval,
)
from ._columnar import run_metrics
from ._compute import compare_defenders, compute_metrics
from ._metrics import (
    PAIRWISE_METRICS,
    Cost,
    DefenderMetrics,
    MetricsReport,
    PairedComparison,
    UnitOutcomes,
    compare_paired,
    cost_of,
    item_tags,
)
from ._same_answers import same_answers
from ._stats import mcnemar_exact, p50, p95, paired_bootstrap_diff, percentile, wilson
from ._units import (
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
)
from ._verdict import (
    DEFAULT_SETTINGS,
    Finding,
    Guard,
    LikeControl,
    ModelVerdict,
    Pairwise,
    Verdict,
    VerdictSettings,
    decide,
)

__all__ = [
    "DEFAULT_SETTINGS",
    "FAILURE_METRICS",
    "INDICATOR_METRICS",
    "METRICS",
    "PAIRED_METRICS",
    "PAIRWISE_METRICS",
    "PROTOCOL_METRICS",
    "STRATUM_JOIN",
    "STRATUM_KINDS",
    "UNSPECIFIED",
    "Cost",
    "DefenderMetrics",
    "Finding",
    "Guard",
    "LikeControl",
    "MetricsReport",
    "ModelVerdict",
    "PairedComparison",
    "Pairwise",
    "Proportion",
    "UnitOutcomes",
    "Verdict",
    "VerdictSettings",
    "cluster_sign_test",
    "clustered_paired_diff",
    "clustered_proportion",
    "compare_defenders",
    "compare_paired",
    "compute_metrics",
    "cost_of",
    "decide",
    "errors_as_failures",
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
    "run_metrics",
    "same_answers",
    "tango_interval",
    "wilson",
]
