"""The release as published: the dataset card's spellings, placeholder cells, missing ids,
integer answers, the five subsets from one folder or from the hub, and what `medmis run` does
with invalid rows.

The data are the synthetic files under ``fixtures/release_layout`` (see fixtures/README.md);
the hub is a fake ``datasets`` module, so nothing here touches the network.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from medmis.experiments import SUBSETS
from medmis.experiments.benchmark import DataError, build_cases, load_dataset
from medmis.experiments.benchmark._hub import HUB_REPOS
from medmis.experiments.cli import main

ROOT = Path(__file__).resolve().parents[1]
RELEASE = ROOT / "fixtures" / "release_layout"
HLE = RELEASE / "data" / "medmishle.jsonl"
PATIENT = "Patient Self-Diagnosis / Belief / Claim"
AUTHORITY = "Authority (Guideline / Discharge Note / SOP)"


def rows_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


def records_of(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "records.jsonl").read_text("utf-8").splitlines()]


def run_args(data: Path | str, out: Path, *extra: str, answer_key: Path = RELEASE) -> list[str]:
    return ["run", "--data", str(data), "--model", "mock/examinee",
            "--model-option", f"answer_key={answer_key}", "--defender", "none",
            "--out", str(out), "--no-progress", *extra]  # fmt: skip


# --------------------------------------------------------------------------- one card-spelled file


def test_card_spelled_file_loads_with_its_quirks() -> None:
    raw = rows_of(HLE)
    assert isinstance(raw[0]["answer"], int) and "id" not in raw[1]  # what the file holds
    ds = load_dataset(HLE)
    assert [it.id for it in ds] == ["0001", "MEDMISHLE-1", "0003"]  # 0-based row index
    assert ds.ids_assigned == 1
    first, second, third = ds.items
    assert {it.subset for it in ds} == {"MEDMISHLE"}
    assert (first.gold, second.gold, third.gold) == ("2", "3", "1")  # from integers
    # '"' and null option cells are absent options, and so are their sentences
    assert list(first.options) == ["1", "2", "3", "4"] and list(first.contexts) == ["1", "2", "3", "4"]
    assert list(third.options) == ["1", "2", "3", "4"]
    assert (first.provenance, third.provenance) == (AUTHORITY, PATIENT)
    # the wrong option without a sentence stays an option, with a warning
    assert list(third.contexts) == ["1", "2", "3"]
    (warning,) = ds.warnings
    assert (warning.line, warning.item_id, warning.field, warning.severity) == (
        3, "0003", "injectd", "warning")


def test_wrong_option_without_sentence_is_never_a_type1_target() -> None:
    third = load_dataset(HLE).items[2]
    targets = {c.target for s in range(40) for c in build_cases([third], ["type1"], seed=s)}
    assert targets == {"2", "3"}
    every = build_cases([third], ["type1"], type1_targets="all")
    assert [c.target for c in every] == ["2", "3"]
    (type2,) = build_cases([third], ["type2"])
    assert [(c.option, c.truthful) for c in type2.context] == [("1", True), ("2", False), ("3", False)]


def test_validate_reports_warning_with_count_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "validate", str(HLE)]) == 0
    captured = capsys.readouterr()
    warnings = [line for line in captured.err.splitlines() if line.startswith("WARNING ")]
    assert len(warnings) == 1 and ":3: id=0003: injectd:" in warnings[0]
    assert "WARNING: 1 warning(s) in 1 loaded row(s)" in captured.err
    assert "OK: 3 valid item(s), 1 warning(s)" in captured.out
    assert "1 row(s) without an id" in captured.out


def test_card_spelled_file_runs_through_medmis_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert main(run_args(HLE, out, "--type1-targets", "all", answer_key=HLE)) == 0
    records = records_of(out)
    assert {r["item_id"] for r in records} == {"0001", "MEDMISHLE-1", "0003"}
    assert {r["subset"] for r in records} == {"MEDMISHLE"}
    assert all(r["error"] is None and r["choice"] is not None for r in records)
    third = sorted(r["target"] for r in records if r["item_id"] == "0003" and r["protocol"] == "type1")
    assert third == ["2", "3"]
    assert {r["provenance"] for r in records} == {AUTHORITY, PATIENT, "Neutral False Statement"}
    traces = [json.loads(x) for p in (out / "traces").glob("*.jsonl") for x in p.read_text().splitlines()]
    (t2,) = [t for t in traces if t["item_id"] == "0003" and t["protocol"] == "type2"]
    assert [c["option"] for c in t2["context"]] == ["1", "2", "3"]
    assert t2["subset"] == "MEDMISHLE"
    assert not (out / "invalid_rows.txt").exists()


# --------------------------------------------------------------------------- five subsets, one folder


def test_five_subsets_load_together_from_one_folder() -> None:
    ds = load_dataset(RELEASE)
    assert [s for s in SUBSETS if any(it.subset == s for it in ds)] == list(SUBSETS)
    assert len(ds) == 14 and len({it.key for it in ds}) == 14
    # the same released id in five files is five items
    assert {it.key for it in ds if it.id == "0001"} == {f"{s}/0001" for s in SUBSETS}
    journey = [it for it in ds if it.subset == "MEDMISJOURNEY"]
    assert {it.language for it in journey} == {"zh"}
    assert all(it.keys[0] == "1" for it in journey)
    qa2 = next(it for it in ds if it.key == "MEDMISQA/0002")
    assert list(qa2.options) == ["A", "B", "C", "D"]  # "nan" in ope is no option E
    assert load_dataset(RELEASE, subset="MEDMISJOURNEY").items == journey


def test_duplicate_only_within_one_subset(tmp_path: Path) -> None:
    shutil.copytree(RELEASE, tmp_path / "release")
    extra = tmp_path / "release" / "data" / "MEDMISQA" / "part-2.jsonl"
    extra.parent.mkdir()
    extra.write_text(json.dumps(rows_of(RELEASE / "data" / "medmisqa.jsonl")[0]) + "\n", "utf-8")
    with pytest.raises(DataError) as info:
        load_dataset(tmp_path / "release")
    (issue,) = info.value.issues
    assert (issue.item_id, issue.field) == ("0001", "id")
    # files are read in path order, so the copy in MEDMISQA/ is met first
    assert issue.file.endswith("medmisqa.jsonl") and issue.line == 1
    assert "duplicate id in MEDMISQA" in issue.message and "part-2.jsonl:1" in issue.message


def test_five_subsets_run_together_and_resume(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main(run_args(RELEASE, out, "--protocol", "clean,type1")) == 0
    records = records_of(out)
    keys = {(r["subset"], r["item_id"], r["protocol"]) for r in records}
    assert len(keys) == len(records) == 28
    assert {r["subset"] for r in records if r["item_id"] == "0001"} == set(SUBSETS)
    capsys.readouterr()
    assert main(run_args(RELEASE, out, "--protocol", "clean,type1")) == 0
    assert capsys.readouterr().out.startswith("0 new records, 28 in total")


# --------------------------------------------------------------------------- --on-invalid


def broken_copy(tmp_path: Path) -> Path:
    rows = rows_of(HLE)
    rows.append({**rows[0], "id": "0009", "answer": 7})  # gold key 7 is not an option
    rows.append({**rows[0], "id": "0010", "injection_provenance": "Forum Post"})
    path = tmp_path / "medmishle.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    return path


def test_on_invalid_fail_is_one_line_exit_2_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, out = broken_copy(tmp_path), tmp_path / "run"
    assert main(run_args(data, out, answer_key=HLE)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "2 problem(s)" in err and "id=0009: answer:" in err and "id=0010:" in err
    assert "--on-invalid skip" in err
    assert not out.exists()


def test_on_invalid_skip_runs_the_valid_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data, out = broken_copy(tmp_path), tmp_path / "run"
    assert main(run_args(data, out, "--on-invalid", "skip", answer_key=HLE)) == 0
    err = capsys.readouterr().err.splitlines()
    listed = out / "invalid_rows.txt"
    assert err == [f"medmis: skipped 2 invalid row(s) (2 problem(s)); full list in {listed}"]
    lines = listed.read_text("utf-8").splitlines()
    assert [line.split(": ")[1] for line in lines] == ["id=0009", "id=0010"]
    assert {r["item_id"] for r in records_of(out)} == {"0001", "MEDMISHLE-1", "0003"}
    manifest = json.loads((out / "manifest.json").read_text("utf-8"))
    assert manifest["dataset"]["invalid_rows"] == 2 and manifest["config"]["on_invalid"] == "skip"


# --------------------------------------------------------------------------- the hub


def fake_hub(monkeypatch: pytest.MonkeyPatch, repo: str) -> list[tuple[str, str]]:
    """A ``datasets`` module serving the release folder as ``repo`` (one split per config,
    named after it, as on the dataset card), with pandas-style NaN floats in empty cells."""
    calls: list[tuple[str, str]] = []

    def load(path: str, name: str) -> dict[str, list[dict[str, Any]]]:
        calls.append((path, name))
        if path != repo:
            raise FileNotFoundError(f"Dataset '{path}' doesn't exist on the Hub")
        rows = rows_of(RELEASE / "data" / f"{name.lower()}.jsonl")
        columns = sorted({c for r in rows for c in r})
        return {name: [{c: r.get(c, math.nan) for c in columns} for r in rows]}

    module = types.ModuleType("datasets")
    module.load_dataset = load  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "datasets", module)
    return calls


@pytest.mark.parametrize("repo", HUB_REPOS)
def test_hub_all_loads_the_five_subsets(monkeypatch: pytest.MonkeyPatch, repo: str) -> None:
    calls = fake_hub(monkeypatch, repo)
    ds = load_dataset("hub:all", hub_repo=repo)
    assert calls == [(repo, s) for s in SUBSETS]
    local = load_dataset(RELEASE)
    by_key = {it.key: it for it in local}
    # NaN cells (absent columns in a pandas-built split) are absent, as in the files
    assert {it.key: it for it in ds} == by_key
    assert ds.ids_assigned == 1 and len(ds.warnings) == 1
    assert str(ds.warnings[0]).startswith("hub:all/MEDMISHLE:3: id=0003: injectd:")


def test_default_repo_and_conflicts(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = fake_hub(monkeypatch, "AI4HealthResearch/MedMisBench")
    assert len(load_dataset("hub:hle")) == 3
    assert calls == [("AI4HealthResearch/MedMisBench", "MEDMISHLE")]
    with pytest.raises(DataError, match="conflicts with hub repo"):
        load_dataset("hf://AI4HealthResearch/MedMisBench/MEDMISHLE", hub_repo="HongjianZhou/MedMisBench")
    with pytest.raises(DataError, match="only to hub: or hf://"):
        load_dataset(str(HLE), hub_repo="HongjianZhou/MedMisBench")
    with pytest.raises(DataError, match="one at a time"):
        load_dataset("hub:all", hub_repo="someone/mirror")
    with pytest.raises(DataError, match="could not load HongjianZhou/MedMisBench MEDMISQA"):
        load_dataset("hub:MEDMISQA", hub_repo="HongjianZhou/MedMisBench")
    assert len(calls) == 2  # the bad addresses never reached the hub


def test_hub_repo_flag_on_validate_and_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = "HongjianZhou/MedMisBench"
    calls = fake_hub(monkeypatch, repo)
    assert main(["data", "validate", "hub:MEDMISJOURNEY", "--hub-repo", repo]) == 0
    assert "OK: 3 valid item(s)" in capsys.readouterr().out
    out = tmp_path / "run"
    assert main(run_args("hub:all", out, "--hub-repo", repo, "--protocol", "clean")) == 0
    assert len(records_of(out)) == 14
    assert json.loads((out / "manifest.json").read_text("utf-8"))["dataset"]["hub_repo"] == repo
    assert {c[0] for c in calls} == {repo}
    # the default repository is another name, which this fake does not serve
    assert main(["data", "validate", "hub:MEDMISJOURNEY"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_ablation_config_hub_repo(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    repo = "HongjianZhou/MedMisBench"
    calls = fake_hub(monkeypatch, repo)
    config = tmp_path / "ablation.toml"
    config.write_text(f"""
name = "hub"
data = "hub:MEDMISHLE"
hub_repo = "{repo}"
out = "{(tmp_path / 'out').as_posix()}"

[[models]]
spec = "mock/examinee"

[[defenders]]
name = "none"
""", "utf-8")
    assert main(["ablate", str(config), "--dry-run"]) == 0
    assert "3 items" in capsys.readouterr().out
    assert calls == [(repo, "MEDMISHLE")]
