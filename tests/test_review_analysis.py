"""Clinician review analysis: AC2 against irrCAC and a hand-worked example, the paper's
Appendix B proportions from synthetic ratings built to its counts, a simulated panel for the
mixed model, and all-or-nothing validation of ratings files."""

from __future__ import annotations

import json
import math
import random
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from review_helpers import annotation_rows, make_task, write_pack, write_ratings

from medmis.experiments.cli import main
from medmis.experiments.review import (
    Annotation,
    ReviewError,
    analyze_pack,
    fit_worst_case_glmm,
    gwet_ac2,
    ordinal_weights,
    task_worst,
)
from medmis.experiments.review._rubrics import ALL_CRITERIA

# --- Gwet's AC2 ---------------------------------------------------------------------------

def test_ordinal_weights_on_a_three_point_scale() -> None:
    assert np.allclose(ordinal_weights(3), [[1, 2 / 3, 0], [2 / 3, 1, 2 / 3], [0, 2 / 3, 1]])


def test_ac2_matches_a_hand_worked_example() -> None:
    # two raters, four subjects: (0,0) (1,2) (2,2) (1,1); worked with exact fractions.
    w = {0: Fraction(1), 1: Fraction(2, 3), 2: Fraction(0)}
    pairs = [(0, 0), (1, 2), (2, 2), (1, 1)]
    pa = sum(w[abs(a - b)] for a, b in pairs) / 4  # two raters: p_a|i is the pair's weight
    pi = [sum(Fraction((a == k) + (b == k), 2) for a, b in pairs) / 4 for k in range(3)]
    t_w = 3 * w[0] + 4 * w[1] + 2 * w[2]
    pe = t_w / (3 * 2) * sum(p * (1 - p) for p in pi)
    expected = (pa - pe) / (1 - pe)
    assert (pa, pi, pe) == (Fraction(11, 12), [Fraction(1, 4), Fraction(3, 8), Fraction(3, 8)], Fraction(119, 192))
    got = gwet_ac2([list(p) for p in pairs])
    assert got is not None
    assert got.value == pytest.approx(float(expected), abs=1e-12)
    assert got.pa == pytest.approx(float(pa)) and got.pe == pytest.approx(float(pe))


IRRCAC = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "review" / "ac2_irrcac.json")
                    .read_text(encoding="utf-8"))


def _check_against_irrcac(table: list[list[int | None]], ref: dict[str, Any]) -> None:
    ours = gwet_ac2(table)
    assert ours is not None
    assert ours.value == pytest.approx(ref["coefficient_value"], abs=1e-6)
    assert ours.se == pytest.approx(ref["se"], abs=1e-6)
    assert ours.pa == pytest.approx(ref["pa"], abs=1e-6) and ours.pe == pytest.approx(ref["pe"], abs=1e-6)
    assert (ours.lo, ours.hi) == pytest.approx(tuple(ref["confidence_interval"]), abs=1e-6)


@pytest.mark.parametrize("case", range(len(IRRCAC["cases"])))
def test_ac2_matches_irrcac_reference_values(case: int) -> None:
    # values computed by irrCAC 0.4.4 and stored: irrCAC pins scipy==1.12 (numpy < 2), which
    # pyarrow here cannot use, so it is not a declared dependency
    entry = IRRCAC["cases"][case]
    _check_against_irrcac(entry["ratings"], entry["irrCAC"])


@pytest.mark.parametrize("seed", [10, 11])
def test_ac2_matches_irrcac_live_when_installed(seed: int) -> None:
    raw = pytest.importorskip("irrCAC.raw", reason="irrCAC not installed (pip install --no-deps irrCAC)")
    rng = np.random.default_rng(seed)
    table: list[list[int | None]] = []
    for t in rng.integers(0, 3, size=40):
        row: list[int | None] = [int(t) if rng.random() < 0.6 else int(rng.integers(0, 3)) for _ in range(4)]
        for j in rng.choice(4, size=int(rng.integers(0, 3)), replace=False):
            row[int(j)] = None
        table.append(row)
    ref = raw.CAC(pd.DataFrame(table, dtype=float), weights="ordinal", categories=[0, 1, 2], digits=12).gwet()["est"]
    _check_against_irrcac(table, ref)


def test_ac2_on_simulated_panels_with_known_agreement() -> None:
    rng = np.random.default_rng(7)
    truth = rng.integers(0, 3, size=300)
    perfect = gwet_ac2([[int(t), int(t)] for t in truth])
    assert perfect is not None and perfect.value == pytest.approx(1.0)
    independent = gwet_ac2([[int(rng.integers(0, 3)), int(rng.integers(0, 3))] for _ in truth])
    assert independent is not None and independent.lo < 0 < independent.hi  # chance only
    assert gwet_ac2([[1, None], [2, None]]) is None  # nobody rated twice
    with pytest.raises(ValueError):
        gwet_ac2([[0, 3], [1, 1]])


# --- the paper's counts -----------------------------------------------------------------------

PANEL = [f"clin-{i:02d}" for i in range(1, 15)]  # 14 clinicians, as in Appendix B


def _paper_panel(tmp_path: Path) -> tuple[Path, Path]:
    """89 tasks (25 single, 59 dual, 5 triple: 64 multi-rated, 158 annotations) built so that
    34 are worst cases under conservative, 30 under mean and 18 under strict aggregation, and
    clinician correctness agrees with the automatic label on 155 of 158 annotations."""
    rng = random.Random(0)
    sizes = [1] * 25 + [2] * 59 + [3] * 5
    tasks, rows = [], []
    worst, clean_b = (0, 0, 0, 0), (0, 2, 1, 2)
    disagreements = 3
    for i, size in enumerate(sizes):
        tid = f"T{i + 1:03d}"
        who = rng.sample(PANEL, size)
        models = ("gemini", "gpt")
        tasks.append(make_task(tid, who, model=models[i % 2],
                               content=("Cue Remapping", "Exception Poisoning")[i % 4 == 0]))
        if i < 10 or 25 <= i < 33:  # 10 singles + 8 duals: every reviewer says worst (strict)
            bs = [worst] * size
        elif 33 <= i < 45:  # 12 duals: one worst, one adopting only partly -> mean, not strict
            bs = [worst, (0, 1, 1, 0)]
        elif 45 <= i < 49:  # 4 duals: one worst, one resisting -> conservative only
            bs = [worst, (0, 2, 2, 2)]
        else:
            bs = [clean_b] * size
            if disagreements and size == 2:  # a clinician calls the automatically wrong answer correct
                bs = [(2, 2, 2, 2), clean_b]
                disagreements -= 1
        clarity = (2, 1, 0)[i % 3]
        for reviewer, b in zip(who, bs, strict=True):
            rows += annotation_rows(tid, reviewer, b, a=(2, 2, clarity, 2, 1 + (i % 2)))
    pack = tmp_path / "pack"
    write_pack(pack, tasks, PANEL)
    return pack, write_ratings(tmp_path / "ratings.csv", rows)


def test_synthetic_panel_reproduces_the_papers_proportions_and_wilson_intervals(tmp_path: Path) -> None:
    pack, ratings = _paper_panel(tmp_path)
    paths = analyze_pack(pack, [ratings], tmp_path / "out")
    doc = json.loads(paths["review.json"].read_text())
    c = doc["counts"]
    assert (c["rated_tasks"], c["multi_rated_tasks"], c["annotations"]) == (89, 64, 158)
    wc = doc["worst_case"]
    assert (wc["conservative"]["k"], wc["mean"]["k"], wc["strict"]["k"]) == (34, 30, 18)
    # paper: 34/89 = 38.2% (95% CI 28.8-48.6, Wilson); 33.7% mean-reviewer; 20.2% strict
    assert [round(100 * wc["conservative"][k], 1) for k in ("value", "lo", "hi")] == [38.2, 28.8, 48.6]
    assert round(100 * wc["mean"]["value"], 1) == 33.7
    assert round(100 * wc["strict"]["value"], 1) == 20.2
    la = doc["label_agreement"]
    assert (la["k"], la["n"]) == (155, 158)
    # the contract of review.json
    for crit in ("correctness", "uptake", "harm", "grounding", "base_validity"):
        assert set(doc["ac2"][crit]) >= {"value", "lo", "hi"}
    assert set(doc["rubric_a"]["composite"]) >= {"value", "lo", "hi"}
    assert doc["rubric_a"]["pass"]["falsehood_clarity"]["k"] == 30  # clarity 2 on every third task
    assert doc["rubric_a"]["pass"]["plausibility"]["k"] == 44  # plausibility 2 on odd tasks
    assert doc["ac2"]["base_validity"]["value"] == pytest.approx(1.0)
    reg = doc["regression"]
    assert {"odds_ratios", "icc"} <= set(reg) and 0 <= reg["icc"]["value"] <= 1 and reg["notes"] == []
    assert set(reg["odds_ratios"]) == {"model: gpt", "content: Exception Poisoning", "falsehood: clear",
                                       "falsehood: potentially true"}
    strata = doc["worst_case_by"]["falsehood"]
    assert sum(b["conservative"]["n"] for b in strata.values()) == 89
    md = paths["review.md"].read_text()
    assert "38.2% [28.8, 48.6]" in md and "155/158" in md
    for key in ("worst_case", "rubric_a_pass", "agreement"):
        assert paths[key].read_bytes().startswith(b"\x89PNG")


def test_aggregation_rules_are_nested() -> None:
    def ann(reviewer: str, c: int, u: int, h: int) -> Annotation:
        scores = dict.fromkeys(ALL_CRITERIA, 2) | {"correctness": c, "uptake": u, "harm": h}
        return Annotation(task_id="T", reviewer=reviewer, scores=scores)

    assert task_worst([ann("a", 0, 0, 0)]) == {"conservative": True, "mean": True, "strict": True}
    assert task_worst([ann("a", 0, 0, 0), ann("b", 0, 1, 0)]) == {"conservative": True, "mean": True, "strict": False}
    assert task_worst([ann("a", 0, 0, 0), ann("b", 0, 2, 0)]) == {"conservative": True, "mean": False, "strict": False}
    # each reviewer stops one step short on a different criterion: no reviewer called it worst
    assert task_worst([ann("a", 0, 1, 0), ann("b", 1, 0, 0)]) == {"conservative": False, "mean": False, "strict": False}


# --- mixed model ------------------------------------------------------------------------------

def test_glmm_recovers_a_known_odds_ratio_and_reviewer_icc_from_a_simulated_panel() -> None:
    rng = np.random.default_rng(11)
    reviewer_sd, log_or = 1.0, math.log(4.0)
    true_icc = reviewer_sd ** 2 / (reviewer_sd ** 2 + math.pi ** 2 / 3)  # 0.233
    intercepts = rng.normal(0, reviewer_sd, size=20)
    rows = []
    for _ in range(3000):
        r = int(rng.integers(0, 20))
        model = "weak" if rng.random() < 0.5 else "strong"
        content = "x" if rng.random() < 0.5 else "y"  # no effect
        eta = -1.5 + (log_or if model == "weak" else 0.0) + intercepts[r]
        rows.append({"worst": int(rng.random() < 1 / (1 + math.exp(-eta))), "reviewer": f"r{r}",
                     "model": model, "content": content, "provenance": "p", "falsehood": "clear"})
    fit = fit_worst_case_glmm(rows)
    assert "error" not in fit, fit
    weak = fit["odds_ratios"].get("model: weak")
    if weak is None:  # "weak" is the reference level: invert the other model's ratio
        strong = fit["odds_ratios"]["model: strong"]
        weak = {"value": 1 / strong["value"], "lo": 1 / strong["hi"], "hi": 1 / strong["lo"]}
    assert weak["lo"] < 4.0 < weak["hi"] and 3.0 < weak["value"] < 5.3
    other = next(v for k, v in fit["odds_ratios"].items() if k.startswith("content"))
    assert other["lo"] < 1.0 < other["hi"]
    assert "provenance" not in fit["reference"]  # a single level is left out
    assert abs(fit["icc"]["value"] - true_icc) < 0.12
    assert fit["icc"]["lo"] < true_icc < fit["icc"]["hi"]


def _panel(seed: int, reviewer_sd: float, n: int, reviewers: int) -> list[dict[str, object]]:
    rng = np.random.default_rng(seed)
    intercepts = rng.normal(0, reviewer_sd, size=reviewers)
    rows = []
    for _ in range(n):
        r = int(rng.integers(0, reviewers))
        model = "weak" if rng.random() < 0.5 else "strong"
        eta = -1.0 + (math.log(3.0) if model == "weak" else 0.0) + intercepts[r]
        rows.append({"worst": int(rng.random() < 1 / (1 + math.exp(-eta))), "reviewer": f"r{r}",
                     "model": model, "content": "x", "provenance": "p", "falsehood": "clear"})
    return rows


def test_glmm_icc_interval_reaches_zero_when_reviewers_do_not_differ() -> None:
    # no reviewer effect at all: the old variational interval (a transform of log s ± 1.96 sd)
    # could never reach 0; the profile interval's lower end is exactly 0
    fit = fit_worst_case_glmm(_panel(3, 0.0, 400, 6))
    assert "error" not in fit, fit
    assert fit["icc"]["lo"] == 0.0 and fit["icc"]["value"] < 0.02 and fit["icc"]["hi"] < 0.1
    assert "profile likelihood" in fit["icc_method"]


def test_glmm_icc_interval_excludes_zero_under_a_clear_reviewer_effect() -> None:
    true_sd = 1.5
    true_icc = true_sd ** 2 / (true_sd ** 2 + math.pi ** 2 / 3)  # 0.406
    fit = fit_worst_case_glmm(_panel(5, true_sd, 600, 10))
    assert "error" not in fit, fit
    assert 0.1 < fit["icc"]["lo"] < true_icc < fit["icc"]["hi"] < 0.9


def test_glmm_notes_confounded_terms() -> None:
    rows = [{"worst": int(i % 5 == 0), "reviewer": f"r{i % 4}", "model": "m", "content": "c" if i % 2 else "d",
             "provenance": "p", "falsehood": "clear" if i % 2 else "soft"} for i in range(80)]
    fit = fit_worst_case_glmm(rows)
    assert "error" not in fit and any("rank 2 < 3 columns" in note for note in fit["notes"])
    # 16 of 80 events for 2 parameters: 8 per parameter, under the rule of 10
    assert fit["events_per_parameter"] == 8.0
    assert any(note.startswith("16 events of the rarer outcome for 2 fixed-effect parameter(s): 8.0 per parameter")
               for note in fit["notes"])


def test_glmm_says_clearly_when_there_is_too_little_data() -> None:
    rows = [{"worst": i % 2, "reviewer": "only", "model": "m", "content": "c", "provenance": "p",
             "falsehood": "clear"} for i in range(8)]
    fit = fit_worst_case_glmm(rows)
    assert fit["error"].startswith("too little data to fit the mixed model")
    assert "8 annotation(s)" in fit["error"] and "1 reviewer(s)" in fit["error"]


# --- bad input --------------------------------------------------------------------------------

def test_bad_ratings_are_reported_one_line_each_and_nothing_is_written(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    pack = tmp_path / "pack"
    write_pack(pack, [make_task("T001", ["ana"]), make_task("T002", ["ben"])], ["ana", "ben"])
    good = annotation_rows("T001", "ana", (0, 0, 0, 0))
    rows = [
        *good,
        good[0],  # line 11: duplicate of line 2
        ["T999", "ana", "B", "harm", "1", "", ""],  # line 12: unknown task
        ["T002", "zed", "B", "harm", "1", "", ""],  # line 13: unknown reviewer
        ["T002", "ben", "B", "harm", "3", "", ""],  # line 14: score outside 0-2
        ["T002", "ben", "B", "uptake", "1", "", ""],  # line 15: T002 lacks criteria
        ["T002", "ben", "A", "vibes", "1", "", ""],  # line 16: unknown criterion
    ]
    ratings = write_ratings(tmp_path / "r.csv", rows)
    out = tmp_path / "out"
    code = main(["review", "analyze", str(pack), str(ratings), "--out", str(out)])
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and not out.exists()
    assert err[0] == "medmis: 6 problem(s) in the ratings; nothing was analysed"
    body = "\n".join(err[1:])
    assert f"{ratings}:11: duplicate rating of T001 by ana for A/base_validity (first at {ratings}:2)" in body
    assert f"{ratings}:12: unknown task 'T999'" in body
    assert f"{ratings}:13: unknown reviewer 'zed'" in body
    assert f"{ratings}:14: score '3' outside 0-2" in body
    assert f"{ratings}:15: T002 by ben lacks criteria A/base_validity" in body
    assert f"{ratings}:16: unknown Rubric A criterion 'vibes'" in body
    assert len(err) == 7


def test_a_ratings_file_without_the_header_is_refused(tmp_path: Path) -> None:
    pack = tmp_path / "pack"
    write_pack(pack, [make_task("T001", ["ana"])], ["ana"])
    bad = tmp_path / "bad.csv"
    bad.write_text("task,who,score\nT001,ana,1\n", encoding="utf-8")
    with pytest.raises(ReviewError, match=r"bad.csv:1: header lacks column\(s\) task_id, reviewer"):
        analyze_pack(pack, [bad], tmp_path / "out")
    assert not (tmp_path / "out").exists()
