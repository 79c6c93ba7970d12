"""Records -> metrics: paired accuracy, ASR, TASR, recovery, strata, comparisons and cost.

``compute_metrics`` turns a run's records into a :class:`MetricsReport`; the interval and test
functions it uses (Wilson, exact McNemar, paired bootstrap) are public for reuse.
"""

from ._metrics import (
    METRICS,
    STRATUM_KINDS,
    Cost,
    DefenderMetrics,
    MetricsReport,
    PairedComparison,
    Proportion,
    compute_metrics,
    is_correct,
)
from ._stats import mcnemar_exact, p50, p95, paired_bootstrap_diff, percentile, wilson

__all__ = [
    "METRICS",
    "STRATUM_KINDS",
    "Cost",
    "DefenderMetrics",
    "MetricsReport",
    "PairedComparison",
    "Proportion",
    "compute_metrics",
    "is_correct",
    "mcnemar_exact",
    "p50",
    "p95",
    "paired_bootstrap_diff",
    "percentile",
    "wilson",
]
