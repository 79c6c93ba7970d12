"""Clustered inference: pairs from one question are not independent.

Checks the interval and test functions against closed forms and brute force, the size of the
item-level test by simulation on correlated null data, and the whole metrics pipeline on a
hand-built records file whose pairs are perfectly correlated within items.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from medmis.experiments import Record
from medmis.experiments.analysis import (
    cluster_sign_test,
    clustered_paired_diff,
    clustered_proportion,
    compute_metrics,
    mcnemar_exact,
    tango_interval,
    wilson,
)
from medmis.experiments.analysis._cluster import _tango_score

Z = 1.96


# --- Tango's score interval ------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 5, 23, 400])
def test_tango_has_width_without_discordant_pairs(n: int) -> None:
    lo, hi = tango_interval(0, 0, n)
    # closed form at b = c = 0: |delta| = z^2 / (n + z^2)
    assert hi == pytest.approx(Z * Z / (n + Z * Z), abs=1e-9)
    assert lo == pytest.approx(-hi, abs=1e-9)
    assert hi > 0


@pytest.mark.parametrize(("b", "c", "n"), [(3, 10, 77), (10, 2, 50), (1, 0, 1), (0, 7, 7), (5, 5, 40)])
def test_tango_bounds_solve_the_score_equation(b: int, c: int, n: int) -> None:
    lo, hi = tango_interval(b, c, n)
    est = (b - c) / n
    assert -1.0 <= lo <= est <= hi <= 1.0
    if lo > -1.0:
        assert _tango_score(lo, b, c, n) == pytest.approx(Z, abs=1e-6)
    if hi < 1.0:
        assert _tango_score(hi, b, c, n) == pytest.approx(-Z, abs=1e-6)


def test_tango_is_a_paired_interval_narrower_than_unpaired() -> None:
    # 40 of 100 positive under both conditions plus 10 vs 2 discordant: pairing helps
    lo, hi = tango_interval(10, 2, 100)
    p1, p2 = 0.5, 0.42
    se = math.sqrt(p1 * (1 - p1) / 100 + p2 * (1 - p2) / 100)
    assert hi - lo < 2 * Z * se


# --- clustered proportions -------------------------------------------------------------------


def test_one_unit_per_cluster_is_wilson() -> None:
    cp = clustered_proportion([1, 0, 1, 1, 0], ["a", "b", "c", "d", "e"])
    assert cp.deff == 1.0
    assert (cp.lo, cp.hi) == pytest.approx(wilson(3, 5))


def test_correlated_units_widen_the_interval() -> None:
    # 10 items x 6 targets, outcomes identical within an item: 4 items flipped
    outcomes = [int(i < 4) for i in range(10) for _ in range(6)]
    clusters = [i for i in range(10) for _ in range(6)]
    cp = clustered_proportion(outcomes, clusters)
    naive = wilson(24, 60)
    assert naive is not None
    assert cp.value == pytest.approx(0.4)
    assert cp.deff == pytest.approx(6 * 10 / 9, rel=1e-6)  # m * K/(K-1) for perfect correlation
    assert cp.lo < naive[0] and cp.hi > naive[1]
    # never narrower than treating each item as one unit
    assert cp.hi - cp.lo >= (wilson(4, 10)[1] - wilson(4, 10)[0]) * 0.95  # type: ignore[index]


def test_all_equal_outcomes_assume_full_correlation() -> None:
    cp = clustered_proportion([0] * 20, [i // 2 for i in range(20)])
    assert cp.value == 0.0 and cp.lo == 0.0
    assert cp.hi == pytest.approx(wilson(0, 10)[1])  # type: ignore[index]


# --- paired differences and the item-level test ----------------------------------------------


def test_no_discordant_pairs_never_gives_zero_width() -> None:
    x = [1] * 12 + [0] * 11
    pd = clustered_paired_diff(x, x, list(range(23)))
    assert pd.diff == 0.0 and pd.lo < 0.0 < pd.hi
    clustered = clustered_paired_diff(x * 3, x * 3, list(range(23)) * 3, n_boot=200)
    assert clustered.lo < 0.0 < clustered.hi
    assert clustered.method == "cluster_bootstrap+tango"


def test_one_unit_per_item_is_exact_mcnemar() -> None:
    rng = np.random.default_rng(3)
    x = rng.random(60) < 0.4
    y = rng.random(60) < 0.6
    p, method = cluster_sign_test(x, y, list(range(60)))
    b = int((x & ~y).sum())
    c = int((~x & y).sum())
    assert method == "sign_flip_exact"
    assert p == pytest.approx(mcnemar_exact(b, c))


def test_unequal_item_totals_enumerate_exactly() -> None:
    # items with differences -3, -1, -2, +1: of the 2^4 sign patterns, |sum| >= 5 in 6
    # (+3+2 with +1+1, +1-1 or -1+1, and their mirror images)
    x = [0, 0, 0, 0, 0, 0, 1]
    y = [1, 1, 1, 1, 1, 1, 0]
    clusters = ["a", "a", "a", "b", "c", "c", "d"]
    p, method = cluster_sign_test(x, y, clusters)
    assert method == "sign_flip_exact"
    assert p == pytest.approx(6 / 16)


def test_size_of_the_item_level_test_on_correlated_null_data() -> None:
    """Null: both conditions draw from the same item-level probability, with shared shocks
    that make pairs of one item move together. The clustered test must hold its level; the
    pair-level McNemar test, for comparison, does not."""
    rng = np.random.default_rng(2026)
    sims, items, targets = 1200, 50, 5
    clusters = np.repeat(np.arange(items), targets)
    rejected = naive_rejected = 0
    for s in range(sims):
        p_item = np.repeat(rng.beta(1, 1, size=items), targets)
        x = rng.random(items * targets) < p_item
        y = rng.random(items * targets) < p_item
        shock = np.repeat(rng.random(items) < 0.3, targets)
        x = np.where(shock, np.repeat(rng.random(items) < 0.5, targets), x)
        y = np.where(shock, np.repeat(rng.random(items) < 0.5, targets), y)
        p, _ = cluster_sign_test(x, y, clusters, n_perm=2000, seed=s)
        rejected += p < 0.05
        naive_rejected += mcnemar_exact(int((x & ~y).sum()), int((~x & y).sum())) < 0.05
    assert 0.03 <= rejected / sims <= 0.07
    assert naive_rejected / sims > 0.10


# --- the metrics pipeline on correlated pairs --------------------------------------------------


def _records() -> list[Record]:
    """12 items, 6 type1 targets each, every pair of an item answered alike.

    Both defenders are correct on every clean question. ``none`` is flipped on items 0-3,
    ``guard`` on items 3-4: item-level, guard is better on 3 items and worse on 1 (sign test
    p = 0.625), but counted per pair that is 18 vs 6 discordant pairs (McNemar p ~ 0.02).
    """
    targets = "BCDEFG"
    flipped = {"none": {0, 1, 2, 3}, "guard": {3, 4}}
    out: list[Record] = []
    for defender, bad in flipped.items():
        for i in range(12):
            base = {"model": "m", "defender": defender, "item_id": f"q{i}", "subset": "MEDMISQA",
                    "gold": "A"}
            out.append(Record(protocol="clean", choice="A", correct=True, **base))
            for t in targets:
                choice = t if i in bad else "A"
                out.append(Record(protocol="type1", target=t, choice=choice,
                                  correct=choice == "A", **base))
    return out


def test_clustered_metrics_are_wider_and_do_not_reject_an_item_level_null() -> None:
    report = compute_metrics(_records(), n_boot=1000, seed=0)
    none = report.results["m"]["none"]
    asr = none.metrics["type1_asr"]
    assert (asr.k, asr.n, asr.unit, asr.clusters) == (24, 72, "pair", 12)
    naive = wilson(24, 72)
    assert naive is not None
    assert asr.lo is not None and asr.hi is not None
    assert asr.lo < naive[0] and asr.hi > naive[1]
    item = none.metrics["type1_asr_item"]
    assert (item.k, item.n, item.unit) == (4, 12, "item")

    comp = report.results["m"]["guard"].paired["type1_asr"]
    assert (comp.b, comp.c, comp.n, comp.clusters, comp.unit) == (6, 18, 72, 12, "pair")
    assert comp.test == "sign_flip_exact" and comp.p_value == pytest.approx(0.625)
    assert mcnemar_exact(6, 18) < 0.05  # what the pair-level test would have claimed
    naive_half = Z * math.sqrt((24 / 72) / 72)  # rough unclustered half-width for 24 discordant
    assert comp.lo is not None and comp.hi is not None
    assert comp.hi - comp.lo > 2 * naive_half
    assert comp.lo < 0 < comp.hi
