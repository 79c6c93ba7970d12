"""The run folders of an ablation grid, listed once: the main run, the shuffled Type 2 pass, the
stability re-runs and the poison shares. Every check that walks the grid (fingerprints, what is
left to run, the outcome of "nothing to do") walks this list, so a new kind of sub-run cannot be
left out of one of them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from medmis.defenses import create_defender
from medmis.experiments.analysis import share_dir, share_label
from medmis.experiments.benchmark import Case, Item, ProtocolName, build_cases

from ._config import AblationConfig
from ._preflight import pending_cases

STABILITY_DIR = "stability"  # as medmis.experiments.reporting._stability reads it

__all__ = ["STABILITY_DIR", "GridRun", "RunPlan", "finished_outcome", "grid_runs", "nothing_to_do", "plan_grid",
           "poison_protocols", "run_cases"]


@dataclass(frozen=True)
class GridRun:
    """One run folder of the grid and how its run differs from the main one."""

    folder: Path
    shuffled: bool = False
    examinee_seed: int | None = None
    share: float | None = None

    def how(self) -> dict[str, Any]:
        """The keyword arguments that make this run's ``RunConfig`` from the ablation's."""
        return {"shuffled": self.shuffled, "examinee_seed": self.examinee_seed, "share": self.share}

    def label(self) -> str:
        """What the run is, in a few words (the dry run's heading of its estimate)."""
        if self.shuffled:
            return "shuffled type2 pass"
        if self.examinee_seed is not None:
            return f"stability re-run, examinee seed {self.examinee_seed}"
        if self.share is not None:
            return f"share {share_label(self.share)}"
        return "main run"


def poison_protocols(config: AblationConfig) -> list[ProtocolName]:
    """A share run's protocols: Type 2 gets no poison, so only clean (ASR's pairing) and Type 1."""
    return [p for p in config.protocols if p != "type2"]


def grid_runs(config: AblationConfig, out: Path) -> list[GridRun]:
    """Every run folder of the grid under ``out``, the main one first."""
    runs = [GridRun(out)]
    if config.delivery.type2_shuffled and "type2" in config.protocols:
        runs.append(GridRun(out / "type2_shuffled", shuffled=True))
    runs += [GridRun(out / STABILITY_DIR / f"seed-{s}", examinee_seed=s) for s in config.examinee_seeds()]
    runs += [GridRun(share_dir(out, s), share=s) for s in (config.poison.shares if config.poison else [])]
    return runs


def run_cases(config: AblationConfig, items: Sequence[Any], run: GridRun) -> list[Case]:
    """The cases of one run of the grid."""
    if run.shuffled:
        return build_cases(items, ["clean", "type2"], seed=config.seed, shuffle_type2=True,
                           prompt=config.prompt, answer_format=config.answer_format, shard=config.shard)
    protocols = poison_protocols(config) if run.share is not None else config.protocols
    return build_cases(items, protocols, seed=config.seed, type1_targets=config.type1_targets,
                       prompt=config.prompt, answer_format=config.answer_format, shard=config.shard)


@dataclass(frozen=True)
class RunPlan:
    """One run folder of the grid with its cases, planned once: the estimate and the check for
    work left read ``cases``; the folder's harness runs ``planned`` (the same cases as
    ``(item index, protocol, target)``) instead of planning them again."""

    run: GridRun
    cases: list[Case]
    planned: list[tuple[int, ProtocolName, str | None]]


def plan_grid(config: AblationConfig, items: Sequence[Item], out: Path) -> list[RunPlan]:
    """The plan of every run folder of the grid under ``out`` (:func:`grid_runs`' order)."""
    index = {item.key: i for i, item in enumerate(items)}
    plans = []
    for run in grid_runs(config, out):
        cases = run_cases(config, items, run)
        plans.append(RunPlan(run, cases, [(index[c.item.key], c.protocol, c.target) for c in cases]))
    return plans


def nothing_to_do(config: AblationConfig, plans: Sequence[RunPlan]) -> bool:
    """Every case of every run of the grid is recorded already."""
    if not plans or not (plans[0].run.folder / "records.jsonl").exists():
        return False
    models = [m.name for m in config.models]
    labels = [create_defender(d.name, d.options).label for d in config.defender_configs()]
    return sum(pending_cases(plan.run.folder, models, labels, plan.cases, retry_errors=config.retry_errors,
                             epochs=config.epochs)
               for plan in plans) == 0


def finished_outcome(runs: Sequence[GridRun], notice: Callable[[str], None]) -> int:
    """Say "nothing to do" for a complete grid; the exit status counts the errors left in every
    run folder of it."""
    from medmis.experiments.harness import error_texts, outcome_of
    from medmis.experiments.records import describe_outside, outside_plan

    n, errors = 0, []
    for run in runs:
        if not (run.folder / "records.jsonl").exists():
            continue
        outside = outside_plan(run.folder)
        if outside.count:
            notice(describe_outside(run.folder / "records.jsonl", outside))
        k, texts = error_texts(run.folder / "records.jsonl")  # keys and error texts, read columnar
        n += k
        errors += [e for e in texts if e]
    where = f" and its {len(runs) - 1} other run folder(s)" if len(runs) > 1 else ""
    print(f"nothing to do: {n} records complete in {runs[0].folder}{where}")
    outcome = outcome_of(n, errors, stopped=None)
    if outcome.message:
        notice(outcome.message)
    return outcome.code
