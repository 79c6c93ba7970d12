"""Metrics -> reports: ``metrics.json``/``.csv``, ``report.md``, ``report.html`` and plots.

``write_report(run_dir)`` (re)writes every report file of a run folder from its records.
"""

from ._html import write_html
from ._plots import PLOT_FILES, PLOTS_DIR, write_plots
from ._report import RunData, load_run, render_markdown, write_report

__all__ = [
    "PLOTS_DIR",
    "PLOT_FILES",
    "RunData",
    "load_run",
    "render_markdown",
    "write_html",
    "write_plots",
    "write_report",
]
