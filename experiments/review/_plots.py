"""PNG figures of a review: worst-case rates, Rubric A pass rates and agreement.

Drawn on ``matplotlib.figure.Figure`` with the Agg canvas (as the run report's plots), so no
display and no global backend are involved; PNGs carry no "Software" metadata.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ._analyze import RULES
from ._rubrics import CRITERION_NAMES

PLOTS_DIR = "plots"
DPI = 110
_COLOURS = {"conservative": "#c0392b", "mean": "#e67e22", "strict": "#7f8c8d"}


def _save(fig: Figure, path: Path) -> Path:
    FigureCanvasAgg(fig)
    tmp = path.with_name(path.name + ".tmp")
    fig.savefig(tmp, format="png", dpi=DPI, metadata={"Software": None})
    tmp.replace(path)
    return path


def _errbar(ax: Axes, y: float, block: Mapping[str, Any], colour: str, label: str | None, scale: float = 100.0) -> None:
    value = block.get("value")
    if value is None:
        return
    lo, hi = block.get("lo"), block.get("hi")
    err = [[scale * (value - lo)], [scale * (hi - value)]] if lo is not None and hi is not None else None
    ax.barh(y, scale * value, height=0.25, color=colour, label=label)
    if err is not None:
        ax.errorbar(scale * value, y, xerr=err, fmt="none", ecolor="black", capsize=3, lw=1)


def _worst_case(doc: Mapping[str, Any]) -> Figure:
    groups = {"all tasks": doc["worst_case"], **{f"defender: {d}": b for d, b in doc["worst_case_by"]["defender"].items()}}
    fig = Figure(figsize=(8, 1.2 + 0.9 * len(groups)))
    ax = fig.add_subplot()
    for i, blocks in enumerate(groups.values()):
        for j, rule in enumerate(RULES):
            _errbar(ax, i + (j - 1) * 0.27, blocks[rule], _COLOURS[rule], rule if i == 0 else None)
    ax.set_yticks(range(len(groups)), [f"{g} (n={b['conservative']['n']})" for g, b in groups.items()])
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("worst-case tasks (%), Wilson 95% CI")
    ax.set_title("Worst-case outputs by aggregation rule")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig


def _rubric_a(doc: Mapping[str, Any]) -> Figure:
    names = list(CRITERION_NAMES["A"])
    fig = Figure(figsize=(8, 1.2 + 0.5 * len(names)))
    ax = fig.add_subplot()
    for i, name in enumerate(names):
        _errbar(ax, i, doc["rubric_a"]["pass"][name], "#2e86c1", None)
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    comp = doc["rubric_a"]["composite"]
    shown = "—" if comp["value"] is None else f"{comp['value']:.2f} [{comp['lo']:.2f}, {comp['hi']:.2f}]"
    ax.set_xlabel("tasks passing (mean ≥ 1.5) (%), Wilson 95% CI")
    ax.set_title(f"Rubric A pass rates; composite {shown}")
    fig.tight_layout()
    return fig


def _agreement(doc: Mapping[str, Any]) -> Figure:
    names = list(doc["ac2"])
    fig = Figure(figsize=(8, 1.2 + 0.4 * len(names)))
    ax = fig.add_subplot()
    for i, name in enumerate(names):
        block = doc["ac2"][name]
        if block["value"] is None:
            ax.text(0.02, i, "too few multi-rated tasks", va="center", fontsize=8)
            continue
        ax.errorbar(block["value"], i, xerr=[[block["value"] - block["lo"]], [block["hi"] - block["value"]]],
                    fmt="o", color="#1e8449", capsize=3)
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.set_xlim(-0.2, 1.0)
    ax.axvline(0, color="#999", lw=0.8)
    ax.set_xlabel("Gwet's AC2 (ordinal weights), 95% CI")
    la = doc["label_agreement"]
    shown = "—" if la["value"] is None else f"{la['k']}/{la['n']} = {100 * la['value']:.1f}% [{100 * la['lo']:.1f}, {100 * la['hi']:.1f}]"
    ax.set_title(f"Inter-rater agreement on multi-rated tasks\nclinician vs automatic correctness: {shown}")
    fig.tight_layout()
    return fig


def write_review_plots(out_dir: Path, doc: Mapping[str, Any], *, simulated: bool = False) -> dict[str, Path]:
    """Write ``OUT/plots/*.png`` (marked in the figure when the responses are simulated);
    returns plot key -> path."""
    from medmis.experiments.reporting import mark_simulated

    plots_dir = out_dir / PLOTS_DIR
    plots_dir.mkdir(parents=True, exist_ok=True)
    out = {}
    for key, draw in (("worst_case", _worst_case), ("rubric_a_pass", _rubric_a), ("agreement", _agreement)):
        fig = draw(doc)
        if simulated:
            mark_simulated(fig)
            fig.tight_layout()
        out[key] = _save(fig, plots_dir / f"{key}.png")
    return out
