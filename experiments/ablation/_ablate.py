"""Ablation grids: models x defenders (with option sweeps) x protocols, as one resumable run.

A TOML config names the data, the models (with a price table), the defenders and their
option sweeps. ``medmis ablate CONFIG --dry-run`` prints the number of cases, the expected
model and tool calls and a token and cost estimate per cell for every run folder of the grid
(the sub-runs below included) and their total; without ``--dry-run`` the grid runs through the
paired harness into one run directory (re-running resumes it). An optional budget cap, over the
whole grid, stops the run cleanly once the estimated spend reaches it. With
``delivery.type2_shuffled = true`` a second pass re-runs type2 with a seeded shuffle of the
sentence order (no regeneration needed) into ``OUT/type2_shuffled``. With
``simulation.stability_seeds = N`` (simulated examinee only) the grid's cases are re-run
``N - 1`` times with the examinee reseeded, into ``OUT/stability/seed-<s>``; the report counts
how often each defender is named better (``medmis.experiments.reporting._stability``). With
``[poison]`` the clean and Type 1 cases run once per poisoned share into
``OUT/poison/share-<S>`` (``OUT/poison/shares.json`` lists the shares); the report's poison
table reads them (``medmis.experiments.reporting._poison``).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from medmis.agents import ModelOptions
from medmis.defenses import create_defender, get_spec, load_plugins
from medmis.experiments.analysis import write_plan
from medmis.experiments.benchmark import Case, Dataset, render_prompt
from medmis.experiments.harness import (
    ModelVariant,
    Outcome,
    RunConfig,
    RunResult,
    RunStats,
    run_experiment,
)
from medmis.tools import ConfigError

from ._config import (
    AblationConfig,
    DefenderEntry,
    Delivery,
    ModelEntry,
    load_config,
)
from ._folders import (
    GridRun,
    RunPlan,
    finished_outcome,
    grid_runs,
    nothing_to_do,
    plan_grid,
    poison_protocols,
)
from ._preflight import check_config, check_keys, worst_outcome

__all__ = [
    "AblationConfig",
    "CellEstimate",
    "DefenderEntry",
    "Delivery",
    "ModelEntry",
    "ablate_command",
    "estimate",
    "format_estimates",
    "load_config",
    "run_ablation",
]

# Output tokens per model call when no earlier records exist to calibrate from; the expected
# calls and prompt growth per case are each defender's cost hint (``DefenderSpec.cost``).
_OUTPUT_TOKENS_PER_CALL = 350


class CellEstimate(BaseModel):
    model: str
    defender: str
    cases: int
    llm_calls: float
    tool_calls: float
    input_tokens: float
    output_tokens: float
    cost_usd: float
    basis: str


def _calibration(out: Path) -> dict[tuple[str, str, str], tuple[float, float, float, float]]:
    """Mean (llm calls, tool calls, tokens in, tokens out) per case from earlier records
    (those without an error), summed by DuckDB over the records' columns."""
    from medmis.experiments.records import connect, load_records_table

    path = out / "records.jsonl"
    if not path.exists() or path.stat().st_size == 0:
        return {}
    con = connect()
    try:
        load_records_table(con, path, columns=("error", "usage", "llm_calls", "tool_calls"))
        rows = con.execute(
            "SELECT model, defender, protocol, sum(llm_calls), sum(tool_calls), sum(input_tokens), "
            "sum(output_tokens), count(*) FROM records WHERE error IS NULL OR error = '' "
            "GROUP BY ALL").fetchall()
    finally:
        con.close()
    # integer sums over an integer count: the same floats as summing record by record
    return {(m, d, p): (int(a) / n, int(b) / n, int(c) / n, int(e) / n)
            for m, d, p, a, b, c, e, n in rows if n}


def estimate(config: AblationConfig, cases: Sequence[Case], out: Path) -> list[CellEstimate]:
    """Expected calls, tokens and cost per model x defender cell."""
    from medmis.agents import estimate_tokens

    calib = _calibration(out)
    base_tokens = {c.key: sum(estimate_tokens(str(m.content)) for m in render_prompt(c)) for c in cases}
    cells = []
    for model in config.models:
        for dconf in config.defender_configs():
            defender = create_defender(dconf.name, dconf.options)
            label = defender.label
            hint = get_spec(dconf.name).cost
            # clean questions go through the tool loop too
            research_clean = bool(getattr(defender.options, "research_clean", False))
            totals = [0.0, 0.0, 0.0, 0.0]
            calibrated = 0
            for case in cases:
                cal = calib.get((model.name, label, case.protocol))
                if cal is not None:
                    calibrated += 1
                    calls, tools_n, tin, tout = cal
                else:
                    protocol = "type1" if research_clean and case.protocol == "clean" else case.protocol
                    calls, tools_n, growth = hint.per_case(protocol)
                    tin = base_tokens[case.key] * growth
                    tout = calls * _OUTPUT_TOKENS_PER_CALL
                totals[0] += calls
                totals[1] += tools_n
                totals[2] += tin
                totals[3] += tout
            totals = [t * config.epochs for t in totals]  # every epoch answers every case again
            cost = totals[2] / 1e6 * model.price_in_per_mtok + totals[3] / 1e6 * model.price_out_per_mtok
            cost *= _billed_share(config)
            basis = "earlier records" if calibrated == len(cases) and cases else (
                "heuristic" if not calibrated else f"mixed ({calibrated}/{len(cases)} calibrated)")
            cells.append(CellEstimate(
                model=model.name, defender=label, cases=len(cases) * config.epochs, llm_calls=totals[0],
                tool_calls=totals[1], input_tokens=totals[2], output_tokens=totals[3],
                cost_usd=cost, basis=basis,
            ))
    return cells


def format_estimates(cells: Sequence[CellEstimate], *, table: bool = True) -> str:
    """The estimate per model x defender as a table, then its total line; without ``table``
    (the same cells as the table above it), one line saying so in place of the table."""
    total = (f"total: {sum(c.cases for c in cells)} cases, {sum(c.llm_calls for c in cells):.0f} model calls, "
             f"{sum(c.tool_calls for c in cells):.0f} tool calls, estimated ${sum(c.cost_usd for c in cells):.4f}")
    if not table:
        return "(the same estimate per model x defender as above)\n" + total
    w = max([28, *(len(c.model) for c in cells)])
    head = f"{'model':<{w}} {'defender':<34} {'cases':>6} {'llm calls':>10} {'tool calls':>10} {'tokens in':>11} {'tokens out':>11} {'cost $':>9}  basis"
    lines = [head, "-" * len(head)]
    for c in cells:
        lines.append(
            f"{c.model:<{w}} {c.defender:<34} {c.cases:>6} {c.llm_calls:>10.0f} {c.tool_calls:>10.0f} "
            f"{c.input_tokens:>11.0f} {c.output_tokens:>11.0f} {c.cost_usd:>9.4f}  {c.basis}"
        )
    return "\n".join([*lines, total])


def _billed_share(config: AblationConfig) -> float:
    """The share of the list prices a run is billed: less the batch discount for a batch run."""
    return 1.0 - config.batch_discount if config.batch else 1.0


def spent_usd(stats: RunStats, prices: dict[str, ModelEntry], share: float = 1.0) -> float:
    """Dollars so far, counted as ``medmis run --max-usd`` counts them."""
    from medmis.experiments.harness import spent_usd as run_spent_usd

    return run_spent_usd(stats, {s: (m.price_in_per_mtok, m.price_out_per_mtok) for s, m in prices.items()}, share)


def _run_config(config: AblationConfig, out: Path, *, progress: bool, shuffled: bool,
                accept_changes: Sequence[str] = (), examinee_seed: int | None = None,
                share: float | None = None) -> RunConfig:
    # the run seed reseeds the simulated examinee as `medmis run --seed` does, and is never sent
    # to a provider (a seed in model_options is, and wins for the examinee too)
    options = {"run_seed": config.seed, "decoding": config.decoding, **config.model_options}
    cache_dir = config.cache_dir or str(out.parent / "cache" if shuffled else out / "cache")
    if examinee_seed is not None:  # a stability re-run: same cases, the examinee reseeded
        options["run_seed"] = examinee_seed
        if "seed" in options:
            options["seed"] = examinee_seed
        if "seed" in (options.get("extra") or {}):
            options["extra"] = {**options["extra"], "seed": examinee_seed}
        cache_dir = config.cache_dir or str(out.parent.parent / "cache")
    poison = None
    if share is not None and config.poison is not None:  # a share run: OUT/poison/share-<S>
        poison = config.poison.settings(share, config.resolve(config.poison.pages))
        cache_dir = config.cache_dir or str(out.parent.parent / "cache")
    # RunConfig's own default unless the config sets one (typed for the ** below)
    case_timeout: dict[str, Any] = {} if config.case_timeout is None else {"case_timeout_s": config.case_timeout}
    return RunConfig(
        data=config.resolve(config.data),
        subset=config.subset,
        limit=config.limit,
        hub_repo=config.data_hub_repo,
        prices={m.name: (m.price_in_per_mtok, m.price_out_per_mtok) for m in config.models
                if m.price_in_per_mtok or m.price_out_per_mtok},
        models=[m.name for m in config.models],
        model_variants={m.name: ModelVariant(spec=m.spec, options=m.overrides) for m in config.models
                        if m.label or m.overrides},
        model_options=ModelOptions(**options),
        defenders=config.defender_configs(),
        plugins=config.plugins,
        protocols=["clean", "type2"] if shuffled else (
            poison_protocols(config) if poison is not None else config.protocols),
        type1_targets=config.type1_targets,
        shuffle_type2=shuffled,
        prompt=config.prompt,
        answer_format=config.answer_format,
        seed=config.seed,
        epochs=config.epochs,
        out=str(out),
        max_connections=config.max_connections,
        **case_timeout,
        max_retries=config.max_retries, retry_errors=config.retry_errors,
        cache=config.cache,
        # one shared store: the shuffled pass replays the clean answers instead of paying again
        cache_dir=cache_dir,
        search=config.search,
        visit=config.visit,
        corpus_dir=config.resolve(config.corpus_dir) if config.corpus_dir else None,
        search_ambient=config.resolve(config.search_ambient) if config.search_ambient else None,
        allow_hosts=config.allow_hosts,
        blocklist=config.resolve(config.blocklist) if config.blocklist else None,
        poison=poison,
        progress=progress,
        accept_changes=list(accept_changes),
        batch=config.batch,
        batch_poll_s=config.batch_poll_s,
        batch_discount=config.batch_discount,
        shard=config.shard,
        max_rps=config.max_rps,
        max_tpm=config.max_tpm,
        # a stability re-run is read by the main report's stability section only; a share run's
        # tables are written after it (without figures), its figures are the main report's
        write_report=examinee_seed is None and poison is None,
    )


def _poison_plan(config: AblationConfig) -> dict[str, Any]:
    """The settings every share run shares (``OUT/poison/shares.json`` besides the shares)."""
    from medmis.tools import pages_digest

    assert config.poison is not None
    pages = config.resolve(config.poison.pages)
    return {"rank": config.poison.rank, "styles": config.poison.styles, "pages": config.poison.pages,
            "pages_sha256": pages_digest(pages)}


async def run_ablation(config: AblationConfig, *, out: Path, progress: bool = True,
                       argv: Sequence[str] | None = None, accept_changes: Sequence[str] = (),
                       dataset: Dataset | None = None, plans: Sequence[RunPlan] | None = None) -> dict[str, Any]:
    """Run every folder of the grid (:func:`grid_runs`: the main run, the shuffled Type 2 pass, the
    stability re-runs, the poison shares) in order; returns a summary.

    The data is loaded once for the whole grid and each folder's cases are planned once
    (``dataset`` and ``plans`` when the caller has them already, as ``medmis ablate`` does).

    ``budget_usd`` caps the whole grid: the spend of the folders already run in this invocation
    counts against it, and once it stops one folder no further folder starts.
    """
    from medmis.experiments.harness import EXIT_STOPPED

    prices = {m.name: m for m in config.models}
    spent_before = [0.0]  # dollars of this invocation's finished folders

    def budget_stop(stats: RunStats) -> str | None:
        if config.budget_usd is None:
            return None
        spent = spent_before[0] + spent_usd(stats, prices, _billed_share(config))
        return f"budget cap ${config.budget_usd:.2f} reached (${spent:.4f} spent)" if spent >= config.budget_usd else None

    if config.poison is not None:  # the report lists a share never run as "not run"
        write_plan(out, config.poison.shares, _poison_plan(config))
    if dataset is None:
        dataset = _load_data(config, out)
    if plans is None:
        plans = plan_grid(config, dataset.items, out)
    outcomes: list[Outcome | None] = []
    finished: list[tuple[GridRun, RunResult]] = []
    summary: dict[str, Any] = {"out": str(out)}
    for plan in plans:
        run = plan.run
        if outcomes and worst_outcome(outcomes).code == EXIT_STOPPED:  # the cap ends the whole grid
            break
        run_cfg = _run_config(config, run.folder, progress=progress, accept_changes=accept_changes, **run.how())
        result = await run_experiment(run_cfg, argv=argv, stop_when=budget_stop, notice=_notice,
                                      dataset=dataset, planned=plan.planned)
        spent_before[0] += spent_usd(result.stats, prices, _billed_share(config))
        outcomes.append(result.outcome)
        finished.append((run, result))
        entry = {"out": str(result.out), "records": result.records, "new": result.new_records}
        if run.folder == out:
            summary.update(records=result.records, new=result.new_records, stopped=result.stats.stopped_reason)
        elif run.shuffled:
            summary["type2_shuffled"] = entry
        elif run.examinee_seed is not None:
            summary.setdefault("stability", []).append({"seed": run.examinee_seed, **entry})
        else:
            summary.setdefault("poison", []).append({"share": run.share, **entry})
    graded = await _grade_main(config, out) if config.grading is not None and finished else None
    from medmis.experiments.analysis import VerdictSettings
    from medmis.experiments.reporting import finish_run

    settings = VerdictSettings.from_mapping(config.verdict.model_dump())
    # each folder finished as `medmis run` finishes one, the main one last: its report reads
    # the shuffled pass and the stability re-runs (theirs leave the figures to it; a stability
    # re-run writes none) and is rewritten whenever the grid ran
    ends = []
    for run, result in sorted(finished, key=lambda f: f[0].folder == out):
        ends.append(finish_run(result, report=run.examinee_seed is None, rewrite=True,
                               baseline=config.baseline, figures=run.folder == out, settings=settings,
                               mcq_run=mcq_run_of(config) if run.folder == out else None))
        if run.folder == out:
            summary["report"] = {k: str(v) for k, v in result.report.items()}
    outcome = worst_outcome(ends)
    summary["exit_code"] = outcome.code
    summary["outcome"] = outcome.message
    if graded is not None:
        summary["grading"] = graded[1]
        if graded[0] and not summary["exit_code"]:
            summary["exit_code"], summary["outcome"] = graded
    return summary


def check_judge_spec(spec: str) -> None:
    """Refuse a judge spec the model registry cannot build (one line, exit 2)."""
    from medmis.agents import load_model, parse_spec

    try:
        provider, _ = parse_spec(spec)
        if provider == "mock":  # a simulated judge's name is checked by building it (no key, no network)
            load_model(spec)
    except ValueError as exc:
        raise ConfigError(f"grading.judges: {exc}") from None


def mcq_run_of(config: AblationConfig) -> Path | None:
    """``[grading] mcq_run``: the MCQ run of the same items shown beside the open-ended figures."""
    entry = config.grading
    return Path(config.resolve(entry.mcq_run)) if entry is not None and entry.mcq_run else None


def grading_settings(config: AblationConfig, out: Path) -> Any:
    """``[grading]`` as the settings of ``medmis grade`` over the main run folder ``out``."""
    from medmis.experiments.grading import GradeSettings

    entry = config.grading
    assert entry is not None
    return GradeSettings(run_dir=out, rubrics=Path(config.resolve(entry.rubrics)), judges=tuple(entry.judges),
                         threshold=entry.threshold, cache=config.cache,
                         cache_dir=Path(config.cache_dir) if config.cache_dir else None,
                         max_connections=config.max_connections, max_retries=config.max_retries)


async def _grade_main(config: AblationConfig, out: Path) -> tuple[int, str]:
    from medmis.experiments.grading import grade_async

    code, message = await grade_async(grading_settings(config, out))
    _notice(message)
    return code, message


def ablate_command(path: str, *, out: str | None = None, dry_run: bool = False, progress: bool = True,
                   argv: Sequence[str] | None = None, overrides: Sequence[str] = (),
                   accept_changes: Sequence[str] = (), plugins: Sequence[str] = ()) -> int:
    """``medmis ablate``: print the plan (dry run) or run it.

    ``overrides`` are ``KEY=VALUE`` pairs applied to the config (``--data``, ``--limit`` and
    ``--set``; see :func:`load_config`); ``plugins`` (``--plugin``) join the config's.
    """

    config = load_config(path, overrides)
    config.plugins += [p for p in plugins if p not in config.plugins]
    load_plugins(config.plugins)
    check_config(config)  # an unknown provider, defender or baseline never gets an estimate
    if skipped := config.skipped():  # one line, then the grid runs without them
        _notice(f"answer_format {config.answer_format}: skipping {', '.join(skipped)} "
                "(multiple choice only; an open-ended case shows no options)")
    if not dry_run:
        # before loading data: the HLE config reads the hub, which a keyless user may not reach
        problem = check_keys(config)
        if problem:
            raise ConfigError(problem)
    out_dir = Path(out or config.out)
    if config.grading is not None:  # a bad rubric file or judge spec stops here, before any run
        from medmis.experiments.grading import load_rubrics

        if getattr(config, "answer_format", "mcq") != "open":
            raise ConfigError(f"{path}: [grading] grades free-text answers; set answer_format = \"open\"")

        load_rubrics(config.resolve(config.grading.rubrics))
        for spec in config.grading.judges:
            check_judge_spec(spec)
        if (mcq := mcq_run_of(config)) is not None:  # a missing or free-text folder stops here, before any run
            from medmis.experiments.records import answer_format_of

            if not (mcq / "records.jsonl").is_file() or answer_format_of(mcq) != "mcq":
                raise ConfigError(f"{path}: grading.mcq_run {mcq}: not a multiple-choice run folder "
                                  "(no records.jsonl, or free-text answers)")
    dataset = _load_data(config, out_dir)
    # every run folder of the grid with its own cases (the folders the run walks, in its order),
    # planned once: the estimate, the budget check, the check for work left and the runs use it
    plans = plan_grid(config, dataset.items, out_dir)
    if not plans[0].cases and config.shard is None:  # a shard may hold no item of a small data set
        raise ConfigError(f"{path}: the selection has no cases (check data, subset, limit, protocols)")
    # the folders' fingerprints first, as `medmis run` checks them: a complete folder of another
    # run is refused, never reported as "nothing to do"; an accepted change goes on to the run,
    # which records it
    if not dry_run and not _check_folders(config, plans, dataset, accept_changes) \
            and nothing_to_do(config, plans):
        code = finished_outcome(grid_runs(config, out_dir), _notice)
        if config.grading is not None:  # the runs are complete; the grading may not be (a judge failed)
            graded, _ = asyncio.run(_grade_main(config, out_dir))
            if graded:
                from medmis.experiments.reporting import write_report

                write_report(out_dir, baseline=config.baseline, mcq_run=mcq_run_of(config))
            code = max(code, graded)
        return code
    print(f"ablation {config.name!r}: {len(dataset.items)} items, {len(config.models)} model(s) x "
          f"{len(config.defender_configs())} defender(s), protocols {', '.join(config.protocols)}, "
          f"type1 targets {config.type1_targets}, prompt {config.prompt}"
          + (f", answer format {config.answer_format}" if config.answer_format != "mcq" else "")
          + (f", {config.epochs} epochs" if config.epochs > 1 else "")
          + (" (+ shuffled type2 pass)" if any(plan.run.shuffled for plan in plans) else "")
          + (f" (+ {len(config.examinee_seeds())} stability re-runs, examinee seeds "
             f"{', '.join(map(str, config.examinee_seeds()))})" if config.examinee_seeds() else ""))
    grid: list[CellEstimate] = []
    shown: list[dict[str, Any]] = []
    for plan in plans:
        run, cases = plan.run, plan.cases
        cells = estimate(config, cases, run.folder)
        grid += cells
        poison = config.poison
        if poison is not None and run.share is not None and run.share == poison.shares[0]:
            print(f"\npoisoned web: {len(poison.shares)} share run(s) of the clean and Type 1 cases, "
                  f"rank {poison.rank}, styles {', '.join(poison.styles or ['all'])}, pages {poison.pages}")
        if run.folder != out_dir:
            print(f"\n{run.label()} ({run.folder}): {len(cases)} cases per model x defender")
        same = [c.model_dump(exclude={"basis"}) for c in cells]
        # the stability re-runs repeat the main run's table: its total says enough
        print(format_estimates(cells, table=same != shown))
        shown = same
    total = sum(c.cost_usd for c in grid)
    if len(plans) > 1:
        print(f"\ngrid total: {len(plans)} run folders, {sum(c.cases for c in grid)} cases, "
              f"{sum(c.llm_calls for c in grid):.0f} model calls, {sum(c.tool_calls for c in grid):.0f} "
              f"tool calls, estimated ${total:.4f}")
    if config.budget_usd is not None:
        within = (f"the grid's estimate ${total:.4f} is within it" if total < config.budget_usd else
                  f"below the grid's estimate ${total:.4f}: the grid stops when its spend reaches the cap")
        print(f"budget cap: ${config.budget_usd:.2f} ({within})")
    if dry_run:
        return 0
    from medmis.experiments.harness import RunInterrupted

    try:
        summary = asyncio.run(run_ablation(config, out=out_dir, progress=progress, argv=argv,
                                           accept_changes=accept_changes, dataset=dataset, plans=plans))
    except RunInterrupted:  # Ctrl-C or SIGTERM: the report at once, saying it is incomplete
        from medmis.experiments.reporting import report_interrupted, write_report

        report_interrupted(lambda d: write_report(d, baseline=config.baseline), out_dir, _notice)
        raise
    print(json.dumps(summary, indent=2), file=sys.stdout)
    report_md = summary["report"].get("report.md")
    if report_md:
        print(f"\nreport: {report_md}")
    if summary["outcome"]:
        _notice(summary["outcome"])
    return int(summary["exit_code"])


def _load_data(config: AblationConfig, out: Path) -> Dataset:
    """The grid's data, loaded once: every folder of it runs the same items."""
    from medmis.experiments.benchmark import load_dataset

    run_cfg = _run_config(config, out, progress=False, shuffled=False)
    return load_dataset(run_cfg.data, subset=config.subset, limit=config.limit, hub_repo=config.data_hub_repo)


def _notice(message: str) -> None:
    print(f"medmis: {message}", file=sys.stderr)


def _check_folders(config: AblationConfig, plans: Sequence[RunPlan], dataset: Dataset,
                   accept_changes: Sequence[str]) -> bool:
    """Check every run folder of the grid (:func:`grid_runs`) as the harness checks them before
    it claims one; True when a difference was accepted.

    Raises:
        RunSetupError: A folder holds another run (a change not accepted).
    """
    from medmis.experiments.harness import Harness

    accepted = False
    for plan in plans:
        run = plan.run
        cfg = _run_config(config, run.folder, progress=False, accept_changes=accept_changes, **run.how())
        diff = Harness(cfg, dataset=dataset, planned=plan.planned).check_folder(dataset)
        accepted = accepted or bool(diff is not None and diff.changed)
    return accepted
