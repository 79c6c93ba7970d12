"""Metrics -> reports: ``metrics.json``/``.csv``, ``report.md``, ``report.html`` and plots.

``write_report(run_dir)`` (re)writes every report file of a run folder from its records.
Exports load on first use (matplotlib and DuckDB only when a report is written).
"""

import warnings
from typing import TYPE_CHECKING, Any

from medmis.tools import lazy_exports

if TYPE_CHECKING:
    from ._cases import RAW_LIMIT, agent_view, clip_text, question_from_trace
    from ._finish import finish_run
    from ._format import metric_rows
    from ._html import script_json, write_html
    from ._interrupted import report_interrupted
    from ._paper_tables import paper_tables, render_paper_tables
    from ._plots import PLOT_FILES, PLOTS_DIR, write_plots
    from ._report import RunData, load_run_data, render_markdown, write_report
    from ._simulated import SIMULATED_STATEMENT, is_simulated, mark_simulated

_HOME = {"write_html": "_html", "PLOT_FILES": "_plots", "PLOTS_DIR": "_plots", "write_plots": "_plots",
         "paper_tables": "_paper_tables", "render_paper_tables": "_paper_tables",
         "RunData": "_report", "load_run_data": "_report", "render_markdown": "_report", "write_report": "_report",
    **dict.fromkeys(("RAW_LIMIT", "agent_view", "clip_text", "question_from_trace"), "_cases"),
    "script_json": "_html",
    "metric_rows": "_format",
    "finish_run": "_finish",
    **dict.fromkeys(("report_interrupted",), "_interrupted"),
    **dict.fromkeys(("SIMULATED_STATEMENT", "is_simulated", "mark_simulated"), "_simulated"),
}
_lazy = lazy_exports(__name__, _HOME, globals())


def __getattr__(name: str) -> Any:
    # ``load_run`` was this package's name for ``load_run_data`` until the public
    # ``medmis.experiments.load_run`` (a run folder over DuckDB) took the name for itself.
    if name == "load_run":
        warnings.warn("medmis.experiments.reporting.load_run is deprecated: use load_run_data "
                      "(or medmis.experiments.load_run for a run folder)", DeprecationWarning, stacklevel=2)
        name = "load_run_data"
    return _lazy(name)


__all__ = [
    "PLOTS_DIR",
    "PLOT_FILES",
    "RAW_LIMIT",
    "SIMULATED_STATEMENT",
    "RunData",
    "agent_view",
    "clip_text",
    "finish_run",
    "is_simulated",
    "load_run_data",
    "mark_simulated",
    "metric_rows",
    "paper_tables",
    "question_from_trace",
    "render_markdown",
    "render_paper_tables",
    "report_interrupted",
    "script_json",
    "write_html",
    "write_plots",
    "write_report",
]
