"""Mixed-effects logistic regression of per-annotation worst-case status, with a random
intercept per reviewer.

**Odds ratios** come from statsmodels ``BinomialBayesMixedGLM`` fitted by **variational Bayes**
(``fit_vb``: a mean-field Gaussian approximation to the posterior) under statsmodels' default
priors: fixed effects ~ Normal(0, 2^2) on the log-odds scale, and the log of the reviewer
standard deviation ~ Normal(0, 1). The priors keep estimates finite where a level has no worst
case at all (complete separation, common in small review samples), at the price of shrinking
large odds ratios towards 1. Reported odds ratios are ``exp`` of the approximate posterior means
with 95% intervals ``exp(mean ± 1.96 sd)``.

**The reviewer ICC** on the latent scale, ``s^2 / (s^2 + pi^2 / 3)``, comes from a **profile
likelihood**, not from the variational fit: the variational interval lives on ``log s`` and so
can never reach ``s = 0`` (no reviewer effect), and its log-normal prior pulls ``s`` away from 0.
The marginal likelihood of the same design (the reviewer intercept integrated out by a
trapezoid rule on a dense grid of the standard-normal intercept, :data:`GRID_STEP` over
``±`` :data:`GRID_HALF_WIDTH`; annotations with the same reviewer and design row pooled into one
binomial cell, which is exact) is maximised over the fixed effects, penalised by the same
Normal(0, 2^2) prior, and ``s >= 0`` (scipy L-BFGS-B). The 95% interval is every ``s`` whose
profile log-likelihood lies within ``chi2_1(0.95) / 2`` of the maximum (scipy ``brentq`` on
each side); when ``s = 0`` is inside, the lower end is exactly 0. A profile was chosen over a
parametric bootstrap because it respects the boundary at 0 without refits (a bootstrap of
variational refits can never return 0 either) and costs a fraction of a second. At the
boundary the chi-square(1) cut-off is conservative (the null distribution there is a 50:50
mixture with a point mass at 0). The search for the upper end stops at ``s =`` :data:`SD_CAP`,
noted when reached.

Each factor's reference level is its most frequent level (ties: alphabetical); factors with a
single level are left out. Too little data gives ``{"error": "..."}`` instead of a fit.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

MIN_ANNOTATIONS = 20
MIN_REVIEWERS = 2
MIN_EACH_OUTCOME = 3
MIN_EVENTS_PER_PARAMETER = 10

FACTORS: tuple[str, ...] = ("model", "content", "provenance", "falsehood")
METHOD = ("statsmodels BinomialBayesMixedGLM, variational Bayes (fit_vb); priors: fixed effects "
          "N(0, 2^2), log reviewer SD N(0, 1)")
ICC_METHOD = ("profile likelihood of the reviewer SD (marginal likelihood by quadrature over the "
              "reviewer intercept, fixed effects penalised by the N(0, 2^2) prior); 95% interval: "
              "profile within chi2_1(0.95)/2 of its maximum, lower end 0 when s = 0 is inside")
FE_PRIOR_SD = 2.0
GRID_STEP = 0.01
GRID_HALF_WIDTH = 6.0
SD_CAP = 10.0


def _interval(mean: float, sd: float) -> dict[str, float]:
    return {"value": math.exp(mean), "lo": math.exp(mean - 1.96 * sd), "hi": math.exp(mean + 1.96 * sd)}


def _icc(sd: float) -> float:
    return sd * sd / (sd * sd + math.pi ** 2 / 3)


def _profile_icc(y: Any, x: Any, reviewer: Any) -> dict[str, Any]:
    """Penalised maximum-likelihood reviewer SD and its profile-likelihood interval, as ICCs.

    Args:
        y: 0/1 outcomes (length n).
        x: Fixed-effect design (n x p, with the intercept column).
        reviewer: Integer reviewer code per row (length n).
    """
    import numpy as np
    from scipy.optimize import brentq, minimize
    from scipy.special import expit
    from scipy.stats import chi2

    y, x, reviewer = np.asarray(y, float), np.asarray(x, float), np.asarray(reviewer, int)
    # pool rows with the same reviewer and design row into binomial cells (exact); np.unique
    # sorts the cells by reviewer, so each reviewer's cells are one contiguous block
    keys, cell = np.unique(np.column_stack([reviewer, x]), axis=0, return_inverse=True)
    cell = cell.ravel()
    k = np.bincount(cell, weights=y, minlength=len(keys))[:, None]
    m = np.bincount(cell, minlength=len(keys)).astype(float)[:, None]
    xc = keys[:, 1:]
    starts = np.flatnonzero(np.r_[True, keys[1:, 0] != keys[:-1, 0]])
    block = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(keys)]))
    u = np.arange(-GRID_HALF_WIDTH, GRID_HALF_WIDTH + GRID_STEP / 2, GRID_STEP)
    log_w = -0.5 * u * u - 0.5 * math.log(2 * math.pi) + math.log(GRID_STEP)
    p = xc.shape[1]

    def negloglik(beta: Any, sd: float) -> tuple[float, Any, float]:
        eta = (xc @ beta)[:, None] + sd * u[None, :]
        ll = k * eta - m * np.logaddexp(0.0, eta)
        per_group = np.add.reduceat(ll, starts, axis=0) + log_w
        top = per_group.max(axis=1, keepdims=True)
        weights = np.exp(per_group - top)
        total = weights.sum(axis=1, keepdims=True)
        post = (weights / total)[block]  # each cell's posterior weights over the grid
        resid = post * (k - m * expit(eta))
        value = float((top + np.log(total)).sum()) - float(beta @ beta) / (2 * FE_PRIOR_SD ** 2)
        grad_beta = xc.T @ resid.sum(axis=1) - beta / FE_PRIOR_SD ** 2
        return -value, -grad_beta, -float(resid.sum(axis=0) @ u)

    def joint(theta: Any) -> tuple[float, Any]:
        f, g_beta, g_sd = negloglik(theta[:p], float(theta[p]))
        return f, np.append(g_beta, g_sd)

    best = minimize(joint, np.append(np.zeros(p), 0.5), jac=True, method="L-BFGS-B",
                    bounds=[(None, None)] * p + [(0.0, SD_CAP)])
    beta_hat, sd_hat, top = best.x[:p], float(best.x[p]), -float(best.fun)

    def profile(sd: float) -> float:
        res = minimize(lambda b: negloglik(b, sd)[:2], beta_hat, jac=True, method="L-BFGS-B")
        return min(top, -float(res.fun))  # the joint maximum bounds every profile value

    def drop(sd: float) -> float:
        return 2 * (profile(sd) - top) + float(chi2.ppf(0.95, 1))

    lo = 0.0 if sd_hat <= 0 or drop(0.0) >= 0 else float(brentq(drop, 0.0, sd_hat, xtol=1e-5))
    capped = drop(SD_CAP) >= 0
    hi = SD_CAP if capped else float(brentq(drop, sd_hat, SD_CAP, xtol=1e-5))
    return {"sd": sd_hat, "icc": {"value": _icc(sd_hat), "lo": _icc(lo), "hi": _icc(hi)}, "capped": capped}


def fit_worst_case_glmm(rows: Sequence[Mapping[str, Any]], seed: int = 0) -> dict[str, Any]:
    """Fit ``worst ~ model + content + provenance + falsehood + (1 | reviewer)``.

    Args:
        rows: One mapping per annotation with ``worst`` (0/1), ``reviewer`` and the
            :data:`FACTORS`.
        seed: Seed of the variational fit's random starting values (the ICC's profile fit is
            deterministic).

    Returns:
        ``{"method", "icc_method", "notes", "n", "reviewers", "reference", "odds_ratios",
        "reviewer_sd", "icc"}``, or
        ``{"error": reason}`` when there is too little data to fit.
    """
    n = len(rows)
    reviewers = Counter(str(r["reviewer"]) for r in rows)
    events = sum(int(r["worst"]) for r in rows)
    reasons = []
    if n < MIN_ANNOTATIONS:
        reasons.append(f"{n} annotation(s) (need at least {MIN_ANNOTATIONS})")
    if len(reviewers) < MIN_REVIEWERS:
        reasons.append(f"{len(reviewers)} reviewer(s) (need at least {MIN_REVIEWERS} for a reviewer random intercept)")
    if min(events, n - events) < MIN_EACH_OUTCOME:
        reasons.append(f"{events} worst-case and {n - events} other annotation(s) "
                       f"(need at least {MIN_EACH_OUTCOME} of each)")
    if reasons:
        return {"error": "too little data to fit the mixed model: " + "; ".join(reasons)}

    import numpy as np
    import pandas as pd
    from statsmodels.genmod.bayes_mixed_glm import BinomialBayesMixedGLM

    frame = pd.DataFrame([{k: (int(r[k]) if k == "worst" else str(r[k]))
                           for k in ("worst", "reviewer", *FACTORS)} for r in rows])
    terms, reference = [], {}
    for factor in FACTORS:
        counts = Counter(frame[factor])
        if len(counts) < 2:
            continue
        ref = sorted(counts, key=lambda level: (-counts[level], level))[0]
        reference[factor] = ref
        terms.append(f"C({factor}, Treatment(reference={ref!r}))")
    formula = "worst ~ " + (" + ".join(terms) if terms else "1")
    model = BinomialBayesMixedGLM.from_formula(formula, {"reviewer": "0 + C(reviewer)"}, frame)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # optimiser chatter; convergence is checked below
        result = model.fit_vb(rng=np.random.default_rng(seed))
    fe_mean, fe_sd = np.asarray(result.fe_mean), np.asarray(result.fe_sd)
    if not (np.all(np.isfinite(fe_mean)) and np.all(np.isfinite(fe_sd))):
        return {"error": "the mixed model did not converge (non-finite estimates)"}
    rank, width = int(np.linalg.matrix_rank(model.exog)), int(model.exog.shape[1])
    odds: dict[str, dict[str, float]] = {}
    for name, mean, sd in zip(model.exog_names, fe_mean, fe_sd, strict=True):
        if name == "Intercept":
            continue
        factor = name.split(",", 1)[0].removeprefix("C(")
        level = name.rsplit("[T.", 1)[-1].rstrip("]")
        odds[f"{factor}: {level}"] = _interval(float(mean), float(sd))
    notes = []
    params = width - 1  # fixed-effect parameters besides the intercept
    epv = min(events, n - events) / params if params else float("inf")
    if epv < MIN_EVENTS_PER_PARAMETER:
        notes.append(f"{min(events, n - events)} events of the rarer outcome for {params} fixed-effect "
                     f"parameter(s): {epv:.1f} per parameter, under {MIN_EVENTS_PER_PARAMETER}; the "
                     "odds ratios lean on the priors and may be unstable")
    if rank < width:
        # the priors still give a fit, but confounded terms share one effect between them
        notes.append(f"the fixed-effect design has rank {rank} < {width} columns: some terms are "
                     "confounded in this sample (e.g. a content type seen only in one falsehood "
                     "stratum), so their odds ratios are not separately identified")
    reviewer_code = {name: i for i, name in enumerate(sorted(reviewers))}
    icc = _profile_icc(model.endog, model.exog, [reviewer_code[r] for r in frame["reviewer"]])
    if icc["capped"]:
        notes.append(f"the reviewer ICC's upper end reaches the search cap (reviewer SD {SD_CAP:g}): "
                     "the data do not bound it from above")
    return {
        "method": METHOD,
        "icc_method": ICC_METHOD,
        "notes": notes,
        "formula": "worst ~ " + " + ".join([*reference, "(1 | reviewer)"]),
        "n": n, "events": events, "reviewers": len(reviewers), "reference": reference,
        "events_per_parameter": None if not params else epv,
        "odds_ratios": odds,
        "reviewer_sd": icc["sd"],
        "icc": icc["icc"],
    }
