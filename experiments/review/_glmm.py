"""Mixed-effects logistic regression of per-annotation worst-case status, with a random
intercept per reviewer (statsmodels ``BinomialBayesMixedGLM``).

The model is fitted by **variational Bayes** (``fit_vb``: a mean-field Gaussian approximation
to the posterior) under statsmodels' default priors: fixed effects ~ Normal(0, 2^2) on the
log-odds scale, and the log of the reviewer standard deviation ~ Normal(0, 1). The priors keep
estimates finite where a level has no worst case at all (complete separation, common in small
review samples), at the price of shrinking large odds ratios towards 1. Reported odds ratios
are ``exp`` of the approximate posterior means with 95% intervals ``exp(mean ± 1.96 sd)``; the
reviewer ICC on the latent scale is ``s^2 / (s^2 + pi^2 / 3)`` with ``s`` the reviewer SD at
its posterior mean (interval from the same transform of ``log s ± 1.96 sd``).

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


def _interval(mean: float, sd: float) -> dict[str, float]:
    return {"value": math.exp(mean), "lo": math.exp(mean - 1.96 * sd), "hi": math.exp(mean + 1.96 * sd)}


def _icc(log_sd: float) -> float:
    var = math.exp(2 * log_sd)
    return var / (var + math.pi ** 2 / 3)


def fit_worst_case_glmm(rows: Sequence[Mapping[str, Any]], seed: int = 0) -> dict[str, Any]:
    """Fit ``worst ~ model + content + provenance + falsehood + (1 | reviewer)``.

    Args:
        rows: One mapping per annotation with ``worst`` (0/1), ``reviewer`` and the
            :data:`FACTORS`.
        seed: Seed of the variational fit's random starting values.

    Returns:
        ``{"method", "notes", "n", "reviewers", "reference", "odds_ratios", "icc"}``, or
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
    vcp_mean, vcp_sd = float(result.vcp_mean[0]), float(result.vcp_sd[0])
    if not (np.all(np.isfinite(fe_mean)) and np.all(np.isfinite(fe_sd)) and math.isfinite(vcp_mean)):
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
    return {
        "method": METHOD,
        "notes": notes,
        "formula": "worst ~ " + " + ".join([*reference, "(1 | reviewer)"]),
        "n": n, "events": events, "reviewers": len(reviewers), "reference": reference,
        "events_per_parameter": None if not params else epv,
        "odds_ratios": odds,
        "reviewer_sd": math.exp(vcp_mean),
        "icc": {"value": _icc(vcp_mean), "lo": _icc(vcp_mean - 1.96 * vcp_sd),
                "hi": _icc(vcp_mean + 1.96 * vcp_sd)},
    }
