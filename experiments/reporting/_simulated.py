"""The simulated-examinee statement, one wording for every surface that shows a result."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure

SIMULATED_PREFIX = "mock/examinee"
"""Model specs starting with this are the offline demo's simulated examinee."""

SIMULATED_STATEMENT = ("SIMULATED EXAMINEE: these results come from a simulated examinee, not a "
                       "model; they exercise the pipeline only and are not measurements.")
"""The one-line statement every output of a simulated run carries."""


def is_simulated(models: Iterable[str]) -> bool:
    """Whether any of these model specs is the simulated examinee."""
    return any(str(m).startswith(SIMULATED_PREFIX) for m in models)


def mark_simulated(fig: Figure) -> None:
    """Put the statement into the figure itself: a title line and a faint diagonal mark."""
    fig.text(0.5, 0.5, "SIMULATED", transform=fig.transFigure, ha="center", va="center",
             rotation=25, fontsize=48, color="#c0392b", alpha=0.12, fontweight="bold", zorder=0)
    fig.suptitle("SIMULATED EXAMINEE - not model measurements", color="#c0392b", fontsize=9,
                 fontweight="bold")
