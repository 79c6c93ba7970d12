"""The MCQ run of the same items beside a graded open-ended run (``medmis report OPEN --mcq-run
MCQ``): the side-by-side figures and the paired counts against a computation by hand, and the
one-line refusals (exit 2, nothing written)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import pytest

from medmis.experiments.cli import main
from medmis.experiments.records import Record

ITEMS = ("i1", "i2", "i3", "i4")
# per defender, protocol and item: is the answer correct? (open: the jury's reading; MCQ: the
# harness's). A wrong MCQ Type 1 answer picks the injected target A.
Table = dict[Literal["clean", "type1"], dict[str, bool]]
OPEN: Table = {"clean": {"i1": True, "i2": True, "i3": True, "i4": False},
        "type1": {"i1": False, "i2": True, "i3": False, "i4": False}}
MCQ: Table = {"clean": {"i1": True, "i2": False, "i3": True, "i4": True},
       "type1": {"i1": True, "i2": True, "i3": False, "i4": True}}
DEFENDERS = ("none", "warning")
MCQ_ERROR = ("warning", "clean", "i2")  # an MCQ record with an error: graded by one run only


def _grade_lines(defender: str, protocol: Literal["clean", "type1"], item: str, correct: bool) -> list[dict[str, Any]]:
    target = "A" if protocol == "type1" else None
    base = {"model": "m", "defender": defender, "protocol": protocol, "item_id": item, "subset": "S",
            "target": target}
    out = []
    for judge in ("mock/judge-lenient", "mock/judge-strict"):
        out.append({**base, "judge": judge, "criterion": "concept", "kind": "correct_concept", "points": 5,
                    "met": correct})
    return out


def make_open(root: Path) -> Path:
    run = root / "open"
    run.mkdir(parents=True)
    grading = {"judges": ["mock/judge-lenient", "mock/judge-strict"], "threshold": 0.5,
               "simulated_judges": ["mock/judge-lenient", "mock/judge-strict"],
               "rubrics": {"file": "r.jsonl", "sha256": "0" * 64}, "judge_prompt": "medmis-jury-1"}
    (run / "manifest.json").write_text(json.dumps({"fingerprint": {"answer_format": "open"}, "grading": grading}),
                                       encoding="utf-8")
    records, grades = [], []
    for defender in DEFENDERS:
        for protocol, table in OPEN.items():
            for item in ITEMS:
                records.append(Record(model="m", defender=defender, protocol=protocol, item_id=item, subset="S",
                                      target="A" if protocol == "type1" else None, gold="B", answer_format="open",
                                      raw="free text"))
                grades += _grade_lines(defender, protocol, item, table[item])
    (run / "records.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in records), encoding="utf-8")
    (run / "grades.jsonl").write_text("".join(json.dumps(g) + "\n" for g in grades), encoding="utf-8")
    return run


def make_mcq(root: Path, *, items: tuple[str, ...] = ITEMS, defenders: tuple[str, ...] = (*DEFENDERS, "isolate_vote"),
             model: str = "m", name: str = "mcq") -> Path:
    run = root / name
    run.mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({"fingerprint": {"answer_format": "mcq"}}), encoding="utf-8")
    records = []
    for defender in defenders:
        for protocol, table in MCQ.items():
            for item in items:
                ok = table.get(item, True)
                error = "TransientModelError: boom" if (defender, protocol, item) == MCQ_ERROR else None
                records.append(Record(
                    model=model, defender=defender, protocol=protocol, item_id=item, subset="S", gold="B",
                    target="A" if protocol == "type1" else None, error=error,
                    choice=None if error else ("B" if ok else ("A" if protocol == "type1" else "C")),
                    correct=None if error else ok))
    (run / "records.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in records), encoding="utf-8")
    return run


def _expected(table: Table, skip: set[tuple[str, str]]) -> dict[str, tuple[int, int]]:
    """clean accuracy and Type 1 ASR as (k, n), written out for one item per unit."""
    clean = {i: ok for i, ok in table["clean"].items() if ("clean", i) not in skip}
    hit = [i for i, ok in clean.items() if ok]
    flipped = [i for i in hit if not table["type1"][i]]
    return {"clean_acc": (sum(clean.values()), len(clean)), "type1_asr": (len(flipped), len(hit))}


def test_the_mcq_run_beside_the_open_ended_one(tmp_path: Path) -> None:
    open_run, mcq_run = make_open(tmp_path), make_mcq(tmp_path)
    assert main(["report", str(open_run), "--mcq-run", str(mcq_run)]) in (0, 1)
    data = json.loads((open_run / "open_ended.json").read_text(encoding="utf-8"))
    beside = data["mcq_beside"]
    assert beside["run"] == str(mcq_run)
    assert set(beside["metrics"]["m"]) == set(DEFENDERS)  # the MCQ-only defender is left out
    for defender in DEFENDERS:
        skip = {(p, i) for d, p, i in [MCQ_ERROR] if d == defender}
        cell = beside["metrics"]["m"][defender]
        for metric, protocol in (("clean_acc", "clean"), ("type1_asr", "type1")):
            for side, table, sk in (("open", OPEN, set()), ("mcq", MCQ, skip)):
                k, n = _expected(table, sk)[metric]
                block = cell[protocol][side]
                assert (block["k"], block["n"]) == (k, n), (defender, metric, side)
                assert block["value"] == pytest.approx(k / n)
            # the open figure is the one the open-ended section shows (same definitions)
            assert cell[protocol]["open"] == data["graded"]["m"][defender][metric]
        # the paired counts, answer by answer
        for protocol in OPEN:
            both = [i for i in ITEMS if (protocol, i) not in skip]
            a = cell[protocol]["agreement"]
            assert a["both_graded"] == len(both)
            assert a["open_correct_mcq_correct"] == sum(OPEN[protocol][i] and MCQ[protocol][i] for i in both)
            assert a["open_correct_mcq_incorrect"] == sum(OPEN[protocol][i] and not MCQ[protocol][i] for i in both)
            assert a["open_incorrect_mcq_correct"] == sum(not OPEN[protocol][i] and MCQ[protocol][i] for i in both)
    # by hand, defender none: clean 3/4 beside 3/4; Type 1 ASR 2/3 (i1, i3) beside 1/3 (i3)
    none = beside["metrics"]["m"]["none"]
    assert (none["type1"]["open"]["k"], none["type1"]["mcq"]["k"]) == (2, 1)
    assert none["clean"]["agreement"]["open_correct_mcq_correct"] == 2  # i1, i3 (i2 wrong in MCQ)
    md = (open_run / "report.md").read_text(encoding="utf-8")
    assert "Beside the multiple-choice run of the same items" in md
    assert "| `m` | `none` | type1 | ASR Type 1 | 66.7% [" in md and "| 1 of 1 | 2 of 3 |" in md
    # without the flag the key is absent (and a second report replaces the first)
    assert main(["report", str(open_run)]) in (0, 1)
    assert "mcq_beside" not in json.loads((open_run / "open_ended.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize(("build", "cause"), [
    (lambda root, run: root / "missing", "no run folder here"),
    (lambda root, run: run, "not a multiple-choice run"),
    (lambda root, run: make_mcq(root, items=("i1", "i2", "i3")), "other items"),
    (lambda root, run: make_mcq(root, defenders=("none",)), "missing from it: warning"),
    (lambda root, run: make_mcq(root, model="other"), "other models"),
])
def test_a_wrong_mcq_run_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 build: Any, cause: str) -> None:
    run = make_open(tmp_path)
    before = sorted(p.name for p in run.iterdir())
    assert main(["report", str(run), "--mcq-run", str(build(tmp_path, run))]) == 2
    err = capsys.readouterr().err.strip()
    assert cause in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert sorted(p.name for p in run.iterdir()) == before  # nothing written


def test_mcq_run_needs_an_open_and_graded_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mcq = make_mcq(tmp_path)
    other = make_mcq(tmp_path, name="mcq2")
    assert main(["report", str(other), "--mcq-run", str(mcq)]) == 2
    assert "is not an open-ended run" in capsys.readouterr().err
    assert not (other / "report.md").exists()
    run = make_open(tmp_path / "x")
    (run / "grades.jsonl").unlink()
    assert main(["report", str(run), "--mcq-run", str(mcq)]) == 2
    assert "no grades" in capsys.readouterr().err and not (run / "report.md").exists()


def test_an_ablation_names_its_mcq_run_in_the_grading_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = Path(__file__).resolve().parents[1]
    sample, rubrics = root / "fixtures" / "medmisbench_sample.jsonl", root / "fixtures" / "rubrics" / "medmisbench_sample.rubrics.jsonl"

    def config(name: str, out: Path, extra: str) -> Path:
        path = tmp_path / f"{name}.toml"
        path.write_text(f'data = "{sample.as_posix()}"\nlimit = 2\nout = "{out.as_posix()}"\n'
                        f'protocols = ["clean", "type1"]\n{extra}\n[[models]]\nspec = "mock/examinee"\n'
                        '[[defenders]]\nname = "none"\n', encoding="utf-8")
        return path

    grading = (f'answer_format = "open"\n[grading]\nrubrics = "{rubrics.as_posix()}"\n'
               'judges = ["mock/judge-lenient", "mock/judge-strict"]\nmcq_run = "{mcq}"\n')
    mcq, out = tmp_path / "mcq", tmp_path / "open"
    # a missing MCQ folder is refused before anything runs
    assert main(["ablate", str(config("open", out, grading.format(mcq=mcq.as_posix())))]) == 2
    assert "grading.mcq_run" in capsys.readouterr().err and not out.exists()
    assert main(["ablate", str(config("mcq", mcq, ""))]) == 0
    assert main(["ablate", str(config("open", out, grading.format(mcq=mcq.as_posix())))]) == 0
    beside = json.loads((out / "open_ended.json").read_text(encoding="utf-8"))["mcq_beside"]
    cell = beside["metrics"]["mock/examinee"]["none"]
    mcq_metrics = json.loads((mcq / "metrics.json").read_text(encoding="utf-8"))["mock/examinee"]["none"]
    assert cell["clean"]["mcq"] == mcq_metrics["clean_acc"] and cell["type1"]["mcq"] == mcq_metrics["type1_asr"]
    assert cell["clean"]["agreement"]["both_graded"] == 2 and cell["type1"]["agreement"]["both_graded"] >= 1
    assert "Beside the multiple-choice run" in (out / "report.md").read_text(encoding="utf-8")
