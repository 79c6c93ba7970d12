"""``metrics.csv`` and ``medmis export parquet``'s metrics table are one table: the same rows,
in the same order, with the whole run as stratum ``all/all`` in both (the Parquet file once
wrote NULL there)."""

from __future__ import annotations

import csv
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from medmis.experiments.cli import main

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "fixtures" / "medmisbench_sample.jsonl"


def _metrics_parquet(dataset: Path) -> list[Path]:
    """The metrics config's files, as the dataset card names them (whatever the layout)."""
    text = (dataset / "README.md").read_text(encoding="utf-8")
    header = yaml.safe_load(text[4:text.index("\n---\n", 4)])
    (config,) = [c for c in header["configs"] if c["config_name"] == "metrics"]
    files = [f for spec in config["data_files"] for f in
             ([spec["path"]] if isinstance(spec["path"], str) else spec["path"])]
    return sorted(p for f in files for p in dataset.glob(f))


def test_metrics_parquet_agrees_with_metrics_csv_row_for_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "run"
    assert main(["run", "--data", str(SAMPLE), "--limit", "4", "--model", "mock/examinee",
                 "--defender", "none,warning", "--out", str(run), "--no-progress"]) == 0
    assert main(["export", "parquet", str(run), "--out", str(tmp_path / "dataset")]) == 0
    with (run / "metrics.csv").open(encoding="utf-8", newline="") as fh:
        from_csv = list(csv.DictReader(fh))
    (path,) = _metrics_parquet(tmp_path / "dataset")
    from_parquet = [{k: "" if v is None else str(v) for k, v in row.items()}
                    for row in pq.read_table(path).to_pylist()]
    assert from_csv and from_parquet == from_csv
    overall = [r for r in from_parquet if r["stratum_kind"] == "all"]
    assert overall and all(r["stratum"] == "all" for r in overall)
    assert not [r for r in from_parquet if not r["stratum_kind"] or not r["stratum"]]
