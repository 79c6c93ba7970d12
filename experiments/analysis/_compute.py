"""The metrics of records in memory, and paired comparisons between two defenders of a report:
both run on the columnar engine (:mod:`._columnar`) and its report types (:mod:`._metrics`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from medmis.experiments.benchmark import Record

from ._columnar import _compare_all, metrics_from_view, records_into
from ._metrics import PAIRWISE_METRICS, MetricsReport, PairedComparison, UnitOutcomes


def compare_defenders(report: MetricsReport, model: str, pairs: Sequence[tuple[str, str]], *,
                      metric: str = "type1_asr") -> list[PairedComparison]:
    """Paired comparisons of defender ``a`` with defender ``b`` of one model, for each pair.

    Same units, interval and test as each defender's comparison with the baseline
    (:func:`compare_arrays`): ``diff = value(a) - value(b)`` on the units both define, the
    comparison's ``baseline`` field naming ``b``. Unit ids are sorted, so pairing is one
    vectorised intersection.

    Raises:
        ValueError: When the report keeps no per-unit outcomes of ``metric`` (it was not made
            by :func:`compute_metrics` / ``compute_run_metrics``).
    """
    if metric not in PAIRWISE_METRICS:
        raise ValueError(f"per-unit outcomes are kept for {', '.join(PAIRWISE_METRICS)} only")
    empty = UnitOutcomes(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64))
    jobs, names = [], []
    for a, b in pairs:
        try:
            ua = report.unit_outcomes(model, a, metric) or empty
            ub = report.unit_outcomes(model, b, metric) or empty
        except ValueError:
            raise ValueError(f"no per-unit outcomes for {model} x {a} or {b}") from None
        _, ia, ib = np.intersect1d(ua.units, ub.units, assume_unique=True, return_indices=True)
        jobs.append((ua.outcomes[ia], ub.outcomes[ib], list(ua.items[ia])))
        names.append(b)
    out = []
    for name, job in zip(names, jobs, strict=True):
        out.extend(_compare_all([job], name, report.n_boot, report.seed))
    return out


def compute_metrics(
    records: Iterable[Record], *, baseline: str = "none", n_boot: int = 2000, seed: int = 0
) -> MetricsReport:
    """Compute every metric, stratum, cost figure and paired comparison of a run.

    The records go into DuckDB and the same columnar engine as ``medmis report`` computes
    the figures (:mod:`._columnar`); for a run folder use :func:`compute_run_metrics`, which scans
    ``records.jsonl`` without making a Python object per record.

    Args:
        records: All records of a run (deduplicated, e.g. from ``read_records``).
        baseline: Defender every other defender of the same model is compared against; when a
            model has no records for it, its defenders get no paired comparisons.
        n_boot: Bootstrap replicates for paired CIs.
        seed: Seed of the paired bootstrap.

    Returns:
        The ``MetricsReport``; ``report.to_json_dict()`` is the ``metrics.json`` content.
    """
    from medmis.experiments.records import connect

    con = connect()
    try:
        records_into(con, records)
        return metrics_from_view(con, baseline=baseline, n_boot=n_boot, seed=seed)
    finally:
        con.close()
