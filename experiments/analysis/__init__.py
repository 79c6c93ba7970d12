"""Records -> metrics: paired accuracy, ASR, TASR, recovery, strata, comparisons and cost.

``compute_metrics`` turns a run's records into a :class:`MetricsReport`; the interval and test
functions it uses (Wilson, exact McNemar, paired bootstrap) are public for reuse.
"""

from ._cluster import (
    cluster_sign_test,
    clustered_paired_diff,
    clustered_proportion,
    tango_interval,
)
from ._metrics import (
    Cost,
    DefenderMetrics,
    MetricsReport,
    PairedComparison,
    compare_paired,
    compute_metrics,
    cost_of,
    item_tags,
)
from ._stats import mcnemar_exact, p50, p95, paired_bootstrap_diff, percentile, wilson
from ._units import (
    INDICATOR_METRICS,
    METRICS,
    PAIRED_METRICS,
    PROTOCOL_METRICS,
    STRATUM_JOIN,
    STRATUM_KINDS,
    UNSPECIFIED,
    Proportion,
    indicator_maps,
    is_correct,
    item_key,
    metric_block,
)

__all__ = [
    "INDICATOR_METRICS",
    "METRICS",
    "PAIRED_METRICS",
    "PROTOCOL_METRICS",
    "STRATUM_JOIN",
    "STRATUM_KINDS",
    "UNSPECIFIED",
    "Cost",
    "DefenderMetrics",
    "MetricsReport",
    "PairedComparison",
    "Proportion",
    "cluster_sign_test",
    "clustered_paired_diff",
    "clustered_proportion",
    "compare_paired",
    "compute_metrics",
    "cost_of",
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
    "tango_interval",
    "wilson",
]
