"""Ranking stability of a simulated run: how often each defender is named better over
several examinee seeds.

A run of the simulated examinee answers by seeded draws, so one run's ranking is partly the
seed's. ``medmis ablate`` with ``[simulation] stability_seeds = N`` re-runs the same cases with
the examinee reseeded (``OUT/stability/seed-<s>``, seeds ``seed + 1`` ... ``seed + N - 1``;
the main run is the run seed's). :func:`ranking_stability` applies the verdict to each of the
N runs and counts, per model and defender, the runs that name it better; the counts render as
a section of ``report.md`` and ``report.html``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from medmis.experiments.analysis._verdict import VerdictSettings

STABILITY_DIR = "stability"


def seed_dirs(run_dir: Path) -> list[tuple[int, Path]]:
    """The stability re-runs under ``run_dir`` as (examinee seed, folder), by seed."""
    root = run_dir / STABILITY_DIR
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        head, _, tail = p.name.partition("-")
        if head == "seed" and tail.lstrip("-").isdigit() and (p / "records.jsonl").exists():
            found.append((int(tail), p))
    return sorted(found)


def named_better(run_dir: Path, baseline: str, settings: VerdictSettings | None = None) -> dict[str, list[str]]:
    """Model -> the defenders the verdict names better, for one run folder.

    The one place this module calls the verdict (kept small so the verdict's entry point can
    change without touching the rest).
    """
    from medmis.experiments.analysis import compute_run_metrics

    from ._run import load_run_data
    from ._verdict_text import run_verdict

    run = load_run_data(run_dir)
    verdict = run_verdict(run, compute_run_metrics(run.run_dir, baseline=baseline), settings)
    return {mv.model: list(mv.better) for mv in verdict.models}


def ranking_stability(run_dir: Path, baseline: str, main: Mapping[str, list[str]],
                      models: list[str], seed: int, settings: VerdictSettings | None = None) -> dict[str, Any] | None:
    """Per model, how many of the runs (the main one and each stability re-run) name each
    defender better; None without stability re-runs.

    Args:
        run_dir: The main run folder.
        baseline: The baseline defender.
        main: The main run's named defenders per model (its verdict, already computed).
        models: The main run's models.
        seed: The main run's examinee seed.
        settings: The main run's verdict settings (margins, thresholds), applied to every re-run.

    Returns:
        ``{"seeds": [...], "models": {model: {"named": {defender: [seed, ...]}}}}``.
    """
    subs = seed_dirs(run_dir)
    if not subs:
        return None
    runs = [(seed, dict(main)), *((s, named_better(p, baseline, settings)) for s, p in subs)]
    out: dict[str, Any] = {}
    for model in models:
        named: dict[str, list[int]] = {}
        for s, better in runs:
            for d in better.get(model, []):
                named.setdefault(d, []).append(s)
        out[model] = {"named": named}
    return {"seeds": [s for s, _ in runs], "models": out}


def stability_markdown(stability: Mapping[str, Any] | None, defenders: Mapping[str, list[str]]) -> str:
    """The ``## Ranking stability over N examinee seeds`` section, or "" without re-runs.

    Args:
        stability: Output of :func:`ranking_stability`.
        defenders: Model -> every defender label of the run (other than the baseline), in
            report order, so a defender never named shows 0/N.
    """
    if not stability:
        return ""
    seeds = stability["seeds"]
    n = len(seeds)
    lines = [f"## Ranking stability over {n} examinee seeds", "",
             f"The same cases re-run with the simulated examinee reseeded (seeds "
             f"{', '.join(map(str, seeds))}; the first is this run), each judged by the verdict "
             "above. A defender named in every run is robust to the simulation's draws; one named "
             "in some runs only owes its place partly to the seed. Either way this is the "
             "simulation's behaviour, not a model's.", ""]
    for model, block in stability["models"].items():
        lines.append(f"- `{model}`:")
        named = block["named"]
        for d in defenders.get(model, []):
            got = named.get(d, [])
            where = f" (seed{'s' if len(got) > 1 else ''} {', '.join(map(str, got))})" if got else ""
            lines.append(f"  - `{d}`: named better {len(got)}/{n}{where}")
    return "\n".join(lines)
