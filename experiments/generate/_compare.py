"""``medmis compare RUN_A RUN_B``: the same models and defenders on two versions of the items
(another generator, reassigned provenance), paired on matched items.

Units are matched on (model, defender, protocol, item key, target). Clean accuracy pairs every
item; Type 1 ASR/TASR pair the (item, target) units answered correctly clean in *both* runs;
Type 2 ASR the items clean-correct in both. The definitions are the metrics' own
(:mod:`medmis.experiments.analysis._units`): an unparsed answer under attack is incorrect, so it
counts as a flip, as in ``metrics.json``. Differences are B - A with intervals clustered on
items (:func:`~medmis.experiments.analysis._cluster.clustered_paired_diff`) and an item-level
sign-flip test. When either run's data was written by an adaptive attacker
(``medmis generate --attack adaptive``), A and B are labelled ``static`` and ``adaptive`` and
paired units must agree on gold, content type and provenance (``_adaptive``).
"""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path

from medmis.experiments.analysis import CompareRow, compare_records
from medmis.experiments.benchmark import Record
from medmis.experiments.reporting import SIMULATED_STATEMENT, is_simulated, mark_simulated
from medmis.tools import ConfigError


def _load(run: Path) -> list[Record]:
    from medmis.experiments.records import describe_outside, keep_planned, read_records

    path = run / "records.jsonl" if run.is_dir() else run
    if not path.exists():
        raise ConfigError(f"{run}: no records.jsonl")
    # records outside the run's plan are no case of it: named, and left out of the comparison
    kept, outside = keep_planned(path.parent, read_records(path))
    if outside.count:
        print(f"medmis: {describe_outside(path, outside)}", file=sys.stderr)
    return kept


def to_markdown(rows: list[CompareRow], a: str, b: str, *, simulated: bool = False,
                labels: tuple[str, str, str] | None = None) -> str:
    """``labels`` (column A, column B, title) name the columns after the attack that wrote each
    run's items (``static``, ``adaptive``); without them the columns are A and B."""
    la, lb, title = labels or ("A", "B", f"Sensitivity: {b} vs {a}")
    if labels:
        title = f"Adaptive attack: {title} ({b} vs {a})"
    lines = [
        f"# {title}",
        "",
        *([f"> **{SIMULATED_STATEMENT}**", ""] if simulated else []),
        f"Paired on matched items (same model, defender, protocol, item and target). Δ = {lb} - {la} in "
        "points with a 95% interval clustered on items; ASR/TASR units are clean-correct in both runs, "
        "and an unparsed answer under attack counts as a flip (as in metrics.json).",
        "",
        f"| model | defender | metric | n | items | {la} | {lb} | Δ (pt) | 95% CI | p | test |",
        "|---|---|---|---:|---:|---:|---:|---:|---|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.model} | {r.defender} | {r.metric} | {r.n} | {r.clusters} | {100 * r.a:.1f}% | "
            f"{100 * r.b:.1f}% | {100 * r.diff:+.1f} | [{100 * r.lo:+.1f}, {100 * r.hi:+.1f}] | "
            f"{r.p:.3g} | {r.test} |"
        )
    if not rows:
        lines.append("| (no matched units) | | | | | | | | | | |")
    return "\n".join(lines) + "\n"


def to_csv(rows: list[CompareRow], *, simulated: bool = False, labels: tuple[str, str, str] | None = None) -> str:
    """The table as CSV; a simulated run's file starts with one ``# SIMULATED EXAMINEE`` line.
    With ``labels`` the ``a``/``b`` columns are named after them (``static``, ``adaptive``)."""
    buf = io.StringIO()
    if simulated:
        buf.write(f"# {SIMULATED_STATEMENT}\n")
    writer = csv.writer(buf, lineterminator="\n")
    la, lb = labels[:2] if labels else ("a", "b")
    writer.writerow(["model", "defender", "metric", "n", "clusters", la, lb, "diff", "lo", "hi", "p", "test"])
    for r in rows:
        writer.writerow([r.model, r.defender, r.metric, r.n, r.clusters, f"{r.a:.6f}", f"{r.b:.6f}",
                         f"{r.diff:.6f}", f"{r.lo:.6f}", f"{r.hi:.6f}", f"{r.p:.6g}", r.test])
    return buf.getvalue()


def plot(rows: list[CompareRow], path: Path, *, simulated: bool = False,
         columns: tuple[str, str, str] | None = None) -> Path:
    """A forest plot of Δ (points) with its interval, one line per model/defender/metric."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.0, 0.35 * max(len(rows), 3) + 1.0))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    labels = [f"{r.model} · {r.defender} · {r.metric}" for r in rows]
    ys = list(range(len(rows)))[::-1]
    for y, r in zip(ys, rows, strict=True):
        ax.plot([100 * r.lo, 100 * r.hi], [y, y], color="#2471a3")
        ax.plot([100 * r.diff], [y], "o", color="#c0392b")
    ax.axvline(0, color="grey", lw=0.8)
    ax.set_yticks(ys, labels, fontsize=7)
    la, lb = columns[:2] if columns else ("A", "B")
    ax.set_xlabel(f"Δ {lb} - {la} (points, 95% CI clustered on items)")
    fig.tight_layout()
    if simulated:
        mark_simulated(fig)
        fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def compare_command(run_a: str, run_b: str, out: str | None = None, seed: int = 0) -> int:
    """Print the paired table; with ``out``, also write ``compare.md``, ``compare.csv`` and
    ``compare.png`` there. Exit 2 when the runs share no model/defender."""
    records_a, records_b = _load(Path(run_a)), _load(Path(run_b))
    rows = compare_records(records_a, records_b, seed=seed)
    if not rows:
        raise ConfigError(f"{run_a} and {run_b} share no matched model/defender units")
    simulated = is_simulated({r.model for r in records_a} | {r.model for r in records_b})
    from ._adaptive import compare_labels, unfixed_units

    labels = compare_labels(Path(run_a), Path(run_b))
    if labels and (unfixed := unfixed_units(records_a, records_b)):
        raise ConfigError(f"{run_a} and {run_b}: {len(unfixed)} paired unit(s) differ in gold, content type or "
                       f"provenance (first: {unfixed[0]}); an adaptive comparison needs the same items")
    text = to_markdown(rows, run_a, run_b, simulated=simulated, labels=labels)
    print(text, end="")
    if out:
        folder = Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "compare.md").write_text(text, encoding="utf-8")
        (folder / "compare.csv").write_text(to_csv(rows, simulated=simulated, labels=labels), encoding="utf-8")
        plot(rows, folder / "compare.png", simulated=simulated, columns=labels)
    return 0
