"""``medmis report DIR``: metrics.json, metrics.csv and a readable report.md for one run.

The numbers all come from ``compute_run_metrics`` (DuckDB over ``records.jsonl``); this module only loads a run directory and
renders. Renderers are small functions of ``(RunData, MetricsReport)`` so that plots or an
HTML page can be layered on the same objects.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from medmis.experiments.analysis import (
    CLEAN_DROP_TOLERANCE,
    OVERCORRECT_DROP,
    MetricsReport,
    Verdict,
    VerdictSettings,
    compute_run_metrics,
)
from medmis.tools import ConfigError, redact

from ._format import (
    CSV_COLUMNS,
    fmt_ci,
    fmt_count,
    fmt_delta,
    fmt_num,
    fmt_p,
    md_table,
    metric_rows,
    render_csv,
)
from ._run import SIMULATED_PREFIX, RunData, load_run_data
from ._sections import (
    PAIRED_LABELS,
    Section,
    join_sections,
    render_markdown,
    report_sections,
)
from ._verdict_text import (
    batch_discount,
    run_prices,
    run_verdict,
    usd_rows,
)

# Re-exported: the report's public pieces have always been importable from here.
__all__ = [
    "CLEAN_DROP_TOLERANCE",
    "CSV_COLUMNS",
    "OVERCORRECT_DROP",
    "PAIRED_LABELS",
    "SIMULATED_PREFIX",
    "RunData",
    "fmt_ci",
    "fmt_count",
    "fmt_delta",
    "fmt_num",
    "fmt_p",
    "load_run_data",
    "md_table",
    "metric_rows",
    "render_csv",
    "render_markdown",
    "write_report",
]


def write_report(
    run_dir: str | Path, *, baseline: str = "none", seed: int = 0, figures: bool = True,
    notice: Callable[[str], None] | None = None,
    settings: VerdictSettings | None = None, paper_tables: bool = False,
    mcq_run: str | Path | None = None,
) -> dict[str, Path]:
    """Compute metrics for a run and (re)write its report files.

    Args:
        run_dir: Directory holding ``records.jsonl`` (and optionally ``manifest.json``).
        baseline: Defender the others are compared against.
        seed: Seed of the paired bootstrap.
        figures: Also write the PNG plots and the self-contained ``report.html``.
        paper_tables: Also write ``paper_tables.csv`` and ``paper_tables.md`` (the paper's
            table layout; :mod:`._paper_tables`).
        notice: Told, in one line, of records outside the run's plan (left out of every
            figure; ``medmis run`` says so itself when it resumes).
        settings: The verdict's margins and thresholds; None keeps those of the folder's
            last ``verdict.json`` (defaults the first time).
        mcq_run: For a graded open-ended run: the multiple-choice run of the same items, whose
            figures the open-ended section shows beside its own (``open_ended.json``'s
            ``mcq_beside``). Refused (ConfigError, nothing written) when it is not an MCQ run
            of the same models, defenders and items, or when ``run_dir`` is not open-ended.

    Returns:
        Paths written, keyed by file name: ``"metrics.json"``, ``"metrics.csv"``,
        ``"report.md"`` and, with figures, ``"report.html"`` and ``"plots/<name>.png"``.
    """
    if mcq_run is not None:  # refused in one line before anything is read into the folder
        from medmis.experiments.grading import GRADES_FILE, check_mcq_run

        check_mcq_run(run_dir, mcq_run)
        if not (Path(run_dir) / GRADES_FILE).is_file():
            raise ConfigError(f"--mcq-run {mcq_run}: {run_dir} has no grades to set beside it "
                              "(run `medmis grade` first)")
    run = load_run_data(run_dir)
    from medmis.experiments.records import answer_format_of

    if answer_format_of(run.run_dir) == "open":  # free text: no graded figure to compute
        from ._open import write_open_report

        return write_open_report(run, figures=figures, write_text=_write_text, baseline=baseline, seed=seed,
                                 settings=settings, mcq_run=mcq_run)
    if run.facts.outside.count and notice is not None:
        from medmis.experiments.records import describe_outside

        notice(describe_outside(run.run_dir / "records.jsonl", run.facts.outside))
    report = compute_run_metrics(run.run_dir, baseline=baseline, seed=seed)
    paths = {name: run.run_dir / name for name in ("metrics.json", "metrics.csv", "report.md")}
    verdict = run_verdict(run, report, settings)
    metrics = report.to_json_dict()
    prices = run_prices(run)
    discount = batch_discount(run)
    for (model, defender), money in usd_rows(report, prices).items():
        metrics[model][defender]["cost"].update(money)
        if discount and model in prices:  # say which prices the dollars were computed from
            metrics[model][defender]["cost"].update(
                batch_discount=discount, usd_in_per_mtok=prices[model][0], usd_out_per_mtok=prices[model][1])
    # allow_nan=False: the contract is strict JSON, undefined values must already be null.
    _write_text(paths["metrics.json"],
                json.dumps(metrics, indent=2, ensure_ascii=False, allow_nan=False) + "\n")
    _write_text(paths["metrics.csv"], render_csv(report))
    if paper_tables:
        from ._paper_tables import render_paper_tables

        for name, text in render_paper_tables(run, report).items():
            paths[name] = run.run_dir / name
            _write_text(paths[name], text)
    paths["verdict.json"] = run.run_dir / "verdict.json"
    _write_text(paths["verdict.json"], json.dumps(verdict.to_json(), indent=2, ensure_ascii=False) + "\n")
    stability = _stability(run, report, verdict)
    if stability:
        paths["stability.json"] = run.run_dir / "stability.json"
        _write_text(paths["stability.json"], json.dumps(stability, indent=2) + "\n")
    from ._sensitivity import delivery_sensitivity

    sensitivity = delivery_sensitivity(run.run_dir)
    return _write_rest(run, report, verdict, metrics, paths, sensitivity, figures, stability)


def _write_rest(run: RunData, report: MetricsReport, verdict: Verdict, metrics: dict[str, Any],
                paths: dict[str, Path], sensitivity: list[dict[str, Any]], figures: bool,
                stability: dict[str, Any] | None = None) -> dict[str, Path]:
    from ._html import write_html
    from ._sensitivity import sensitivity_markdown
    from ._stability import stability_markdown

    stable = stability_markdown(stability, {m: [d for d in ds if d != report.baseline]
                                            for m, ds in report.results.items()})

    plots: dict[str, Path] = {}
    if figures and metrics:
        from ._plots import write_plots

        plots = write_plots(run.run_dir, metrics)
    from ._poison import write_poison  # an ablation's share runs under poison/, if any

    poison = write_poison(run.run_dir, baseline=report.baseline, seed=report.seed, figures=figures,
                          settings=verdict.settings, main=report)
    if poison is not None:
        paths.update(poison.paths)
        plots.update(poison.plots)
    from ._certified import certified_markdown  # certifying defenders' records, if any

    extra = [Section("stability", stable), Section("poison", poison.markdown if poison is not None else ""),
             Section("certified", certified_markdown(run.run_dir)),
             Section("sensitivity", sensitivity_markdown(sensitivity))]
    if plots:
        extra.append(Section("plots", "## Plots\n\n" + "\n".join(
            f"![{name.replace('_', ' ')}]({p.relative_to(run.run_dir).as_posix()})" for name, p in plots.items()
        )))
    # runs recorded before records were redacted, too
    sections = [s._replace(markdown=redact(s.markdown)) for s in report_sections(run, report, verdict, extra)]
    _write_text(paths["report.md"], join_sections(sections))
    if figures:  # the page renders the very sections of report.md, then the case browser
        from ._cases import case_data

        paths["report.html"] = write_html(
            run.run_dir, sections, title=run.run_dir.name, simulated=run.simulated,
            cases=case_data(run.run_dir),
        )
        paths.update({f"plots/{p.name}": p for p in plots.values()})
    return paths


def _stability(run: RunData, report: MetricsReport, verdict: Verdict) -> dict[str, Any] | None:
    """The ranking over the stability re-runs (``medmis ablate`` with ``stability_seeds``)."""
    from ._stability import ranking_stability

    if verdict.incomplete:
        return None
    options = (run.manifest.get("fingerprint") or {}).get("model_options") or {}
    # the examinee's seed: extra.seed, else the model seed, else the run seed (as it is built)
    seed = (options.get("extra") or {}).get(
        "seed", options.get("seed", options.get("run_seed", run.manifest.get("seed", 0))))
    return ranking_stability(run.run_dir, report.baseline, {mv.model: list(mv.better) for mv in verdict.models},
                             run.models, int(seed or 0), verdict.settings)


def _write_text(path: Path, text: str) -> None:
    # Write-then-rename so a reader never sees a half-written report.
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # unique per process
    tmp.write_text(text, encoding="utf-8", newline="")
    os.replace(tmp, path)
