"""Inference for outcomes clustered in items, and paired differences that never collapse.

With ``--type1-targets all`` one question contributes several (item, target) pairs, and pairs
from one question are strongly correlated: treating them as independent makes intervals too
narrow and paired tests too eager. Everything here takes per-unit 0/1 outcomes plus a cluster
id per unit (the item) and reduces to the ordinary unclustered method when every cluster has
one unit.

- :func:`clustered_proportion`: ratio estimate with a Wilson interval on the effective sample
  size ``n / deff`` (design effect from the between-cluster variance).
- :func:`tango_interval`: Tango's (1998) score interval for a paired difference of
  proportions; unlike a percentile bootstrap or Newcombe's method 10 it keeps a positive width
  when there are no discordant pairs.
- :func:`clustered_paired_diff`: the difference with a seeded cluster (item-resampling)
  bootstrap interval, widened where needed to the design-effect-adjusted Tango interval so
  it cannot return zero width at ``n > 0``.
- :func:`cluster_sign_test`: the item-level exact permutation (sign-flip) test of a paired
  difference; with one unit per item it is exactly the exact McNemar test.

References: Rao & Scott (1992) design-effect adjustment; Tango (1998) Stat Med 17:891;
Durkalski et al. (2003) Stat Med 22:2417 (clustered McNemar).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from ._stats import mcnemar_exact

Z95 = 1.96  # as in the Wilson intervals of _stats, so the two agree when deff == 1
_EXACT_SIGN_FLIP_MAX = 16  # enumerate all 2^m sign patterns up to this many non-zero items
_CHUNK = 256  # bootstrap replicates per weight matrix, to bound memory on 10^4 items


def cluster_index(clusters: Sequence[Hashable]) -> tuple[np.ndarray, int]:
    """Dense integer ids ``0..K-1`` for the cluster labels, and ``K``."""
    lookup: dict[Hashable, int] = {}
    ids = np.fromiter((lookup.setdefault(c, len(lookup)) for c in clusters), dtype=np.int64,
                      count=len(clusters))
    return ids, len(lookup)


def wilson_float(k: float, n: float, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a (possibly fractional, design-adjusted) count ``k`` of ``n``."""
    p = k / n
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = (z / denom) * math.sqrt(max(p * (1 - p), 0.0) / n + z2 / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class ClusteredProportion:
    value: float
    k: int
    n: int
    clusters: int
    deff: float
    lo: float
    hi: float


def _design_effect(totals: np.ndarray, sizes: np.ndarray, mean: float, naive_var: float) -> float:
    """Between-cluster variance of a ratio estimate over the naive one (at least 1).

    When the naive variance is zero (every outcome equal) the data say nothing about the
    correlation; the conservative choice is full correlation, i.e. one effective unit per
    cluster (``deff`` = mean cluster size).
    """
    n = float(sizes.sum())
    k = len(sizes)
    if k < 2 or naive_var <= 0.0:
        return max(1.0, n / max(k, 1))
    # summed in sorted order: the float result must not depend on the order the clusters come
    # in (the records' order in the file), so that merged shards give a single run's figures
    resid = np.sort(totals - mean * sizes)
    var = k / (k - 1) * float(np.dot(resid, resid)) / (n * n)
    return max(1.0, var / naive_var)


def clustered_proportion(
    outcomes: Sequence[bool | int], clusters: Sequence[Hashable], z: float = Z95
) -> ClusteredProportion:
    """Share of true outcomes with a cluster-aware Wilson interval.

    Args:
        outcomes: One 0/1 outcome per unit.
        clusters: The cluster (item) of each unit, same length.
        z: Normal quantile of the interval.

    Returns:
        The estimate, counts, number of clusters, design effect and interval.

    Raises:
        ValueError: On empty or unequal inputs.
    """
    y = np.asarray(outcomes, dtype=np.float64)
    if len(y) == 0 or len(y) != len(clusters):
        raise ValueError("need one cluster id per outcome and at least one outcome")
    ids, n_clusters = cluster_index(clusters)
    totals = np.bincount(ids, weights=y, minlength=n_clusters)
    sizes = np.bincount(ids, minlength=n_clusters).astype(np.float64)
    return clustered_from_totals(totals, sizes, z)


def clustered_from_totals(totals: np.ndarray, sizes: np.ndarray, z: float = Z95) -> ClusteredProportion:
    """:func:`clustered_proportion` from per-cluster aggregates.

    Args:
        totals: True outcomes per cluster, in the clusters' first-appearance order.
        sizes: Units per cluster, same order.
        z: Normal quantile of the interval.
    """
    totals = np.asarray(totals, dtype=np.float64)
    sizes = np.asarray(sizes, dtype=np.float64)
    n_clusters = len(sizes)
    n = int(sizes.sum())
    if n == 0:
        raise ValueError("need at least one outcome")
    k = int(totals.sum())
    p = k / n  # the same float as the mean of n 0/1 outcomes (their sum is exact)
    deff = 1.0 if n_clusters == n else _design_effect(totals, sizes, p, p * (1 - p) / n)
    lo, hi = wilson_float(p * n / deff, n / deff, z)
    # the exact bounds at the edges, as for the ordinary Wilson interval
    lo = 0.0 if p == 0.0 else lo
    hi = 1.0 if p == 1.0 else hi
    return ClusteredProportion(p, k, n, n_clusters, deff, lo, hi)


def _tango_score(delta: float, b: float, c: float, n: float) -> float:
    w = -b - c + (2 * n - b + c) * delta
    q01 = (math.sqrt(max(w * w + 8 * n * c * delta * (1 - delta), 0.0)) - w) / (4 * n)
    var = n * (2 * q01 + delta * (1 - delta))
    if var <= 0.0:
        return math.copysign(math.inf, b - c - n * delta) if b - c - n * delta else 0.0
    return (b - c - n * delta) / math.sqrt(var)


def tango_interval(b: float, c: float, n: float, z: float = Z95) -> tuple[float, float]:
    """Tango's score interval for ``(b - c) / n``, a paired difference of proportions.

    ``b`` counts pairs positive under the first condition only, ``c`` under the second only,
    ``n`` all pairs (counts may be fractional after a design-effect adjustment). The bounds
    are the roots of ``|Z(delta)| = z``, found by bisection on the monotone score.
    """
    if n <= 0:
        raise ValueError("need n > 0")
    est = (b - c) / n

    def root(lo: float, hi: float, target: float) -> float:
        # Z is decreasing in delta: find delta with Z(delta) = target inside [lo, hi]
        for _ in range(200):
            mid = (lo + hi) / 2
            if _tango_score(mid, b, c, n) > target:
                lo = mid
            else:
                hi = mid
            if hi - lo < 1e-12:
                break
        return (lo + hi) / 2

    lower = -1.0 if _tango_score(-1.0 + 1e-12, b, c, n) <= z else root(-1.0 + 1e-12, est, z)
    upper = 1.0 if _tango_score(1.0 - 1e-12, b, c, n) >= -z else root(est, 1.0 - 1e-12, -z)
    return max(-1.0, lower), min(1.0, upper)


@dataclass(frozen=True)
class PairedDiff:
    diff: float
    lo: float
    hi: float
    n: int
    clusters: int
    b: int
    c: int
    deff: float
    method: str


def clustered_paired_diff(
    x: Sequence[bool | int],
    y: Sequence[bool | int],
    clusters: Sequence[Hashable],
    *,
    n_boot: int = 2000,
    seed: int = 0,
    z: float = Z95,
) -> PairedDiff:
    """``mean(x) - mean(y)`` over paired units, with an interval that respects clustering.

    One unit per cluster: Tango's score interval. Several: a seeded percentile bootstrap
    that resamples clusters, widened where needed to Tango's interval on design-adjusted
    counts (so ``lo < hi`` whenever ``n > 0``).
    """
    xa = np.asarray(x, dtype=np.int64)
    ya = np.asarray(y, dtype=np.int64)
    if len(xa) == 0 or not (len(xa) == len(ya) == len(clusters)):
        raise ValueError("need equal, non-empty x, y and clusters")
    d = (xa - ya).astype(np.float64)
    n = len(d)
    b = int((d > 0).sum())
    c = int((d < 0).sum())
    diff = float(d.mean())
    ids, n_clusters = cluster_index(clusters)
    if n_clusters == n:
        lo, hi = tango_interval(b, c, n, z)
        return PairedDiff(diff, lo, hi, n, n_clusters, b, c, 1.0, "tango_score")
    totals = np.bincount(ids, weights=d, minlength=n_clusters)
    sizes = np.bincount(ids, minlength=n_clusters).astype(np.float64)
    naive_var = float(d.var()) / n
    deff = _design_effect(totals, sizes, diff, naive_var)
    t_lo, t_hi = tango_interval(b / deff, c / deff, n / deff, z)
    b_lo, b_hi = cluster_bootstrap_interval(totals, sizes, n_boot=n_boot, seed=seed, z=z)
    return PairedDiff(diff, min(b_lo, t_lo), max(b_hi, t_hi), n, n_clusters, b, c, deff,
                      "cluster_bootstrap+tango")


def cluster_bootstrap_interval(totals: np.ndarray, sizes: np.ndarray, *, n_boot: int = 2000, seed: int = 0,
                               z: float = Z95) -> tuple[float, float]:
    """Seeded percentile interval of a per-unit mean whose units come in clusters: ``totals`` and
    ``sizes`` are each cluster's sum and unit count; a replicate resamples clusters with
    replacement (multinomial weights) and takes ``sum(w * totals) / sum(w * sizes)``. The values
    may be any real numbers (a paired 0/1 difference, a score difference)."""
    n_clusters = len(totals)
    rng = np.random.default_rng(seed)
    reps: list[np.ndarray] = []
    uniform = np.full(n_clusters, 1.0 / n_clusters)
    for start in range(0, n_boot, _CHUNK):
        w = rng.multinomial(n_clusters, uniform, size=min(_CHUNK, n_boot - start)).astype(np.float64)
        reps.append((w @ totals) / (w @ sizes))
    boot = np.concatenate(reps)
    tail = (1.0 - _level(z)) / 2 * 100
    lo, hi = (float(v) for v in np.percentile(boot, [tail, 100 - tail]))
    return lo, hi


def _level(z: float) -> float:
    return math.erf(z / math.sqrt(2))


def cluster_sign_test(
    x: Sequence[bool | int],
    y: Sequence[bool | int],
    clusters: Sequence[Hashable],
    *,
    n_perm: int = 20000,
    seed: int = 0,
) -> tuple[float, str]:
    """Two-sided item-level permutation test of ``mean(x) == mean(y)`` for clustered pairs.

    Under the null, swapping the two conditions within an item is as likely as not, so each
    item's total difference ``D_k`` is symmetric about zero. The statistic is ``|sum D_k|``;
    the sign patterns of the non-zero ``D_k`` are enumerated up to 16 such items, and beyond
    that the exact null distribution is built by convolution (:func:`_sign_flip_exact`); only
    when its support is too large are 20,000 patterns sampled (seeded; the smallest p is then
    1/20,001). With one unit per item this is the exact McNemar test.

    Returns:
        ``(p_value, method)`` with method ``"sign_flip_exact"`` or ``"sign_flip_mc"``.
    """
    xa = np.asarray(x, dtype=np.int64)
    ya = np.asarray(y, dtype=np.int64)
    if not (len(xa) == len(ya) == len(clusters)):
        raise ValueError("need equal-length x, y and clusters")
    if len(xa) == 0:
        return 1.0, "sign_flip_exact"
    ids, n_clusters = cluster_index(clusters)
    totals = np.bincount(ids, weights=(xa - ya).astype(np.float64), minlength=n_clusters)
    nz = totals[totals != 0]
    observed = abs(float(nz.sum()))
    m = len(nz)
    if m == 0:
        return 1.0, "sign_flip_exact"
    tol = 1e-9
    if np.all(np.abs(nz) == abs(nz[0])):
        # equal magnitudes (always so with one unit per item): the sign count is binomial
        return mcnemar_exact(int((nz > 0).sum()), int((nz < 0).sum())), "sign_flip_exact"
    if m <= _EXACT_SIGN_FLIP_MAX:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=m)))
        stats = np.abs(signs @ nz)
        return float((stats >= observed - tol).mean()), "sign_flip_exact"
    exact = _sign_flip_exact(nz, observed - tol)
    if exact is not None:
        return exact, "sign_flip_exact"
    hits = _sign_flip_hits(nz, observed - tol, n_perm, seed)
    # the observed pattern counts as one permutation, so p is never 0
    return (hits + 1) / (n_perm + 1), "sign_flip_mc"


_EXACT_SUPPORT_MAX = 4_000_000  # sum of |D_k| up to which the exact distribution is built


def _sign_flip_exact(nz: np.ndarray, threshold: float) -> float | None:
    """``P(|sum s_k D_k| >= threshold)`` over all ``2^m`` sign patterns, computed exactly.

    The item totals ``D_k`` are integers. Items of equal magnitude ``a`` contribute
    ``a * (2 * Binomial(c, 1/2) - c)``, so the null distribution of the sum is the convolution
    of one scaled binomial per distinct magnitude (a handful: an item has at most as many units
    as targets). Direct convolution while it is small, FFT beyond (absolute error ~1e-15, far
    below any p-value shown). None when the totals are not integers or the support is too
    large to hold (the Monte-Carlo test is used then).
    """
    mags = np.abs(nz)
    if not np.all(mags == np.round(mags)):
        return None
    mags = mags.astype(np.int64)
    total = int(mags.sum())
    if total > _EXACT_SUPPORT_MAX:
        return None
    from scipy.signal import fftconvolve
    from scipy.stats import binom

    dist = np.ones(1)
    values, counts = np.unique(mags, return_counts=True)
    for a, c in zip(values.tolist(), counts.tolist(), strict=True):
        kernel = np.zeros(2 * a * c + 1)
        kernel[:: 2 * a] = binom.pmf(np.arange(c + 1), c, 0.5)
        if len(dist) * len(kernel) <= 20_000_000:
            dist = np.convolve(dist, kernel)
        else:
            dist = np.clip(fftconvolve(dist, kernel), 0.0, None)
    support = np.abs(np.arange(-total, total + 1, dtype=np.float64))
    return float(min(1.0, dist[support >= threshold].sum()))


def _sign_flip_hits(nz: np.ndarray, threshold: float, n_perm: int, seed: int) -> int:
    """How many of ``n_perm`` seeded sign patterns give ``|sum s_k D_k| >= threshold``.

    The patterns are those of ``rng.choice((1.0, -1.0), size=(n_perm, m))`` drawn in blocks
    of 4,096 rows from ``default_rng(seed)``, the draws this test has always used. That call
    takes one 32-bit output of the generator per sign and keeps its top bit (numpy's Lemire
    bound for two values never rejects), so the same signs are read straight from the raw
    stream in small blocks: no 64-bit index and sign matrices of ``4096 x m``. The sums are
    of integers well below 2**24, hence exact in any order and precision; the result is the
    same count to the unit. Where the shortcut does not reproduce ``choice`` (another numpy,
    a big-endian machine) the test draws through ``choice`` itself.
    """
    m = len(nz)
    rng = np.random.default_rng(seed)
    hits = 0
    if not _raw_signs_match_choice():
        for start in range(0, n_perm, 4096):
            size = min(4096, n_perm - start)
            drawn = rng.choice((1.0, -1.0), size=(size, m))
            hits += int((np.abs(drawn @ nz) >= threshold).sum())
        return hits
    exact32 = float(np.abs(nz).sum()) < 2**24
    weights = nz.astype(np.float32 if exact32 else np.float64)
    stream = _U32Stream(rng.bit_generator)
    rows = max(1, (1 << 21) // m)
    for start in range(0, n_perm, rows):
        size = min(rows, n_perm - start)
        draws = stream.take(size * m)
        if exact32:
            # the draw's top bit as the sign of a float32 1.0: -1.0 exactly when it is set
            np.bitwise_and(draws, np.uint32(0x80000000), out=draws)
            np.bitwise_or(draws, np.uint32(0x3F800000), out=draws)
            signs: np.ndarray = draws.view(np.float32).reshape(size, m)
        else:
            signs = 1.0 - 2.0 * (draws >> 31).astype(np.float64).reshape(size, m)
        stats = np.abs(np.matmul(signs, weights).astype(np.float64))
        hits += int((stats >= threshold).sum())
    return hits


class _U32Stream:
    """The generator's 32-bit outputs in order (two per raw 64-bit output, low half first)."""

    def __init__(self, bit_generator: np.random.BitGenerator) -> None:
        self._bg = bit_generator
        self._left = np.empty(0, dtype=np.uint32)

    def take(self, count: int) -> np.ndarray:
        need = count - len(self._left)
        if need <= 0:
            out, self._left = self._left[:count], self._left[count:]
            return out
        raw = self._bg.random_raw((need + 1) // 2).view(np.uint32)
        out = np.concatenate([self._left, raw[:need]]) if len(self._left) else raw[:need]
        self._left = raw[need:].copy()
        return out


_RAW_SIGNS_OK: bool | None = None


def _raw_signs_match_choice() -> bool:
    """Whether :class:`_U32Stream`'s top bits reproduce ``choice((1.0, -1.0))`` here."""
    global _RAW_SIGNS_OK
    if _RAW_SIGNS_OK is None:
        rng = np.random.default_rng(20260)
        want = np.concatenate([rng.choice((1.0, -1.0), size=(3, 7)).ravel(),
                               rng.choice((1.0, -1.0), size=(5, 9)).ravel()])
        stream = _U32Stream(np.random.default_rng(20260).bit_generator)
        got = np.concatenate([stream.take(21), stream.take(45)])
        _RAW_SIGNS_OK = bool(np.array_equal(want, 1.0 - 2.0 * (got >> 31)))
    return _RAW_SIGNS_OK
