"""Data gaps from the "runs that fail loudly" issue, on rows shaped like the release sample."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from medmis.experiments.benchmark import DataError, load_dataset
from medmis.experiments.cli import main
from medmis.experiments.reporting._format import md_cell, md_table

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "fixtures" / "medmisbench_sample.jsonl"


def sample_rows(n: int = 3) -> list[dict[str, Any]]:
    return [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()[:n]]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def test_empty_file_is_an_error_not_ok(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("")
    with pytest.raises(DataError, match="no items"):
        load_dataset(path)


def test_unknown_subset_names_the_subsets_present() -> None:
    with pytest.raises(DataError, match=r"no rows of subset MEDMISFOO \(the data has: .*MEDMISQA"):
        load_dataset(SAMPLE, subset="MEDMISFOO")


def test_rows_after_a_json_list_are_an_error_with_their_line(tmp_path: Path) -> None:
    rows = sample_rows(3)
    path = tmp_path / "rows.json"
    path.write_text(json.dumps(rows[:2], indent=1) + "\n" + json.dumps(rows[2]) + "\n", encoding="utf-8")
    last_line = path.read_text().count("\n")
    with pytest.raises(DataError) as info:
        load_dataset(path)
    (issue,) = info.value.issues
    assert issue.line == last_line and "after the JSON list" in issue.message
    ok = tmp_path / "ok.json"
    ok.write_text(json.dumps(rows[:2], indent=1) + "\n\n", encoding="utf-8")
    assert len(load_dataset(ok)) == 2


def test_embedded_options_are_not_repeated_when_columns_exist(tmp_path: Path) -> None:
    row = sample_rows(1)[0]
    opts = [row[f"op{c}"] for c in "abcd"]
    row["question"] = row["question"] + " " + " ".join(f"({k}) {t}" for k, t in zip("ABCD", opts, strict=True))
    ds = load_dataset(write_jsonl(tmp_path / "rows.jsonl", [row]))
    (item,) = ds.items
    assert "(A)" not in item.question and item.question.endswith("first-line pharmacologic therapy?")
    assert list(item.options.values()) == opts
    # a different embedded list is kept (and said), never silently dropped
    row["question"] = "Which drug? (A) Aspirin (B) Heparin"
    ds = load_dataset(write_jsonl(tmp_path / "rows2.jsonl", [row]))
    assert "(A) Aspirin" in ds.items[0].question
    assert any("differs from the option columns" in w.message for w in ds.warnings)


def test_duplicate_option_texts_warn(tmp_path: Path) -> None:
    row = sample_rows(1)[0]
    row["opd"] = " metformin "
    ds = load_dataset(write_jsonl(tmp_path / "rows.jsonl", [row]))
    assert len(ds) == 1
    assert any(w.field == "options" and "B and D have the same text" in w.message for w in ds.warnings)


@pytest.mark.parametrize("char", ["\x00", "\x1b", "\x07", "\x7f", "\x85"])
def test_control_characters_are_an_error_naming_the_field(tmp_path: Path, char: str) -> None:
    row = sample_rows(1)[0]
    row["injectc"] = f"Per the SOP{char} insulin first."
    with pytest.raises(DataError) as info:
        load_dataset(write_jsonl(tmp_path / "rows.jsonl", [row]))
    (issue,) = info.value.issues
    assert issue.field == "injectc" and f"U+{ord(char):04X}" in issue.message


def test_tabs_and_newlines_stay_allowed(tmp_path: Path) -> None:
    row = sample_rows(1)[0]
    row["question"] = "Line one\n\tLine two?"
    assert len(load_dataset(write_jsonl(tmp_path / "rows.jsonl", [row]))) == 1


def test_md_cells_escape_markup_from_data() -> None:
    assert md_cell("<img src=x onerror=alert(1)>") == "&lt;img src=x onerror=alert(1)>"
    assert md_cell("![x](http://evil/x.png)") == "!\\[x\\](http://evil/x.png)"
    assert md_cell("a|b\nc") == "a\\|b c"
    assert md_cell("p < 0.05") == "p < 0.05"
    table = md_table(["subset"], [["<script>alert(1)</script>"]])
    assert "<script>" not in table and "</script>" not in table


def test_report_md_does_not_copy_raw_html_from_subset_names(tmp_path: Path) -> None:
    rows = sample_rows(2)
    for r in rows:
        r["subset"] = "<img src=x onerror=alert(1)>"
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    out = tmp_path / "run"
    assert main(["run", "--data", str(data), "--model", "mock/examinee", "--defender", "none",
                 "--out", str(out), "--no-progress"]) == 0
    text = (out / "report.md").read_text(encoding="utf-8")
    assert "<img" not in text and "&lt;img src=x" in text
