"""Formatting helpers shared by the report renderers, and the ``metrics.csv`` rows."""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from medmis.experiments.analysis import DefenderMetrics, MetricsReport, PairedComparison, Proportion

CSV_COLUMNS: tuple[str, ...] = (
    "model", "defender", "stratum_kind", "stratum", "metric", "value", "k", "n", "lo", "hi",
    "unit", "clusters", "deff",
)


# ---------------------------------------------------------------------------------------------
# CSV


OVERALL_STRATUM = ("all", "all")
"""``(stratum_kind, stratum)`` of the whole run's rows in ``metrics.csv`` and ``metrics.parquet``."""


def metric_rows(report: MetricsReport | Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """One row per model x defender x stratum x metric; the whole run is stratum ``all/all``.

    The one definition of the metrics table: ``metrics.csv`` and ``medmis export parquet``'s
    ``metrics.parquet`` are both these rows, so the two files agree row for row.

    Args:
        report: The run's metrics, or its ``metrics.json`` object (``{model: {defender: ...}}``).
    """
    metrics = report.to_json_dict() if isinstance(report, MetricsReport) else report
    fields = CSV_COLUMNS[CSV_COLUMNS.index("value"):]
    for model, defenders in metrics.items():
        for defender, block in (defenders or {}).items():
            blocks = [(*OVERALL_STRATUM, block)] + [
                (kind, label, sub)
                for kind, by_label in (block.get("strata") or {}).items()
                for label, sub in (by_label or {}).items()
            ]
            for kind, label, scope in blocks:
                for metric, p in scope.items():
                    if isinstance(p, Mapping) and "value" in p and "n" in p:  # a proportion
                        yield {"model": model, "defender": defender, "stratum_kind": kind,
                               "stratum": label, "metric": metric, **{c: p.get(c) for c in fields}}


def render_csv(report: MetricsReport) -> str:
    """``metrics.csv`` content; undefined values are empty cells."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(CSV_COLUMNS), lineterminator="\n")
    writer.writeheader()
    for row in metric_rows(report):
        writer.writerow({k: "" if v is None else v for k, v in row.items()})
    return buf.getvalue()

# ---------------------------------------------------------------------------------------------
# Formatting helpers


def fmt_ci(p: Proportion) -> str:
    """``"51.5% [45.1, 57.8]"``, or an em dash when the proportion is undefined."""
    if p.value is None or p.lo is None or p.hi is None:
        return "—"
    return f"{100 * p.value:.1f}% [{100 * p.lo:.1f}, {100 * p.hi:.1f}]"


def fmt_count(p: Proportion) -> str:
    """``"12.5% (3/24)"``, or an em dash when the proportion is undefined."""
    if p.value is None:
        return "—"
    return f"{100 * p.value:.1f}% ({p.k}/{p.n})"


def fmt_delta(c: PairedComparison | None) -> str:
    """A paired difference in percentage points with its CI, e.g. ``"-10.2 [-15.0, -5.1]"``."""
    if c is None or c.diff is None or c.lo is None or c.hi is None:
        return "—"
    # Adding 0.0 turns -0.0 into 0.0 so that no difference never prints as "-0.0".
    diff, lo, hi = (100 * v + 0.0 for v in (c.diff, c.lo, c.hi))
    return f"{diff:+.1f} [{lo:+.1f}, {hi:+.1f}]"


def fmt_p(c: PairedComparison | None) -> str:
    """McNemar p-value, or an em dash when there were no shared units."""
    if c is None or c.n == 0:
        return "—"
    return "<0.001" if c.p_value < 0.001 else f"{c.p_value:.3f}"


def fmt_num(x: float | None, digits: int = 1) -> str:
    """A number with thousands separators, or an em dash for None."""
    return "—" if x is None else f"{x:,.{digits}f}"


_TAG_START = re.compile(r"<(?=[A-Za-z/!?])")


def md_cell(text: object) -> str:
    """Cell text safe in a markdown table: no raw HTML (a subset name such as ``<img src=x>``
    stays text), no link or image syntax, no line break or ``|`` that would end the cell."""
    out = " ".join(str(text).splitlines())
    out = out.replace("&", "&amp;") if "&" in out and re.search(r"&#?\w+;", out) else out
    out = _TAG_START.sub("&lt;", out)
    return out.replace("![", "!\\[").replace("](", "\\](").replace("|", "\\|")


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-flavoured markdown table (cells escaped with :func:`md_cell`)."""
    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(md_cell(c) for c in cells) + " |"

    return "\n".join([line(header), line(["---"] * len(header)), *(line(r) for r in rows)])


def each_result(report: MetricsReport) -> Iterator[tuple[str, str, DefenderMetrics]]:
    for model, defenders in report.results.items():
        for defender, dm in defenders.items():
            yield model, defender, dm


def fmt_pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def fmt_usd(value: float | None) -> str:
    """Dollars with three significant digits below $1 (``$0.0000555``), cents above; an em
    dash when unpriced."""
    if value is None:
        return "—"
    if value == 0 or value >= 1:
        return f"${value:,.2f}"
    decimals = max(2, 2 - math.floor(math.log10(value)))
    return f"${value:.{decimals}f}"
