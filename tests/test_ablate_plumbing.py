"""Ablation plumbing (issue 32, item 8): the data is loaded once per ablation, each run folder's
cases are planned once and handed to its harness, and every folder is finished (report,
outcome) by the one function ``medmis run`` and the Python API use."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import medmis.experiments.benchmark as benchmark
from medmis.experiments.ablation import load_config
from medmis.experiments.ablation._folders import plan_grid
from medmis.experiments.cli import main
from medmis.experiments.harness import Harness

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "fixtures" / "medmisbench_sample.jsonl"


def grid(tmp_path: Path) -> Path:
    """A grid of four run folders: the main run, the shuffled Type 2 pass, two stability re-runs."""
    path = tmp_path / "grid.toml"
    path.write_text(f"""
name = "plumbing"
data = "{SAMPLE.as_posix()}"
limit = 3
seed = 0
out = "{(tmp_path / 'out').as_posix()}"

[delivery]
type2_shuffled = true

[simulation]
stability_seeds = 3

[[models]]
spec = "mock/examinee"

[[defenders]]
name = "none"
""", encoding="utf-8")
    return path


class Spy:
    def __init__(self, real: Any) -> None:
        self.real, self.calls = real, 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self.real(*args, **kwargs)


def test_an_ablation_loads_its_data_once_and_plans_each_folder_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loads = Spy(benchmark.load_dataset)
    plans = Spy(benchmark.plan_cases)
    monkeypatch.setattr(benchmark, "load_dataset", loads)
    # the harness plans with the name it imported; a folder handed its plan never calls it
    monkeypatch.setattr("medmis.experiments.harness._runner.plan_cases", plans)
    config = grid(tmp_path)
    assert main(["ablate", str(config), "--no-progress"]) == 0
    out = tmp_path / "out"
    assert (out / "type2_shuffled" / "records.jsonl").exists()
    assert len(list((out / "stability").glob("seed-*/records.jsonl"))) == 2
    assert loads.calls == 1  # four run folders, one load
    assert plans.calls == 0
    # and the run again: nothing to do, still one load
    assert main(["ablate", str(config), "--no-progress"]) == 0
    assert loads.calls == 2


def test_the_plan_handed_on_is_the_plan_the_harness_would_make(tmp_path: Path) -> None:
    from medmis.experiments.ablation._ablate import _run_config

    config = load_config(str(grid(tmp_path)))
    dataset = benchmark.load_dataset(str(SAMPLE), limit=3)
    for plan in plan_grid(config, dataset.items, tmp_path / "out"):
        cfg = _run_config(config, plan.run.folder, progress=False, **plan.run.how())
        assert plan.planned == Harness(cfg).plan_cases(dataset), plan.run.label()
        assert [c.key for c in plan.cases] == [
            c.key for c in benchmark.build_cases(dataset.items, cfg.protocols, seed=cfg.seed,
                                                 type1_targets=cfg.type1_targets, shuffle_type2=cfg.shuffle_type2,
                                                 prompt=cfg.prompt)]


def test_every_folder_is_finished_by_finish_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import medmis.experiments.reporting as reporting

    finished: list[tuple[str, dict[str, Any]]] = []
    real = reporting.finish_run

    def spy(result: Any, **kwargs: Any) -> Any:
        finished.append((result.out.name, kwargs))
        return real(result, **kwargs)

    monkeypatch.setattr(reporting, "finish_run", spy)
    assert main(["ablate", str(grid(tmp_path)), "--no-progress"]) == 0
    names = [n for n, _ in finished]
    assert names[-1] == "out" and sorted(names) == ["out", "seed-1", "seed-2", "type2_shuffled"]
    assert {n: (k["report"], k["figures"]) for n, k in finished} == {
        "out": (True, True), "type2_shuffled": (True, False), "seed-1": (False, False), "seed-2": (False, False)}
    # `medmis run` and the API finish through it too
    finished.clear()
    run = ["run", "--data", str(SAMPLE), "--limit", "2", "--model", "mock/examinee", "--defender", "none",
           "--out", str(tmp_path / "single"), "--no-progress"]
    assert main(run) == 0
    assert [n for n, _ in finished] == ["single"]
    from medmis.experiments import DefenderConfig, RunConfig
    from medmis.experiments import run as api_run

    finished.clear()
    api_run(RunConfig(data=str(SAMPLE), limit=2, models=["mock/examinee"], defenders=[DefenderConfig(name="none")],
                      out=str(tmp_path / "api"), progress=False))
    assert [n for n, _ in finished] == ["api"]
