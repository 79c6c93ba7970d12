"""Records outside a run folder's plan (issue 22, item 3): a line for an item not in the data,
a target never sampled, a model or defender the folder never ran is named in one warning line
and left out of the metrics, the outcome and comparisons, in every reader."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from medmis.experiments.cli import main

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "fixtures" / "medmisbench_sample.jsonl"


def run_args(out: Path, *extra: str) -> list[str]:
    return ["run", "--data", str(SAMPLE), "--limit", "3", "--model", "mock/examinee", "--defender", "none",
            "--out", str(out), "--no-progress", *extra]


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run of ``run_args``, run once for the module; tests take copies (``shutil.copytree``
    of it: the folder ``main(run_args(out))`` would have left)."""
    out = tmp_path_factory.mktemp("plan") / "run"
    assert main(run_args(out)) == 0
    return out


def append_foreign(out: Path, **change: object) -> dict:
    """Append a copy of the folder's first clean record with ``change`` applied (an error
    record: it would also make the outcome "finished with case errors" if it counted)."""
    lines = (out / "records.jsonl").read_text(encoding="utf-8").splitlines()
    record = next(json.loads(x) for x in lines if json.loads(x)["protocol"] == "clean")
    record.update({"error": "TransientModelError: from elsewhere", "choice": None, "correct": None, **change})
    with (out / "records.jsonl").open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")
    return record


def warning_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if "outside the run's plan" in line]


def clean_n(out: Path) -> int:
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    return int(metrics["mock/examinee"]["none"]["clean_acc"]["n"])


@pytest.mark.parametrize("change", [
    {"item_id": "not-in-the-data"},
    {"model": "mock/oracle"},
    {"defender": "warning"},
])
def test_report_leaves_out_records_outside_the_plan_and_names_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict, finished: Path
) -> None:
    out = shutil.copytree(finished, tmp_path / "run")
    assert clean_n(out) == 3
    append_foreign(out, **change)
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    (line,) = warning_lines(capsys.readouterr().err)
    assert "1 record(s)" in line and str(next(iter(change.values()))) in line
    assert clean_n(out) == 3  # the planned item count, not 4
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics) == {"mock/examinee"} and set(metrics["mock/examinee"]) == {"none"}
    assert metrics["mock/examinee"]["none"]["error_rate"]["k"] == 0


def test_a_resume_names_them_and_the_outcome_ignores_them(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          finished: Path) -> None:
    out = shutil.copytree(finished, tmp_path / "run")
    append_foreign(out, item_id="not-in-the-data")
    append_foreign(out, item_id="also-not", subset="ELSEWHERE")
    capsys.readouterr()
    assert main(run_args(out)) == 0  # the foreign error records are no case errors of this run
    captured = capsys.readouterr()
    (line,) = warning_lines(captured.err)
    assert "2 record(s)" in line and "not-in-the-data" in line
    assert "nothing to do: 9 records complete" in captured.out
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["outcome"]["exit_code"] == 0 and manifest["outcome"]["case_errors"] == 0
    assert clean_n(out) == 3
    # a new report after more cases ran: still the plan's items only
    args = run_args(out)
    args[args.index("--defender") + 1] = "none,warning"
    assert main(args) == 0
    assert clean_n(out) == 3


def test_ablate_leaves_them_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "grid.toml"
    config.write_text(f"""
name = "plan"
data = "{SAMPLE.as_posix()}"
limit = 3
out = "{(tmp_path / 'out').as_posix()}"
[[models]]
spec = "mock/examinee"
[[defenders]]
name = "none"
""")
    out = tmp_path / "out"
    assert main(["ablate", str(config), "--no-progress"]) == 0
    append_foreign(out, item_id="not-in-the-data")
    capsys.readouterr()
    assert main(["ablate", str(config), "--no-progress"]) == 0  # nothing to do, no case errors
    captured = capsys.readouterr()
    assert len(warning_lines(captured.err)) == 1
    assert "nothing to do: 9 records complete" in captured.out
    # with a defender added, the grid runs and writes its report from the plan's records only
    config.write_text(config.read_text() + '[[defenders]]\nname = "warning"\n')
    assert main(["ablate", str(config), "--no-progress"]) == 0
    assert len(warning_lines(capsys.readouterr().err)) == 1
    assert clean_n(out) == 3


def test_compare_leaves_them_out(tmp_path: Path, capsys: pytest.CaptureFixture[str], finished: Path) -> None:
    a, b = shutil.copytree(finished, tmp_path / "a"), shutil.copytree(finished, tmp_path / "b")
    for run in (a, b):  # the same foreign line in both: it would be matched and paired
        append_foreign(run, item_id="not-in-the-data", error=None, choice="A", correct=True)
    capsys.readouterr()
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "cmp")]) == 0
    captured = capsys.readouterr()
    assert len(warning_lines(captured.err)) == 2
    # a simulated run's compare.csv opens with a '#' line saying so
    rows = [r for r in (tmp_path / "cmp" / "compare.csv").read_text().splitlines() if not r.startswith("#")]
    header = rows[0].split(",")
    clean = next(r.split(",") for r in rows[1:] if "clean" in r)
    assert clean[header.index("n")] == "3"


def test_a_folder_without_a_plan_is_read_as_it_is(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  finished: Path) -> None:
    out = shutil.copytree(finished, tmp_path / "run")
    (out / "plan.json").unlink()  # as written before plans existed
    append_foreign(out, item_id="not-in-the-data", error=None, choice="A", correct=True)
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    assert not warning_lines(capsys.readouterr().err)
    assert clean_n(out) == 4
