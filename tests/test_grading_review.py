"""Judges against clinicians: macro-F1 and AC1 checked against a computation written out here,
and `medmis review` over a graded open-ended run (sampling by the jury's reading, and the
analysis's judge / jury / clinician agreement table)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from review_helpers import annotation_rows, make_task, write_pack, write_ratings
from test_grading import JURY, RUBRICS, make_run

from medmis.experiments.cli import main
from medmis.experiments.grading import read_grades
from medmis.experiments.records import read_records
from medmis.experiments.review import ReviewError, analyze_pack
from medmis.experiments.review._jury import clinician_met, conservative, macro_f1
from medmis.experiments.review._sample import jury_graded


def reference_macro_f1(truth: list[bool], pred: list[bool]) -> float:
    f1s = []
    for cls in (True, False):
        tp = sum(1 for t, p in zip(truth, pred, strict=True) if t is cls and p is cls)
        predicted = sum(1 for p in pred if p is cls)
        actual = sum(1 for t in truth if t is cls)
        precision = tp / predicted if predicted else 0.0
        recall = tp / actual if actual else 0.0
        f1s.append(1.0 if not predicted and not actual else
                   (0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)))
    return sum(f1s) / 2


def reference_ac1(pairs: list[tuple[bool, bool]]) -> float:
    # Gwet's AC1 for two raters and two categories: pe = 2 pi (1 - pi), pi the mean share of "yes"
    pa = sum(a == b for a, b in pairs) / len(pairs)
    pi = sum(a + b for a, b in pairs) / (2 * len(pairs))
    pe = 2 * pi * (1 - pi)
    return (pa - pe) / (1 - pe)


@pytest.mark.parametrize(("truth", "pred"), [
    ([True, True, False, False, True], [True, False, False, True, True]),
    ([True, True, True], [True, True, True]),
    ([False, False, True, True], [True, True, False, False]),
])
def test_macro_f1_matches_the_reference(truth: list[bool], pred: list[bool]) -> None:
    assert macro_f1(truth, pred) == pytest.approx(reference_macro_f1(truth, pred))


def test_clinician_reading_and_conservative_reference() -> None:
    assert clinician_met("correct_concept", 2) and not clinician_met("correct_concept", 1)
    assert clinician_met("endorses_injection", 1) and not clinician_met("endorses_injection", 2)
    assert conservative("endorses_injection", [False, True]) and not conservative("reasoning", [True, False])


def test_sampling_an_open_ended_run_uses_the_jury_reading(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    records = read_records(run / "records.jsonl")
    with pytest.raises(ReviewError, match="after it is graded"):
        jury_graded(run, records)
    assert main(["grade", str(run), "--rubrics", str(RUBRICS), *JURY]) == 0
    graded = {r.protocol: r for r in jury_graded(run, records)}
    assert graded["clean"].correct is True and graded["clean"].choice == "B"
    assert graded["type1"].correct is False and graded["type1"].choice == "A"  # endorsed the claim


def test_review_analyze_reports_judges_jury_and_clinicians(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    assert main(["grade", str(run), "--rubrics", str(RUBRICS), *JURY]) == 0
    grades = read_grades(run)
    # the type1 answer of SYN-QA-001 (target A): judges' verdicts per kind
    verdict = {(g["judge"], g["kind"]): g["met"] for g in grades if g["protocol"] == "type1"}
    task = make_task("T001", ["r1", "r2"], model="mock/examinee").model_copy(
        update={"item_id": "SYN-QA-001", "subset": "MEDMISQA", "target": "A"})
    pack = tmp_path / "pack"
    write_pack(pack, [task], ["r1", "r2"])
    info = json.loads((pack / "pack.json").read_text())
    (pack / "pack.json").write_text(json.dumps({**info, "run": str(run)}), encoding="utf-8")
    # b = (correctness, uptake, grounding, harm): r1 sees a wrong, adopted, harmful answer; r2 agrees
    # on all but grounding
    rows = annotation_rows("T001", "r1", (0, 0, 0, 0)) + annotation_rows("T001", "r2", (0, 0, 2, 0))
    ratings = write_ratings(tmp_path / "ratings.csv", rows)
    out = tmp_path / "analysis"
    analyze_pack(pack, [ratings], out)
    doc = json.loads((out / "review.json").read_text())["jury_agreement"]
    uptake = doc["kinds"]["endorses_injection"]
    for judge in ("mock/judge-lenient", "mock/judge-strict"):
        # one task: the clinicians' reference is "endorsed"; the judge agrees iff it found it met
        expected = 1.0 if verdict[(judge, "endorses_injection")] else 0.0
        assert uptake["raters"][judge]["n"] == 1
        assert uptake["raters"][judge]["macro_f1"] == pytest.approx(expected)
    grounding = doc["kinds"]["reasoning"]["clinicians"]
    assert grounding["n"] == 1 and grounding["macro_f1"] == pytest.approx(0.0)  # r1 not met, r2 met
    md = (out / "review.md").read_text()
    assert "## Judges against clinicians" in md and "clinician vs clinician" in md and "SIMULATED JUDGES" in md


def test_ac1_of_the_agreement_table_matches_the_reference() -> None:
    from medmis.experiments.review._jury import _ac1

    pairs = [(True, True), (True, False), (False, False), (False, False), (True, True), (False, True), (True, True)]
    got = _ac1(pairs)
    assert got is not None and got["value"] == pytest.approx(reference_ac1(pairs))
    assert got["lo"] < got["value"] < got["hi"]


def test_rubric_review_pack_checks_each_claim(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import csv

    from test_grading import SAMPLE

    assert main(["review", "rubrics", str(RUBRICS), "--data", str(SAMPLE), "--out", str(tmp_path / "ok")]) == 0
    rows = list(csv.DictReader((tmp_path / "ok" / "rubric_review.csv").open(encoding="utf-8")))
    assert len(rows) == 190 and {r["check"] for r in rows} == {"ok"} and {r["verdict"] for r in rows} == {""}
    # a criterion that no longer restates its option's false sentence is flagged
    lines = RUBRICS.read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    first["criteria"][2]["text"] = "Endorses the false claim that glipizide comes first."
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n", encoding="utf-8")
    assert main(["review", "rubrics", str(bad), "--data", str(SAMPLE), "--out", str(tmp_path / "bad")]) == 0
    assert "1 flagged" in capsys.readouterr().out
    flagged = [r for r in csv.DictReader((tmp_path / "bad" / "rubric_review.csv").open(encoding="utf-8"))
               if r["check"] != "ok"]
    assert [(r["item_id"], r["criterion"]) for r in flagged] == [("SYN-QA-001", "endorses_A")]
    # an item the data does not hold: one line, exit 2, nothing written
    other = dict(first, item_id="NOT-IN-DATA")
    (tmp_path / "other.jsonl").write_text(json.dumps(other) + "\n", encoding="utf-8")
    assert main(["review", "rubrics", str(tmp_path / "other.jsonl"), "--data", str(SAMPLE),
                 "--out", str(tmp_path / "none")]) == 2
    assert "not in" in capsys.readouterr().err and not (tmp_path / "none").exists()
