"""The per-record reference implementation of ``compute_metrics`` (before the DuckDB engine).

Kept for tests only: the columnar engine must give the same ``metrics.json`` to the last bit.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from medmis.experiments.analysis._metrics import (
    DefenderMetrics,
    MetricsReport,
    PairedComparison,
    Strata,
    canonical_order,
    compare_paired,
    cost_of,
    item_tags,
)
from medmis.experiments.analysis._units import (
    FAILURE_KINDS,
    PAIRED_METRICS,
    PROTOCOL_METRICS,
    STRATUM_JOIN,
    _rates,
    indicator_maps,
    item_key,
    metric_block,
)
from medmis.experiments.benchmark import CONTENT_TYPES, PROTOCOLS, PROVENANCES, SUBSETS, Record

ItemTags = dict[str, dict[str, str]]


def _label_orders(tags: ItemTags) -> dict[str, list[str]]:
    values = tags.values()
    return {
        "subset": canonical_order((t["subset"] for t in values), SUBSETS),
        "content_type": canonical_order((t["content_type"] for t in values), CONTENT_TYPES),
        "provenance": canonical_order((t["provenance"] for t in values), PROVENANCES),
    }


def _group_by_tags(records: Sequence[Record], tags: ItemTags, *fields: str) -> dict[str, list[Record]]:
    groups: dict[str, list[Record]] = {}
    for r in records:
        label = STRATUM_JOIN.join(tags[item_key(r)][f] for f in fields)
        groups.setdefault(label, []).append(r)
    return groups


def _strata(records: Sequence[Record], tags: ItemTags) -> Strata:
    order = _label_orders(tags)
    strata: Strata = {}
    for field in ("subset", "content_type", "provenance"):
        groups = _group_by_tags(records, tags, field)
        strata[field] = {lab: metric_block(groups[lab], failures=field in FAILURE_KINDS)
                         for lab in order[field] if lab in groups}

    crossed = _group_by_tags(records, tags, "content_type", "provenance")
    strata["content_type_x_provenance"] = {
        lab: metric_block(crossed[lab], failures=False)
        for ct in order["content_type"]
        for pv in order["provenance"]
        if (lab := ct + STRATUM_JOIN + pv) in crossed
    }

    by_subset = _group_by_tags(records, tags, "subset")
    strata["subset_x_protocol"] = {}
    for subset in order["subset"]:
        if subset not in by_subset:
            continue
        whole = strata["subset"][subset]
        for protocol in PROTOCOLS:
            recs = [r for r in by_subset[subset] if r.protocol == protocol]
            if recs:
                # Paired metrics need the subset's clean records, so they come from the whole
                # subset block; unparsed and error rates are this protocol's own.
                block = {m: whole[m] for m in PROTOCOL_METRICS[protocol]}
                block.update(_rates(recs))
                strata["subset_x_protocol"][subset + STRATUM_JOIN + protocol] = block
    return strata



def reference_metrics(
    records: Iterable[Record], *, baseline: str = "none", n_boot: int = 2000, seed: int = 0
) -> MetricsReport:
    """Compute every metric, stratum, cost figure and paired comparison of a run.

    Args:
        records: All records of a run (deduplicated, e.g. from ``read_records``).
        baseline: Defender every other defender of the same model is compared against; when a
            model has no records for it, its defenders get no paired comparisons.
        n_boot: Bootstrap replicates for paired CIs.
        seed: Seed of the paired bootstrap.

    Returns:
        The ``MetricsReport``; ``report.to_json_dict()`` is the ``metrics.json`` content.
    """
    recs = list(records)
    tags = item_tags(recs)
    groups: dict[str, dict[str, list[Record]]] = {}
    for r in recs:
        groups.setdefault(r.model, {}).setdefault(r.defender, []).append(r)

    results: dict[str, dict[str, DefenderMetrics]] = {}
    for model, by_defender in groups.items():
        maps = {d: indicator_maps(rs) for d, rs in by_defender.items()}
        # Baseline first so that tables read "baseline, then what each defence changes".
        ordered = sorted(by_defender, key=lambda d: d != baseline)
        results[model] = {}
        for d in ordered:
            paired: dict[str, PairedComparison] = {}
            if d != baseline and baseline in maps:
                paired = {
                    m: compare_paired(maps[d][m], maps[baseline][m], baseline_name=baseline,
                                      n_boot=n_boot, seed=seed)
                    for m in PAIRED_METRICS
                }
            results[model][d] = DefenderMetrics(
                metrics=metric_block(by_defender[d]),
                strata=_strata(by_defender[d], tags),
                cost=cost_of(by_defender[d]),
                paired=paired,
            )
    return MetricsReport(baseline=baseline, n_boot=n_boot, seed=seed, results=results)
