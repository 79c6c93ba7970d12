"""Gwet's AC2: chance-corrected agreement for ordinal ratings by several raters with gaps.

Formulas from K. L. Gwet, *Handbook of Inter-Rater Reliability* (4th ed., 2014), chapters 3-5
(raw ratings, any number of raters, missing ratings allowed):

* ``r_ik`` raters placing subject ``i`` in category ``k``; ``r_i`` its raters; subjects with no
  rating are dropped, ``n`` subjects remain, ``n2`` of them with two or more ratings.
* weighted counts ``r*_ik = sum_l w_kl r_il``; percent agreement
  ``p_a = mean over the n2 subjects of sum_k r_ik (r*_ik - 1) / (r_i (r_i - 1))``.
* ``pi_k = mean over n subjects of r_ik / r_i``; chance agreement
  ``p_e = T_w / (q (q - 1)) * sum_k pi_k (1 - pi_k)`` with ``T_w`` the sum of the weights.
* ``AC2 = (p_a - p_e) / (1 - p_e)``; its variance from the subject-level linearisation
  ``gamma*_i = gamma_i - 2 (1 - AC2) (p_e|i - p_e) / (1 - p_e)``, ``gamma_i = (n / n2)
  (p_a|i - p_e [r_i >= 2]) / (1 - p_e)``, ``var = sum (gamma*_i - AC2)^2 / (n (n - 1))``;
  the interval uses Student's t with ``n - 1`` degrees of freedom, capped at 1.

Ordinal weights (Gwet 2014, ch. 3): with ``M_kl = C(|k - l| + 1, 2)``, ``w_kl = 1 - M_kl / max M``;
on a 0-2 scale that is 1 on the diagonal, 2/3 one step apart and 0 two steps apart.
MedMisBench's Appendix B (arXiv 2606.12291) reports AC2 "with ordinal weights" per criterion; the
reference repository (AI-in-Health/MedMisBench) holds no review code, so the weights are Gwet's
ordinal weights above, which are also irrCAC's ``weights="ordinal"``. The implementation is
checked against irrCAC and a hand-worked example in tests/test_review_analysis.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats


def ordinal_weights(q: int) -> np.ndarray:
    """Gwet's ordinal weights for ``q`` ordered categories."""
    d = np.abs(np.subtract.outer(np.arange(q), np.arange(q)))
    m = (d + 1) * d / 2.0
    return 1.0 - m / m.max() if q > 1 else np.ones((1, 1))


@dataclass(frozen=True)
class AC2:
    """Gwet's AC2 with its standard error and interval; ``n`` subjects, ``n_multi`` of them
    rated at least twice."""

    value: float
    se: float
    lo: float
    hi: float
    pa: float
    pe: float
    n: int
    n_multi: int


def gwet_ac2(
    ratings: Sequence[Sequence[int | None]],
    categories: Sequence[int] = (0, 1, 2),
    weights: np.ndarray | None = None,
    level: float = 0.95,
) -> AC2 | None:
    """Gwet's AC2 (AC1 with identity weights) of a subjects x raters table.

    Args:
        ratings: One row per subject, one column per rater; ``None`` where a rater did not rate.
        categories: Every possible rating in order (unused categories still count).
        weights: A ``q x q`` weight matrix; default: ordinal weights.
        level: Coverage of the interval.

    Returns:
        The coefficient, or None when fewer than two subjects are rated twice or more.

    Raises:
        ValueError: A rating outside ``categories`` or rows of unequal length.
    """
    cats = list(categories)
    q = len(cats)
    w = ordinal_weights(q) if weights is None else np.asarray(weights, dtype=float)
    if w.shape != (q, q):
        raise ValueError(f"weights must be {q}x{q}")
    widths = {len(row) for row in ratings}
    if len(widths) > 1:
        raise ValueError("every subject needs one entry per rater (None where missing)")
    counts = np.zeros((len(ratings), q))
    for i, row in enumerate(ratings):
        for value in row:
            if value is None:
                continue
            if value not in cats:
                raise ValueError(f"rating {value!r} is not one of {cats}")
            counts[i, cats.index(value)] += 1
    counts = counts[counts.sum(axis=1) > 0]
    r_i = counts.sum(axis=1)
    multi = r_i >= 2
    n, n2 = len(counts), int(multi.sum())
    if n2 < 2:
        return None
    weighted = counts @ w.T  # r*_ik
    denom = np.where(multi, r_i * (r_i - 1), 1.0)
    pa_i = np.where(multi, (counts * (weighted - 1)).sum(axis=1) / denom, 0.0)
    pa = float(pa_i[multi].mean())
    pi = (counts / r_i[:, None]).mean(axis=0)
    scale = w.sum() / (q * (q - 1)) if q > 1 else 1.0
    pe = float(scale * (pi * (1 - pi)).sum())
    if pe >= 1.0:
        return None
    ac2 = (pa - pe) / (1 - pe)
    pe_i = scale * (counts @ (1 - pi)) / r_i
    gamma = (n / n2) * (pa_i - pe * multi) / (1 - pe)
    gamma_star = gamma - 2 * (1 - ac2) * (pe_i - pe) / (1 - pe)
    var = float(((gamma_star - ac2) ** 2).sum() / (n * (n - 1)))
    se = var ** 0.5
    half = float(stats.t.ppf(0.5 + level / 2, df=n - 1)) * se
    return AC2(value=float(ac2), se=se, lo=max(-1.0, ac2 - half), hi=min(1.0, ac2 + half),
               pa=pa, pe=pe, n=n, n_multi=n2)
