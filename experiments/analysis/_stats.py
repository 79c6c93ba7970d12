"""Small, dependency-free statistics for paired evaluation: Wilson intervals, exact McNemar,
a seeded paired bootstrap and latency percentiles.

Undefined quantities (a proportion over zero cases, a percentile of nothing) are returned as
``None`` rather than ``nan`` so that they serialise to JSON ``null`` and never produce the
non-standard ``NaN`` token in ``metrics.json``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

# Below this many discordant pairs the binomial tail is summed in exact integer arithmetic;
# above it the terms are summed in log space, which is fast and accurate to ~1e-12 relative.
_EXACT_TAIL_MAX_N = 5000


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float] | None:
    """Wilson score interval for a binomial proportion ``k / n``.

    Args:
        k: Number of successes, ``0 <= k <= n``.
        n: Number of trials.
        z: Standard-normal quantile; the default gives a two-sided 95% interval.

    Returns:
        ``(lo, hi)`` clipped to ``[0, 1]``, or ``None`` when ``n == 0`` (the proportion is
        undefined; callers write JSON ``null``).

    Raises:
        ValueError: If ``k`` or ``n`` are out of range.
    """
    if n < 0 or k < 0 or k > n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return None
    p = k / n
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = (z / denom) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    # At k == 0 or k == n the exact bound is 0 or 1; rounding would otherwise leave ±1e-17.
    lo = 0.0 if k == 0 else max(0.0, centre - half)
    hi = 1.0 if k == n else min(1.0, centre + half)
    return lo, hi


def _binom_half_cdf(m: int, n: int) -> float:
    """``P(X <= m)`` for ``X ~ Binomial(n, 1/2)``."""
    if m < 0:
        return 0.0
    if m >= n:
        return 1.0
    if n <= _EXACT_TAIL_MAX_N:
        # Integer sum then one division: Python's int / int is correctly rounded.
        term = 1
        total = 1
        for i in range(m):
            term = term * (n - i) // (i + 1)
            total += term
        return total / (1 << n)
    log_half_n = n * math.log(0.5)
    logs = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + log_half_n
            for i in range(m + 1)]
    top = max(logs)
    return math.exp(top) * math.fsum(math.exp(v - top) for v in logs)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar test on the discordant cells of a paired 2x2 table.

    Under the null each discordant pair is equally likely to fall in either cell, so the
    p-value is twice the smaller binomial tail of ``Binomial(b + c, 1/2)``, capped at 1.

    Args:
        b: Pairs where the first condition is positive and the second negative.
        c: Pairs where the first condition is negative and the second positive.

    Returns:
        The two-sided p-value; ``1.0`` when there are no discordant pairs.

    Raises:
        ValueError: If a count is negative.
    """
    if b < 0 or c < 0:
        raise ValueError(f"counts must be non-negative, got b={b}, c={c}")
    n = b + c
    if n == 0:
        return 1.0
    return min(1.0, 2.0 * _binom_half_cdf(min(b, c), n))


def _as_binary(values: Sequence[int | bool], name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.int64)
    if arr.ndim != 1 or not np.isin(arr, (0, 1)).all():
        raise ValueError(f"{name} must be a flat sequence of 0/1 values")
    return arr


def paired_bootstrap_diff(
    x: Sequence[int | bool],
    y: Sequence[int | bool],
    *,
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float, float]:
    """Difference of two paired proportions, ``mean(x) - mean(y)``, with a bootstrap CI.

    Pairs ``(x[i], y[i])`` are resampled together. Because each pair's contribution to the
    difference is ``x[i] - y[i]`` in {-1, 0, 1}, resampling ``n`` pairs with replacement is
    exactly a multinomial draw over those three values; drawing the counts directly gives the
    same distribution as resampling indices at O(n_boot) cost instead of O(n_boot * n).

    Args:
        x: 0/1 indicators for the first condition (e.g. the defender).
        y: 0/1 indicators for the second condition (e.g. the baseline), same length.
        n_boot: Number of bootstrap replicates.
        seed: Seed for ``numpy.random.default_rng``; equal inputs and seed give equal output.
        level: Central coverage of the percentile interval.

    Returns:
        ``(diff, lo, hi)``: the observed difference and the percentile interval bounds.

    Raises:
        ValueError: If the inputs are empty, of unequal length, or not 0/1.
    """
    xa = _as_binary(x, "x")
    ya = _as_binary(y, "y")
    if len(xa) != len(ya):
        raise ValueError(f"x and y must be paired: lengths {len(xa)} and {len(ya)}")
    n = len(xa)
    if n == 0:
        raise ValueError("cannot bootstrap an empty sample")
    if n_boot < 1:
        raise ValueError("n_boot must be positive")
    d = xa - ya
    counts = np.array([(d == -1).sum(), (d == 0).sum(), (d == 1).sum()], dtype=np.float64)
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(n, counts / n, size=n_boot)
    diffs = (draws[:, 2] - draws[:, 0]) / n
    tail = (1.0 - level) / 2.0 * 100.0
    lo, hi = np.percentile(diffs, [tail, 100.0 - tail])
    return float(d.mean()), float(lo), float(hi)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given.

    With the ``m`` p-values sorted ascending, the ``i``-th (from 0) becomes
    ``min(1, max over j <= i of (m - j) * p_(j))``; a hypothesis is rejected at family-wise
    level alpha when its adjusted p is below alpha. The same numbers as statsmodels'
    ``multipletests(..., method="holm")`` (the test checks it), without its full garbage
    collection on every call, which took 50-200 ms per report in a process holding LangChain.
    """
    p = np.asarray(p_values, dtype=float)
    if p.size == 0:
        return []
    order = np.argsort(p, kind="stable")
    stepped = np.maximum.accumulate((p.size - np.arange(p.size)) * p[order])
    adjusted = np.empty_like(p)
    adjusted[order] = np.minimum(stepped, 1.0)
    return [float(v) for v in adjusted]


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated ``q``-th percentile (0-100), or ``None`` for no values."""
    if len(values) == 0:
        return None
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def p50(values: Sequence[float]) -> float | None:
    """Median, or ``None`` for no values."""
    return percentile(values, 50.0)


def p95(values: Sequence[float]) -> float | None:
    """95th percentile, or ``None`` for no values."""
    return percentile(values, 95.0)
