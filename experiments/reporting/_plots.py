"""PNG figures for a run, drawn from its parsed ``metrics.json``.

Figures are built on ``matplotlib.figure.Figure`` with the Agg canvas directly rather than
through ``pyplot``: no display is needed, no global backend is switched under the caller,
and nothing leaks between calls. Output is deterministic for equal input and matplotlib
version: fixed sizes and dpi, models and defenders in a fixed order, and no "Software"
metadata in the PNG.

Missing data never fails a figure: a proportion over zero cases (``value`` null) is drawn
as a blank cell or a skipped point, and a panel without any data says so.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from medmis.experiments.benchmark import CONTENT_TYPES, PROVENANCES

from ._labels import label_points as _label_points
from ._labels import place_labels as _place_labels
from ._labels import short_defender as _short_defender
from ._simulated import is_simulated, mark_simulated

if TYPE_CHECKING:  # imported by the first figure drawn: a run that draws none never loads it
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

PLOTS_DIR = "plots"
"""Sub-directory of the run directory the PNGs are written to."""

DPI = 110
STRATUM_JOIN = " × "
"""Separator of crossed stratum labels in ``metrics.json`` (``content_type_x_provenance``)."""

PLOT_FILES: dict[str, str] = {
    "asr_by_defender": "asr_by_defender.png",
    "robustness_tradeoff": "robustness_tradeoff.png",
    "cost_vs_asr": "cost_vs_asr.png",
    "strata_heatmap": "strata_heatmap.png",
}
"""Plot key -> file name under ``DIR/plots``; ``write_plots`` returns the same keys."""

SHORT_LABELS: dict[str, str] = {
    "Relationship / Sequence Inversion": "Rel./seq. inversion",
    "Threshold / Reference Corruption": "Threshold/reference",
    "Cue Remapping": "Cue remapping",
    "Spurious Anchoring": "Spurious anchoring",
    "Exception Poisoning": "Exception poisoning",
    "Neutral False Statement": "Neutral",
    "Patient Self-Diagnosis / Belief / Claim": "Patient",
    "Authority (Guideline / Discharge Note / SOP)": "Authority",
}

_T1 = "#c0392b"
_T2 = "#2471a3"
_MISSING = "white"
_CMAP = "YlOrRd"  # its 0% end is visibly tinted, unlike a blank (missing) cell


# ---------------------------------------------------------------------------------------------
# Reading metrics.json defensively (shared with the HTML report)


def prop(block: Mapping[str, Any] | None, metric: str) -> dict[str, Any] | None:
    """A metric's ``{"value", "k", "n", "lo", "hi"}`` block, or None if absent or undefined."""
    if not isinstance(block, Mapping):
        return None
    p = block.get(metric)
    if not isinstance(p, Mapping) or p.get("value") is None or not p.get("n"):
        return None
    return dict(p)


def find_baseline(metrics: Mapping[str, Any], default: str = "none") -> str:
    """The baseline defender named by the paired comparisons, else ``default``."""
    for by_defender in metrics.values():
        if not isinstance(by_defender, Mapping):
            continue
        for block in by_defender.values():
            paired = block.get("paired") if isinstance(block, Mapping) else None
            if isinstance(paired, Mapping):
                for comp in paired.values():
                    if isinstance(comp, Mapping) and comp.get("baseline"):
                        return str(comp["baseline"])
    return default


def model_order(metrics: Mapping[str, Any]) -> list[str]:
    """Models in sorted order (metrics.json order depends on record order)."""
    return sorted(m for m, v in metrics.items() if isinstance(v, Mapping))


def defender_order(defenders: Sequence[str] | Mapping[str, Any], baseline: str) -> list[str]:
    """The baseline first, then the others sorted, so every figure and table agrees."""
    names = sorted(set(defenders))
    return [d for d in names if d == baseline] + [d for d in names if d != baseline]


def stratum_order(labels: Sequence[str], canon: Sequence[str]) -> list[str]:
    """Known labels in the paper's order, then anything else sorted."""
    present = set(labels)
    return [c for c in canon if c in present] + sorted(present - set(canon))


def short_label(label: str, width: int = 22) -> str:
    """A compact axis label for a content type or provenance."""
    text = SHORT_LABELS.get(label, label)
    return text if len(text) <= width else text[: width - 1] + "…"


def cost_axis(metrics: Mapping[str, Any]) -> tuple[str, str]:
    """``(cost key, axis label)``: tokens per case when any are recorded, else model calls."""
    for by_defender in metrics.values():
        if not isinstance(by_defender, Mapping):
            continue
        for block in by_defender.values():
            cost = block.get("cost") if isinstance(block, Mapping) else None
            if isinstance(cost, Mapping) and (cost.get("tokens_per_case") or 0) > 0:
                return "tokens_per_case", "tokens per case"
    return "llm_calls_per_case", "model calls per case"


def crossed_labels(by_defender: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """Content types and provenances over every defender of a model, in canonical order."""
    cts: set[str] = set()
    pvs: set[str] = set()
    for block in by_defender.values():
        strata = block.get("strata") if isinstance(block, Mapping) else None
        if not isinstance(strata, Mapping):
            continue
        cts.update(strata.get("content_type") or {})
        pvs.update(strata.get("provenance") or {})
        for label in strata.get("content_type_x_provenance") or {}:
            if STRATUM_JOIN in label:
                ct, pv = label.split(STRATUM_JOIN, 1)
                cts.add(ct)
                pvs.add(pv)
    return stratum_order(sorted(cts), CONTENT_TYPES), stratum_order(sorted(pvs), PROVENANCES)


# ---------------------------------------------------------------------------------------------
# Figures


def write_plots(run_dir: Path, metrics: dict[str, Any]) -> dict[str, Path]:
    """Write the run's figures as PNGs under ``run_dir/plots``; their paths, keyed as in
    ``PLOT_FILES`` (only those of :func:`plot_keys`: empty when ``metrics``, the parsed
    ``metrics.json``, holds no model or nothing to compare).
    """
    keys = plot_keys(metrics)
    if not keys:
        return {}
    out_dir = Path(run_dir) / PLOTS_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    return draw_plots(out_dir, metrics, keys)


COMPARISONS = ("asr_by_defender", "robustness_tradeoff", "cost_vs_asr")
"""Figures that set defenders side by side."""


def plot_keys(metrics: Mapping[str, Any]) -> list[str]:
    """The figures ``write_plots`` draws for ``metrics``: those that compare something.

    The three defender comparisons need a model with two defenders or more (one bar pair or
    one point compares nothing); the strata heatmap needs two strata cells or more (content
    type x provenance) under some model (one cell is the overall Type 1 ASR of the tables).
    """
    by_model = [by for by in metrics.values() if isinstance(by, Mapping)]
    compared = any(len(by) > 1 for by in by_model)
    strata = any(len(cts) * len(pvs) > 1 for cts, pvs in map(crossed_labels, by_model))
    return [key for key in PLOT_FILES if (compared if key in COMPARISONS else strata)]


def draw_plots(out_dir: Path, metrics: dict[str, Any], keys: Sequence[str]) -> dict[str, Path]:
    """Draw the figures ``keys`` (of ``PLOT_FILES``) into ``out_dir``; their paths."""
    models, baseline = model_order(metrics), find_baseline(metrics)
    builders = {"asr_by_defender": _asr_by_defender, "robustness_tradeoff": _robustness_tradeoff,
                "cost_vs_asr": _cost_vs_asr, "strata_heatmap": _strata_heatmap}
    simulated = is_simulated(models)
    out = {}
    for key in keys:
        fig = builders[key](metrics, models, baseline)
        if simulated:
            mark_simulated(fig)
        out[key] = _save(fig, Path(out_dir) / PLOT_FILES[key])
    return out


def _new_figure(width: float, height: float) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, path: Path) -> Path:
    # Write-then-rename: a browser or report reader never sees half a PNG.
    _place_labels(fig)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # unique per process
    # No "Software" entry, so equal input gives byte-equal files across machines.
    fig.savefig(tmp, format="png", dpi=DPI, metadata={"Software": None})
    os.replace(tmp, path)
    return path


def _no_data(ax: Axes, text: str = "no data") -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", color="#777777",
            transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _pct_err(p: Mapping[str, Any]) -> tuple[float, float, float]:
    """Value and distances to the Wilson bounds, in percent."""
    v = 100 * float(p["value"])
    lo = 100 * float(p["lo"] if p.get("lo") is not None else p["value"])
    hi = 100 * float(p["hi"] if p.get("hi") is not None else p["value"])
    return v, max(0.0, v - lo), max(0.0, hi - v)


def _asr_by_defender(metrics: Mapping[str, Any], models: list[str], baseline: str) -> Figure:
    """(a) T1 and T2 ASR per defender, Wilson error bars, one panel per model."""
    n_def = max(len(metrics[m]) for m in models)
    height = max(2.6, 0.55 * n_def + 1.4)
    fig = _new_figure(6.4 * len(models), height)
    axes = fig.subplots(1, len(models), squeeze=False)[0]
    for ax, model in zip(axes, models, strict=True):
        by_def = metrics[model]
        defenders = defender_order(by_def, baseline)
        ax.set_title(_short_model(model), fontsize=10)
        if not defenders:
            _no_data(ax)
            continue
        y = np.arange(len(defenders), dtype=float)
        h = 0.38
        any_bar = False
        for offset, metric, color, name in ((-h / 2, "type1_asr", _T1, "Type 1 ASR"),
                                            (h / 2, "type2_asr", _T2, "Type 2 ASR")):
            vals: list[float] = []
            errs: list[list[float]] = [[], []]
            ys: list[float] = []
            for yi, d in zip(y, defenders, strict=True):
                p = prop(by_def[d], metric)
                if p is None:
                    ax.text(1.01, yi + offset, "n/a", va="center", fontsize=6.5,
                            color="#777777", transform=ax.get_yaxis_transform())
                    continue
                v, el, eh = _pct_err(p)
                # The count makes a 0% bar (invisible) and a tiny n readable at a glance.
                # Printed in a column right of the axes, clear of bars and error bars.
                ax.text(1.01, yi + offset, f"{v:.0f}% ({p['k']}/{p['n']})", va="center",
                        fontsize=6.5, color=color, transform=ax.get_yaxis_transform())
                vals.append(v)
                errs[0].append(el)
                errs[1].append(eh)
                ys.append(yi + offset)
            if vals:
                any_bar = True
                ax.barh(ys, vals, height=h, color=color, label=name, xerr=errs,
                        error_kw={"elinewidth": 1, "capsize": 2, "ecolor": "#333333"})
        ax.set_yticks(y, [_short_defender(d) for d in defenders], fontsize=8)
        ax.invert_yaxis()  # baseline on top, as in the tables
        ax.set_xlim(0, 100)
        ax.set_xlabel("attack success rate (%), 95% Wilson CI", fontsize=8)
        ax.grid(axis="x", color="#dddddd", linewidth=0.6)
        ax.set_axisbelow(True)
        if any_bar:
            # Below the axes so that it never hides a bar.
            ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncols=2,
                      frameon=False)
    return fig


def _robustness_tradeoff(metrics: Mapping[str, Any], models: list[str], baseline: str) -> Figure:
    """(b) T1 ASR (x) against clean accuracy and against Type 2 recovery (y), per defender."""
    fig = _new_figure(11.0, 4.2 * len(models))
    axes = fig.subplots(len(models), 2, squeeze=False)
    for row, model in zip(axes, models, strict=True):
        by_def = metrics[model]
        defenders = defender_order(by_def, baseline)
        for ax, ymetric, ylabel in ((row[0], "clean_acc", "clean accuracy (%)"),
                                    (row[1], "type2_recovery", "Type 2 recovery (%)")):
            ax.set_title(f"{_short_model(model)}: {ylabel.split(' (')[0]}", fontsize=10)
            labels: list[tuple[str, float, float]] = []
            for d in defenders:
                px, py = prop(by_def[d], "type1_asr"), prop(by_def[d], ymetric)
                if px is None or py is None:
                    continue  # a point needs both coordinates
                x, xl, xh = _pct_err(px)
                yv, yl, yh = _pct_err(py)
                color = "#555555" if d == baseline else _T1
                ax.errorbar([x], [yv], xerr=[[xl], [xh]], yerr=[[yl], [yh]], fmt="o",
                            color=color, ecolor="#bbbbbb", elinewidth=0.8, markersize=5)
                labels.append((d, x, yv))
            if not labels:
                _no_data(ax, "no data" if ymetric == "clean_acc"
                         else "no data (recovery needs clean-wrong items)")
                continue
            ax.set_xlim(-2, 102)
            ax.set_ylim(-2, 102)
            _label_points(ax, labels)
            ax.set_xlabel("Type 1 ASR (%) - lower is more robust", fontsize=8)
            ax.set_ylabel(ylabel, fontsize=8)
            ax.grid(color="#eeeeee", linewidth=0.6)
    return fig


def _cost_vs_asr(metrics: Mapping[str, Any], models: list[str], baseline: str) -> Figure:
    """(c) Cost per case (x) against ΔT1 ASR vs the baseline (y) with bootstrap CI bars."""
    fig = _new_figure(6.4 * len(models), 4.4)
    axes = fig.subplots(1, len(models), squeeze=False)[0]
    for ax, model in zip(axes, models, strict=True):
        by_def = metrics[model]
        # Per model: a simulated examinee reports no tokens, a real model next to it does.
        cost_key, cost_label = cost_axis({model: by_def})
        ax.set_title(_short_model(model), fontsize=10)
        points: list[tuple[str, float, float, float, float]] = []
        for d in defender_order(by_def, baseline):
            block = by_def[d] if isinstance(by_def[d], Mapping) else {}
            cost = (block.get("cost") or {}).get(cost_key)
            if cost is None or not math.isfinite(float(cost)):
                continue
            if d == baseline:
                points.append((d, float(cost), 0.0, 0.0, 0.0))
                continue
            comp = (block.get("paired") or {}).get("type1_asr") or {}
            if comp.get("diff") is None or not comp.get("n"):
                continue  # no shared units with the baseline: nothing to plot
            diff = 100 * float(comp["diff"])
            lo_raw, hi_raw = comp.get("lo"), comp.get("hi")
            lo = 100 * float(comp["diff"] if lo_raw is None else lo_raw)
            hi = 100 * float(comp["diff"] if hi_raw is None else hi_raw)
            points.append((d, float(cost), diff, max(0.0, diff - lo), max(0.0, hi - diff)))
        if not points:
            _no_data(ax, f"no cost or paired data vs {baseline}")
            continue
        for d, x, yv, el, eh in points:
            color = "#555555" if d == baseline else _T1
            ax.errorbar([x], [yv], yerr=[[el], [eh]], fmt="o", color=color, ecolor="#999999",
                        elinewidth=1, capsize=2, markersize=5)
        xs = [p[1] for p in points]
        positive = [x for x in xs if x > 0]
        # A log axis only pays off when costs span more than an order of magnitude.
        if len(positive) == len(xs) and max(xs) / min(xs) > 10:
            ax.set_xscale("log")
            from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

            # Plain 1-2-5 numbers: the default "3×10^2" minor labels collide.
            ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}"))
            ax.xaxis.set_minor_formatter(NullFormatter())
        ax.axhline(0, color="#888888", linewidth=0.8, linestyle="--")
        _label_points(ax, [(d, x, yv) for d, x, yv, _, _ in points])
        ax.set_xlabel(cost_label + (" (log)" if ax.get_xscale() == "log" else ""), fontsize=8)
        ax.set_ylabel(f"Δ Type 1 ASR vs {baseline} (pts), 95% CI", fontsize=8)
        ax.grid(color="#eeeeee", linewidth=0.6)
    return fig


def _strata_heatmap(metrics: Mapping[str, Any], models: list[str], baseline: str) -> Figure:
    """(d) Type 1 ASR per content type × provenance, one small heatmap per model × defender."""
    panels = [(m, d) for m in models for d in defender_order(metrics[m], baseline)]
    rows_cols = {m: crossed_labels(metrics[m]) for m in models}
    if not panels or not any(r and c for r, c in rows_cols.values()):
        fig = _new_figure(6.0, 2.5)
        _no_data(fig.subplots(), "no content type × provenance strata")
        return fig
    ncols = min(3, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig = _new_figure(5.0 * ncols, 3.1 * nrows + 0.4)
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    image = None
    for i, ax in enumerate(axes):
        if i >= len(panels):
            ax.set_axis_off()
            continue
        model, defender = panels[i]
        cts, pvs = rows_cols[model]
        block = metrics[model][defender] if isinstance(metrics[model][defender], Mapping) else {}
        cells = (block.get("strata") or {}).get("content_type_x_provenance") or {}
        title = _short_defender(defender, 40)
        ax.set_title(title if len(models) == 1 else f"{_short_model(model)} · {title}",
                     fontsize=9)
        if not cts or not pvs:
            _no_data(ax)
            continue
        grid = np.full((len(cts), len(pvs)), np.nan)
        for r, ct in enumerate(cts):
            for c, pv in enumerate(pvs):
                p = prop(cells.get(ct + STRATUM_JOIN + pv), "type1_asr")
                if p is None:
                    ax.text(c, r, "–", ha="center", va="center", fontsize=8, color="#999999")
                    continue
                grid[r, c] = 100 * float(p["value"])
                ax.text(c, r, f"{grid[r, c]:.0f}%\nn={p['n']}", ha="center", va="center",
                        fontsize=7, color="white" if grid[r, c] > 60 else "black")
        # Masked (n = 0) cells show the hatched axes background: blank, not zero.
        ax.set_facecolor(_MISSING)
        ax.patch.set_hatch("///")
        ax.patch.set_edgecolor("#dddddd")
        image = ax.imshow(np.ma.masked_invalid(grid), cmap=_CMAP, vmin=0, vmax=100,
                          aspect="auto")
        ax.set_xticks(range(len(pvs)), [short_label(p, 14) for p in pvs], fontsize=7)
        ax.set_yticks(range(len(cts)), [short_label(c) for c in cts], fontsize=7)
        ax.tick_params(length=0)
    if image is not None:
        fig.colorbar(image, ax=list(axes), shrink=0.6, label="Type 1 ASR (%)")
    return fig


def _short_model(model: str, width: int = 40) -> str:
    return model if len(model) <= width else "…" + model[-(width - 1):]
