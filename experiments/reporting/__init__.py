"""Metrics -> reports: ``metrics.json``/``.csv``, ``report.md``, ``report.html`` and plots.

``write_report(run_dir)`` (re)writes every report file of a run folder from its records.
Exports load on first use: ``medmis run`` imports only the report worker from here while its
second process loads the rest (:mod:`._worker`).
"""

from typing import TYPE_CHECKING

from medmis.tools._lazy import lazy_exports

if TYPE_CHECKING:
    from ._html import write_html
    from ._paper_tables import paper_tables, render_paper_tables
    from ._plots import PLOT_FILES, PLOTS_DIR, write_plots
    from ._report import RunData, load_run, render_markdown, write_report

_HOME = {"write_html": "_html", "PLOT_FILES": "_plots", "PLOTS_DIR": "_plots", "write_plots": "_plots",
         "paper_tables": "_paper_tables", "render_paper_tables": "_paper_tables",
         "RunData": "_report", "load_run": "_report", "render_markdown": "_report", "write_report": "_report"}
__getattr__ = lazy_exports(__name__, _HOME, globals())

__all__ = [
    "PLOTS_DIR",
    "PLOT_FILES",
    "RunData",
    "load_run",
    "paper_tables",
    "render_markdown",
    "render_paper_tables",
    "write_html",
    "write_plots",
    "write_report",
]
