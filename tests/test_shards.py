"""Shards (``--shard K/N|auto``) and ``medmis merge``: the partition by item, the scheduler
variables, the refusals, and a merged run whose metrics.json and verdict.json are byte for byte
a single run's."""

from __future__ import annotations

import json
import shutil
import types
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from medmis.experiments import DefenderConfig, RunConfig, run
from medmis.experiments.analysis import clustered_proportion
from medmis.experiments.benchmark import build_cases, load_dataset, plan_cases
from medmis.experiments.cli import main
from medmis.experiments.reporting import write_report
from medmis.experiments.shards import Shard, shard_of
from medmis.tools import ConfigError, RecordStore

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "fixtures" / "medmisbench_sample.jsonl"
RUN = ["run", "--data", str(DATA), "--limit", "6", "--model", "mock/examinee", "--defender",
       "none,search_agent", "--no-progress"]


@pytest.fixture(scope="module")
def fixed_clock() -> Iterator[None]:
    """Every case's latency 0: latency is a wall-clock measurement of one execution (two runs
    on one machine differ in it too), the only figure of metrics.json that is not a function of
    the answers; with it fixed, the merged files can be compared byte for byte."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("medmis.experiments.harness._runner.time", types.SimpleNamespace(perf_counter=lambda: 0.0))
        yield


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


# -- the partition -----------------------------------------------------------------------------

def test_shard_of_is_sha256_of_the_item_key_mod_n() -> None:
    import hashlib

    key = "MEDMISHLE/item-7"
    assert shard_of(key, 5) == int(hashlib.sha256(key.encode()).hexdigest(), 16) % 5
    assert Shard(index=shard_of(key, 5), count=5).holds(key)


def test_every_case_of_an_item_lands_in_one_shard() -> None:
    items = load_dataset(str(DATA)).items
    full = plan_cases(items, type1_targets="all")
    parts = [plan_cases(items, type1_targets="all", shard=Shard(index=k, count=3)) for k in range(3)]
    assert sorted(c for part in parts for c in part) == sorted(full)  # a partition: nothing lost, nothing twice
    owners: dict[int, set[int]] = {}
    for k, part in enumerate(parts):
        for i, _, _ in part:
            owners.setdefault(i, set()).add(k)
    assert all(len(ks) == 1 for ks in owners.values()) and len(owners) == len(items)
    # build_cases chooses the same items (the ablation's path)
    built = build_cases(items, type1_targets="all", shard=Shard(index=1, count=3))
    assert sorted(c.key for c in built) == sorted((items[i].key, p, t) for i, p, t in parts[1])


@pytest.mark.parametrize(("text", "env", "want"), [
    ("2/4", {}, (2, 4)),
    ("auto", {"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_COUNT": "4"}, (2, 4)),
    ("auto", {"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "2"}, (0, 2)),
    ("auto/3", {"JOB_COMPLETION_INDEX": "1"}, (1, 3)),
    ("auto", {"JOB_COMPLETION_INDEX": "2", "JOB_COMPLETIONS": "5"}, (2, 5)),
    ("auto", {"NEL_SHARD_IDX": "0", "NEL_TOTAL_SHARDS": "8"}, (0, 8)),
])
def test_shard_parse(text: str, env: dict[str, str], want: tuple[int, int]) -> None:
    shard = Shard.parse(text, env)
    assert (shard.index, shard.count) == want
    assert shard.to_json() == {"index": want[0], "count": want[1]}


@pytest.mark.parametrize(("text", "env", "says"), [
    ("auto", {}, "SLURM_ARRAY_TASK_ID"),
    ("auto", {"JOB_COMPLETION_INDEX": "1"}, "JOB_COMPLETIONS is not set"),
    ("auto/3", {"NEL_SHARD_IDX": "0", "NEL_TOTAL_SHARDS": "4"}, "not 3"),
    ("4/4", {}, "0-based"),
    ("1", {}, "expected K/N"),
    ("a/4", {}, "not a whole number"),
    ("auto", {"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_COUNT": "4"}, "not one of 0..3"),
])
def test_shard_parse_refuses(text: str, env: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        Shard.parse(text, env)


def test_design_effect_does_not_depend_on_the_cluster_order() -> None:
    """Merged shards list the items in another order than a single run: the clustered interval
    must be the same float (it was not: the residuals were summed in the clusters' order)."""
    rng = np.random.default_rng(3)
    for _ in range(50):
        clusters = np.repeat(np.arange(40), rng.integers(1, 6, 40))
        outcomes = rng.integers(0, 2, len(clusters))
        order = rng.permutation(len(clusters))  # the units, and so the clusters' first appearances, reordered
        a = clustered_proportion(list(outcomes), list(clusters))
        b = clustered_proportion(list(outcomes[order]), list(clusters[order]))
        assert (a.deff, a.lo, a.hi) == (b.deff, b.lo, b.hi)


# -- run, resume, merge --------------------------------------------------------------------------

def _run(out: Path, shard: Shard | None = None) -> None:
    """One run of RUN's cases through the Python API, without its report (the merge writes
    the merged folder's; a shard's own is not needed here)."""
    cfg = RunConfig(data=str(DATA), limit=6, models=["mock/examinee"],
                    defenders=[DefenderConfig(name="none"), DefenderConfig(name="search_agent")],
                    out=str(out), cache="record", progress=False, write_report=False, shard=shard)
    assert run(cfg).outcome.code == 0  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def shard_runs(tmp_path_factory: pytest.TempPathFactory, fixed_clock: None) -> tuple[Path, list[Path]]:
    """A single run and its 4 shards (6 items, a plain and a web-searching defender, recording
    their calls in each folder's own store). Tests that change a folder copy it."""
    root = tmp_path_factory.mktemp("shard_runs")
    single = root / "single"
    _run(single)
    write_report(single, figures=False)  # metrics.json and verdict.json do not depend on the plots
    shards = [root / f"shard{k}" for k in range(4)]
    for k, folder in enumerate(shards):
        _run(folder, Shard(index=k, count=4))
        assert json.loads((folder / "manifest.json").read_text())["shard"] == {"index": k, "count": 4}
    return single, shards


def _copies(folders: list[Path], where: Path) -> list[Path]:
    return [Path(shutil.copytree(f, where / f.name)) for f in folders]


def test_merged_shards_equal_the_single_run(shard_runs: tuple[Path, list[Path]], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    single, shards = shard_runs
    counts = [len((s / "records.jsonl").read_text().splitlines()) for s in shards]
    assert all(counts) and sum(counts) == len((single / "records.jsonl").read_text().splitlines())
    merged = tmp_path / "merged"
    assert main(["merge", *map(str, reversed(shards)), "--out", str(merged)]) == 0  # any order
    for name in ("metrics.json", "verdict.json"):
        assert (merged / name).read_bytes() == (single / name).read_bytes(), name
    manifest = json.loads((merged / "manifest.json").read_text())
    assert "shard" not in manifest and manifest["merged"]["shards"] == 4 and "--shard" not in manifest["command"]
    assert manifest["cases_per_model_defender"] == json.loads(
        (single / "manifest.json").read_text())["cases_per_model_defender"]
    # the stores merged: a replay of the whole run from the merged store sends nothing anew
    with RecordStore(merged / "cache", "replay") as store, RecordStore(single / "cache", "replay") as one:
        assert store.stats()["entries"] == one.stats()["entries"] and store.stats()["total_entries"] > 0


def test_merge_refuses_missing_foreign_duplicate_incomplete(shard_runs: tuple[Path, list[Path]], tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    single, shards = shard_runs
    shards = _copies(shards, tmp_path)
    out = tmp_path / "deep" / "merged"
    capsys.readouterr()
    assert main(["merge", *map(str, shards[:3]), "--out", str(out)]) == 3
    assert "missing shard(s) 3/4" in _one_line(capsys)
    assert main(["merge", *map(str, shards), str(shards[1]), "--out", str(out)]) == 2
    assert "both shard 1/4" in _one_line(capsys)
    assert main(["merge", *map(str, shards[:3]), str(single), "--out", str(out)]) == 2
    assert "not a shard folder" in _one_line(capsys)
    # a shard of another run: the seed differs (named by the fingerprint's comparison)
    other = tmp_path / "other3"
    assert main([*RUN, "--out", str(other), "--shard", "3/4", "--seed", "7"]) == 0
    capsys.readouterr()
    assert main(["merge", *map(str, shards[:3]), str(other), "--out", str(out)]) == 2
    line = _one_line(capsys)
    assert str(other) in line and "seed: 0 -> 7" in line
    # a shard that stopped early
    manifest = json.loads((shards[2] / "manifest.json").read_text())
    (shards[2] / "manifest.json").write_text(json.dumps({**manifest, "stopped": "interrupted"}))
    assert main(["merge", *map(str, shards), "--out", str(out)]) == 3
    assert "shard 2/4 has not finished (interrupted)" in _one_line(capsys)
    assert not (tmp_path / "deep").exists()  # nothing created by any refusal


def test_merge_refuses_conflicting_recordings(shard_runs: tuple[Path, list[Path]], tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    shards = _copies(shard_runs[1], tmp_path)
    with RecordStore(shards[0] / "cache", "replay") as first:
        entry = next(e for e in first.entries(None) if e.kind == "model")
    changed = {**entry.value, "__merge_test": "another answer"}
    with RecordStore(shards[1] / "cache", "record") as second:
        second.put(entry.kind, entry.key, changed)
    out = tmp_path / "merged"
    capsys.readouterr()
    assert main(["merge", *map(str, shards), "--out", str(out)]) == 2
    assert "different value" in _one_line(capsys)
    assert not out.exists() and not list(tmp_path.glob(".merged.*"))


def test_resume_into_another_shards_folder_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "s1"
    args = ["run", "--data", str(DATA), "--limit", "4", "--model", "mock/examinee", "--defender", "none",
            "--no-progress", "--out", str(folder)]
    assert main([*args, "--shard", "1/2"]) == 0
    before = (folder / "records.jsonl").read_bytes()
    capsys.readouterr()
    assert main([*args, "--shard", "0/2"]) == 2
    assert "holds shard 1/2, not --shard 0/2" in _one_line(capsys)
    assert main(args) == 2
    assert "not a whole run" in _one_line(capsys)
    assert (folder / "records.jsonl").read_bytes() == before
    assert main([*args, "--shard", "1/2"]) == 0  # its own shard resumes: nothing to do


def test_shard_auto_without_variables_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SLURM_ARRAY_TASK_ID", "JOB_COMPLETION_INDEX", "NEL_SHARD_IDX"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(SystemExit) as stop:
        main([*RUN, "--out", str(tmp_path / "x"), "--shard", "auto"])
    assert stop.value.code == 2
    assert "NEL_SHARD_IDX" in _one_line(capsys)
    assert not (tmp_path / "x").exists()
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "1")
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "3")
    assert main(["run", "--data", str(DATA), "--limit", "3", "--model", "mock/examinee", "--defender", "none",
                 "--no-progress", "--out", str(tmp_path / "x"), "--shard", "auto"]) == 0
    assert json.loads((tmp_path / "x" / "manifest.json").read_text())["shard"] == {"index": 1, "count": 3}


def test_merged_grid_equals_the_single_grid(tmp_path: Path, fixed_clock: None) -> None:
    """The demo config reduced for time (``--limit 3``, defenders none and warning, two
    examinee seeds): its grid is a main run, the shuffled Type 2 pass and a stability re-run, as
    the full demo's; 2 shards of it merged (``merge_grids``) give the single grid's files."""
    config = str(ROOT / "experiments" / "configs" / "demo.toml")
    args = ["ablate", config, "--limit", "3", "--no-progress", "--set", 'defenders=[{name="none"},{name="warning"}]',
            "--set", "simulation.stability_seeds=2"]
    assert main([*args, "--out", str(tmp_path / "single")]) == 0
    grids = [tmp_path / f"shard{k}" for k in range(2)]
    for k, grid in enumerate(grids):
        assert main([*args, "--out", str(grid), "--shard", f"{k}/2"]) == 0
    assert main(["merge", *map(str, grids), "--out", str(tmp_path / "merged"), "--config", config]) == 0
    for name in ("metrics.json", "verdict.json", "stability.json", "type2_shuffled/metrics.json"):
        assert (tmp_path / "merged" / name).read_bytes() == (tmp_path / "single" / name).read_bytes(), name
    assert (tmp_path / "merged" / "stability" / "seed-1" / "records.jsonl").is_file()
    manifest = json.loads((tmp_path / "merged" / "stability" / "seed-1" / "manifest.json").read_text())
    assert manifest["config"]["cache_dir"] == str(tmp_path / "merged" / "cache")  # not shard 0's store


def test_a_shard_without_items_merges(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """More shards than items: the empty ones finish (an empty records.jsonl) and merge."""
    args = ["run", "--data", str(DATA), "--limit", "1", "--model", "mock/examinee", "--defender", "none",
            "--no-progress"]
    folders = [tmp_path / f"s{k}" for k in range(3)]
    for k, folder in enumerate(folders):
        assert main([*args, "--out", str(folder), "--shard", f"{k}/3"]) == 0
    sizes = [len((f / "records.jsonl").read_text().splitlines()) for f in folders]
    assert sorted(sizes) == [0, 0, 3]  # one item, three protocols (a sampled target)
    assert main(["merge", *map(str, folders), "--out", str(tmp_path / "merged")]) == 0
    assert len((tmp_path / "merged" / "records.jsonl").read_text().splitlines()) == 3


def test_merged_shards_of_an_epochs_run_equal_the_single_run(tmp_path: Path, fixed_clock: None) -> None:
    """``--epochs`` with ``--shard``: every epoch of an item stays in its item's shard, the
    merged plan keeps the epochs, and metrics.json / verdict.json are the single run's."""
    args = ["run", "--data", str(DATA), "--limit", "4", "--model", "mock/examinee", "--defender", "none,warning",
            "--epochs", "2", "--no-progress"]
    assert main([*args, "--out", str(tmp_path / "single")]) == 0
    folders = [tmp_path / f"s{k}" for k in range(2)]
    for k, folder in enumerate(folders):
        assert main([*args, "--out", str(folder), "--shard", f"{k}/2"]) == 0
        epochs_of: dict[str, set[int]] = {}
        for line in (folder / "records.jsonl").read_text().splitlines():
            row = json.loads(line)
            epochs_of.setdefault(row["item_id"], set()).add(row.get("epoch", 0))
        assert all(e == {0, 1} for e in epochs_of.values())
    merged = tmp_path / "merged"
    assert main(["merge", *map(str, folders), "--out", str(merged)]) == 0
    assert json.loads((merged / "plan.json").read_text())["epochs"] == 2
    for name in ("metrics.json", "verdict.json"):
        assert (merged / name).read_bytes() == (tmp_path / "single" / name).read_bytes(), name
