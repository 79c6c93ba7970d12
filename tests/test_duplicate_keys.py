"""A data row that names a key twice is rejected naming the key (JSON would keep the last)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medmis.experiments.benchmark import DataError, load_dataset
from medmis.experiments.cli import main

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "fixtures" / "medmisbench_sample.jsonl"


def rows_with_a_second_answer(n: int = 3) -> tuple[list[str], str]:
    """JSON lines of the sample, the second one naming ``answer`` twice (gold, then another)."""
    lines = SAMPLE.read_text(encoding="utf-8").splitlines()[:n]
    row = json.loads(lines[1])
    other = next(k for k in "ABCD" if k != row["answer"])
    lines[1] = lines[1].rstrip()[:-1] + f', "answer": "{other}"}}'
    return lines, str(row["id"])


def test_a_jsonl_row_with_a_duplicate_key_is_rejected_naming_it(tmp_path: Path) -> None:
    lines, item_id = rows_with_a_second_answer()
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(DataError) as info:
        load_dataset(path)
    (issue,) = info.value.issues
    assert (issue.line, issue.field, issue.item_id) == (2, "answer", item_id)
    assert "duplicate key 'answer'" in issue.message
    # skip mode runs the other rows, never the row with two answers
    kept = load_dataset(path, mode="skip")
    assert len(kept) == 2 and item_id not in {i.id for i in kept.items}


def test_a_json_list_row_with_a_duplicate_key_is_rejected_and_the_rest_read(tmp_path: Path) -> None:
    lines, _ = rows_with_a_second_answer()
    path = tmp_path / "rows.json"
    path.write_text("[\n" + ",\n".join(lines) + "\n]\n", encoding="utf-8")
    with pytest.raises(DataError) as info:
        load_dataset(path)
    (issue,) = info.value.issues
    assert issue.line == 3 and issue.field == "answer"
    assert len(load_dataset(path, mode="skip")) == 2


def test_a_csv_header_naming_a_column_twice_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "rows.csv"
    path.write_text("id,question,opa,opb,answer,answer\n1,Q?,x,y,A,B\n", encoding="utf-8")
    with pytest.raises(DataError, match="duplicate column 'answer'"):
        load_dataset(path)


def test_run_and_validate_name_the_key_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines, _ = rows_with_a_second_answer()
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main(["data", "validate", str(path)]) != 0
    shown = capsys.readouterr()
    assert "duplicate key 'answer'" in shown.out + shown.err
    out = tmp_path / "run"
    code = main(["run", "--data", str(path), "--model", "mock/examinee", "--defender", "none",
                 "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "duplicate key 'answer'" in err and "Traceback" not in err
    assert not out.exists()
