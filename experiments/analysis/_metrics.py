"""Paired clean / Type 1 / Type 2 metrics of a run: strata, cost and comparisons with the baseline.

The metric definitions (units, clusters, indicator maps) live in :mod:`._units`; this module
applies them per (model, defender), per stratum, and between each defender and the baseline.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np
from pydantic import BaseModel, PrivateAttr

from medmis.experiments.benchmark import Record

from ._cluster import cluster_sign_test, clustered_paired_diff
from ._stats import p50, p95
from ._units import (
    UNSPECIFIED,
    Indicators,
    ItemKey,
    MetricBlock,
    Proportion,
    Unit,
    item_key,
)


class PairedComparison(BaseModel):
    """A defender against the baseline on the units both have for one metric.

    ``diff = defender_value - baseline_value = (b - c) / n`` where ``b`` counts units whose
    outcome is True for the defender only and ``c`` those True for the baseline only. For an
    ASR, a negative ``diff`` means the defender resisted more attacks.

    With one unit per item, ``lo``/``hi`` are Tango's score 95% interval and ``p_value`` the
    exact McNemar test. With several units per item (``unit == "pair"``) the interval is a
    seeded item-resampling bootstrap widened where needed to the design-adjusted Tango
    interval, and the test an item-level sign-flip permutation test. ``interval`` and
    ``test`` name the methods used.
    """

    baseline: str
    n: int
    defender_value: float | None
    baseline_value: float | None
    diff: float | None
    lo: float | None
    hi: float | None
    b: int
    c: int
    p_value: float
    unit: Unit = "item"
    clusters: int = 0
    interval: str = "tango_score"
    test: str = "mcnemar_exact"


class Cost(BaseModel):
    """Spend over all records of a (model, defender), errored ones included (they cost too)."""

    cases: int
    input_tokens: int
    output_tokens: int
    input_tokens_per_case: float | None
    output_tokens_per_case: float | None
    tokens_per_case: float | None
    llm_calls: int
    llm_calls_per_case: float | None
    tool_calls: int
    tool_calls_per_case: float | None
    latency_p50_s: float | None
    latency_p95_s: float | None
    escalated: Proportion | None = None
    """Share of cases with a truthy ``extra["escalated"]``, over cases that report it."""
    epochs: int = 1
    """Epochs the cases were answered in (``--epochs``): ``cases`` counts every epoch's."""


Strata = dict[str, dict[str, MetricBlock]]


class DefenderMetrics(BaseModel):
    """Everything computed for one (model, defender)."""

    metrics: MetricBlock
    strata: Strata
    cost: Cost
    paired: dict[str, PairedComparison]

    def to_json_dict(self) -> dict[str, Any]:
        """The ``metrics.json`` object for this defender: metric blocks at the top level."""
        out: dict[str, Any] = {m: p.model_dump() for m, p in self.metrics.items()}
        out["strata"] = {
            kind: {label: {m: p.model_dump() for m, p in block.items()}
                   for label, block in blocks.items()}
            for kind, blocks in self.strata.items()
        }
        out["cost"] = self.cost.model_dump()
        out["paired"] = {m: c.model_dump() for m, c in self.paired.items()}
        return out


class UnitOutcomes(NamedTuple):
    """One (model, defender)'s outcomes of one metric per paired unit, for comparisons between
    any two defenders: unit ids (sorted, shared across the run), their items' ids, outcomes."""

    units: np.ndarray
    items: np.ndarray
    outcomes: np.ndarray


PAIRWISE_METRICS: tuple[str, ...] = ("type1_asr", "type1_tasr")
"""Metrics whose per-unit outcomes a report keeps for defender-vs-defender comparisons."""


class MetricsReport(BaseModel):
    """All metrics of a run: ``results[model][defender]``, in first-seen order.

    Besides the figures, a report computed from records keeps what the verdict needs and
    ``metrics.json`` does not hold: per-unit outcomes of :data:`PAIRWISE_METRICS` (for
    :func:`compare_defenders`) and each defender's identical-answer shares to the run's
    controls (``identical_answers[(model, defender)][control]``).
    """

    baseline: str
    n_boot: int
    seed: int
    results: dict[str, dict[str, DefenderMetrics]]
    _units: dict[tuple[str, str, str], UnitOutcomes] = PrivateAttr(default_factory=dict)
    _identical: dict[tuple[str, str], dict[str, Proportion]] = PrivateAttr(default_factory=dict)
    _cells: set[tuple[str, str]] = PrivateAttr(default_factory=set)

    @classmethod
    def with_outcomes(
        cls,
        *,
        baseline: str,
        n_boot: int,
        seed: int,
        results: dict[str, dict[str, DefenderMetrics]],
        units: dict[tuple[str, str, str], UnitOutcomes],
        identical: dict[tuple[str, str], dict[str, Proportion]],
    ) -> MetricsReport:
        """A report that keeps the per-unit outcomes and identical-answer shares it was
        computed from (every ``(model, defender)`` of ``results`` is a cell with outcomes)."""
        report = cls(baseline=baseline, n_boot=n_boot, seed=seed, results=results)
        report._units = units
        report._identical = identical
        report._cells = {(m, d) for m, ds in results.items() for d in ds}
        return report

    def unit_outcomes(self, model: str, defender: str, metric: str) -> UnitOutcomes | None:
        """Per-unit outcomes of ``metric`` for one cell (None when the cell has none for it).

        Raises:
            ValueError: When the report keeps no per-unit outcomes for ``(model, defender)``
                (it was read from ``metrics.json`` rather than computed from records).
        """
        if (model, defender) not in self._cells:
            raise ValueError(f"no per-unit outcomes for {model} x {defender}")
        return self._units.get((model, defender, metric))

    @property
    def identical_answers(self) -> dict[tuple[str, str], dict[str, Proportion]]:
        """Share of cases with context answered exactly like each control (clustered on items)."""
        return self._identical

    def to_json_dict(self) -> dict[str, Any]:
        """The ``metrics.json`` layout: ``{model: {defender: {...}}}``."""
        return {
            model: {d: dm.to_json_dict() for d, dm in defenders.items()}
            for model, defenders in self.results.items()
        }


# ---------------------------------------------------------------------------------------------
# Strata


ItemTags = dict[ItemKey, dict[str, str]]


def item_tags(records: Iterable[Record]) -> ItemTags:
    """Subset, content type and provenance per item, taking the first non-empty value seen.

    Strata are item attributes, so a type1 record and the clean record it is paired with
    always fall in the same stratum even if one of them lacks a tag.
    """
    tags: ItemTags = {}
    for r in records:
        t = tags.setdefault(item_key(r), {})
        for field in ("subset", "content_type", "provenance"):
            value = getattr(r, field)
            if value and field not in t:
                t[field] = value
    for t in tags.values():
        for field in ("subset", "content_type", "provenance"):
            t.setdefault(field, UNSPECIFIED)
    return tags


def canonical_order(values: Iterable[str], canon: Sequence[str]) -> list[str]:
    """``values`` with the known labels first in ``canon``'s (the paper's) order, then anything
    else alphabetically."""
    present = set(values)
    return [v for v in canon if v in present] + sorted(present - set(canon))


# ---------------------------------------------------------------------------------------------
# Cost and paired comparisons


def _per_case(total: float, cases: int) -> float | None:
    return total / cases if cases else None


def cost_of(records: Sequence[Record]) -> Cost:
    """Token, call and latency figures for the records of one (model, defender)."""
    n = len(records)
    tin = sum(r.usage.input_tokens for r in records)
    tout = sum(r.usage.output_tokens for r in records)
    llm = sum(r.llm_calls for r in records)
    tools = sum(r.tool_calls for r in records)
    latencies = [r.latency_s for r in records]
    flagged = [bool(r.extra["escalated"]) for r in records if "escalated" in r.extra]
    return Cost(
        cases=n,
        input_tokens=tin,
        output_tokens=tout,
        input_tokens_per_case=_per_case(tin, n),
        output_tokens_per_case=_per_case(tout, n),
        tokens_per_case=_per_case(tin + tout, n),
        llm_calls=llm,
        llm_calls_per_case=_per_case(llm, n),
        tool_calls=tools,
        tool_calls_per_case=_per_case(tools, n),
        latency_p50_s=p50(latencies),
        latency_p95_s=p95(latencies),
        escalated=Proportion.of(sum(flagged), len(flagged)) if flagged else None,
        epochs=max((r.epoch for r in records), default=0) + 1,
    )


def compare_paired(
    defender: Indicators, baseline: Indicators, *, baseline_name: str, n_boot: int, seed: int
) -> PairedComparison:
    """Compare two indicator maps on their shared units (see ``PairedComparison``)."""
    units = sorted(defender.keys() & baseline.keys(), key=repr)
    x = [defender[u] for u in units]
    y = [baseline[u] for u in units]
    return compare_arrays(x, y, [u[0] for u in units], baseline_name=baseline_name,
                          n_boot=n_boot, seed=seed)


def compare_arrays(x: Sequence[bool | int] | np.ndarray, y: Sequence[bool | int] | np.ndarray,
                   items: Sequence[ItemKey], *, baseline_name: str, n_boot: int,
                   seed: int) -> PairedComparison:
    """Compare paired outcomes ``x`` (defender) and ``y`` (baseline) of units in ``items``.

    The units come in the order ``compare_paired`` sorts them (by ``repr`` of the unit):
    the bootstrap and the permutation test number clusters in that order.
    """
    n = len(x)
    if not n:
        return PairedComparison(baseline=baseline_name, n=0, defender_value=None,
                                baseline_value=None, diff=None, lo=None, hi=None, b=0, c=0,
                                p_value=1.0)
    xs, ys = np.asarray(x, dtype=np.int64), np.asarray(y, dtype=np.int64)
    pd = clustered_paired_diff(xs, ys, items, n_boot=n_boot, seed=seed)  # type: ignore[arg-type]
    p_value, test = cluster_sign_test(xs, ys, items, seed=seed)  # type: ignore[arg-type]
    unit: Unit = "item" if pd.clusters == n else "pair"
    return PairedComparison(
        baseline=baseline_name, n=n, defender_value=int(np.sum(x)) / n,
        baseline_value=int(np.sum(y)) / n, diff=pd.diff, lo=pd.lo, hi=pd.hi, b=pd.b, c=pd.c,
        p_value=p_value, unit=unit, clusters=pd.clusters, interval=pd.method,
        test="mcnemar_exact" if unit == "item" else test,
    )
