"""Statistics helpers against published and hand-computed values."""

from __future__ import annotations

import math

import pytest

from medmis.experiments.analysis import (
    _stats,
    mcnemar_exact,
    p50,
    p95,
    paired_bootstrap_diff,
    percentile,
    wilson,
)

# Newcombe (1998), "Two-sided confidence intervals for the single proportion", Table II,
# method 3 (score interval without continuity correction), plus the textbook 8/10, 0/10, 10/10.
PUBLISHED_WILSON = [
    (81, 263, 0.2553, 0.3662),
    (15, 148, 0.0624, 0.1605),
    (0, 20, 0.0000, 0.1611),
    (1, 29, 0.0061, 0.1718),
    (8, 10, 0.4902, 0.9433),
    (0, 10, 0.0000, 0.2775),
    (10, 10, 0.7225, 1.0000),
]


@pytest.mark.parametrize(("k", "n", "lo", "hi"), PUBLISHED_WILSON)
def test_wilson_matches_published_values(k: int, n: int, lo: float, hi: float) -> None:
    got = wilson(k, n)
    assert got is not None
    assert got[0] == pytest.approx(lo, abs=5e-5)
    assert got[1] == pytest.approx(hi, abs=5e-5)


def test_wilson_edges_are_exact_and_symmetric() -> None:
    assert wilson(0, 7) is not None and wilson(0, 7)[0] == 0.0  # type: ignore[index]
    assert wilson(7, 7) is not None and wilson(7, 7)[1] == 1.0  # type: ignore[index]
    lo, hi = wilson(3, 11) or (math.nan, math.nan)
    lo2, hi2 = wilson(8, 11) or (math.nan, math.nan)
    assert lo == pytest.approx(1 - hi2) and hi == pytest.approx(1 - lo2)


def test_wilson_undefined_and_invalid() -> None:
    assert wilson(0, 0) is None
    with pytest.raises(ValueError):
        wilson(3, 2)
    with pytest.raises(ValueError):
        wilson(-1, 2)


def _hand_mcnemar(b: int, c: int) -> float:
    n = b + c
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2**n)


@pytest.mark.parametrize(
    ("b", "c", "expected"),
    [
        (1, 9, 2 * (1 + 10) / 1024),  # 0.021484375
        (9, 1, 2 * (1 + 10) / 1024),
        (2, 8, 2 * (1 + 10 + 45) / 1024),  # 0.109375
        (0, 5, 2 / 32),
        (5, 5, 1.0),
        (0, 1, 1.0),
        (0, 0, 1.0),
        (3, 12, _hand_mcnemar(3, 12)),
    ],
)
def test_mcnemar_exact_hand_computed(b: int, c: int, expected: float) -> None:
    assert mcnemar_exact(b, c) == pytest.approx(expected, rel=1e-12)


def test_mcnemar_log_space_path_agrees_with_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    exact = [mcnemar_exact(b, c) for b, c in [(40, 60), (1, 9), (120, 80)]]
    monkeypatch.setattr(_stats, "_EXACT_TAIL_MAX_N", 0)
    logspace = [mcnemar_exact(b, c) for b, c in [(40, 60), (1, 9), (120, 80)]]
    assert logspace == pytest.approx(exact, rel=1e-9)


def test_mcnemar_rejects_negative() -> None:
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 3)


def _pairs(b: int, c: int, both: int, neither: int) -> tuple[list[int], list[int]]:
    x = [1] * b + [0] * c + [1] * both + [0] * neither
    y = [0] * b + [1] * c + [1] * both + [0] * neither
    return x, y


def test_bootstrap_is_deterministic_and_contains_estimate() -> None:
    x, y = _pairs(b=7, c=3, both=12, neither=18)
    first = paired_bootstrap_diff(x, y, n_boot=2000, seed=11)
    assert first == paired_bootstrap_diff(x, y, n_boot=2000, seed=11)
    diff, lo, hi = first
    assert diff == pytest.approx((7 - 3) / 40)
    assert lo <= diff <= hi


def test_bootstrap_ignores_pair_order() -> None:
    x, y = _pairs(b=5, c=2, both=4, neither=9)
    shuffled = list(zip(x, y, strict=True))[::-1]
    xs, ys = [a for a, _ in shuffled], [b for _, b in shuffled]
    assert paired_bootstrap_diff(x, y, seed=3) == paired_bootstrap_diff(xs, ys, seed=3)


def test_bootstrap_width_matches_normal_theory() -> None:
    # diff = 0.1, var(d) = (b + c)/n - diff^2 = 0.29, so 1.96 * sqrt(0.29 / 200) ~ 0.0746.
    x, y = _pairs(b=40, c=20, both=50, neither=90)
    diff, lo, hi = paired_bootstrap_diff(x, y, n_boot=4000, seed=0)
    assert diff == pytest.approx(0.1)
    assert lo == pytest.approx(0.1 - 0.0746, abs=0.01)
    assert hi == pytest.approx(0.1 + 0.0746, abs=0.01)


def test_bootstrap_degenerate_samples() -> None:
    assert paired_bootstrap_diff([1, 0, 1], [1, 0, 1]) == (0.0, 0.0, 0.0)
    assert paired_bootstrap_diff([True, True], [False, False]) == (1.0, 1.0, 1.0)


@pytest.mark.parametrize(
    ("x", "y"), [([], []), ([1, 0], [1]), ([2, 0], [1, 0]), ([[1], [0]], [[1], [0]])]
)
def test_bootstrap_rejects_bad_input(x: list, y: list) -> None:
    with pytest.raises(ValueError):
        paired_bootstrap_diff(x, y)


def test_percentiles() -> None:
    values = [float(v) for v in range(1, 21)]
    assert p50(values) == pytest.approx(10.5)
    assert p95(values) == pytest.approx(1 + 0.95 * 19)
    assert percentile([4.0], 95) == 4.0
    assert p50([]) is None and p95([]) is None


def test_holm_equals_statsmodels_multipletests(monkeypatch: pytest.MonkeyPatch) -> None:
    # the reference: statsmodels' Holm adjustment, on random families with ties, zeros and ones
    import gc

    import numpy as np
    from statsmodels.stats.multitest import multipletests

    from medmis.experiments.analysis._stats import holm

    rng = np.random.default_rng(7)
    families = [[0.01], [0.04, 0.04, 0.2], [0.0, 1.0, 0.5, 0.5], [0.3, 0.001, 0.02, 0.02, 0.9]]
    families += [list(rng.uniform(0, 0.2, size=n)) for n in (2, 3, 7, 12) for _ in range(5)]
    # multipletests collects garbage on every call (0.5 s each in a worker holding the suite):
    # nothing it computes depends on that
    monkeypatch.setattr(gc, "collect", lambda *args: 0)
    for family in families:
        want = multipletests(family, alpha=0.05, method="holm")[1]
        assert holm(family) == pytest.approx(list(want), abs=1e-12), family
    assert holm([]) == []
