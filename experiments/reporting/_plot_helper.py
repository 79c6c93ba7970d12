"""Drawing some of a report's figures in a second process while the report is written.

:class:`PlotHelper` is what :func:`~._plots.write_plots` accepts; :class:`~._forked.ForkedPlotter`
is the report worker's: a child forked from the warm worker (:mod:`._worker`), so it starts with
matplotlib loaded at no import cost.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol


class PlotHelper(Protocol):
    """Somewhere else to draw some of the figures meanwhile."""

    def submit(self, run_dir: Path, metrics: dict[str, Any], keys: Sequence[str]) -> None:
        """Start drawing ``keys`` (answered by :meth:`collect`)."""

    def collect(self) -> dict[str, Path] | None:
        """The paths of the submitted figures, or None when they could not be drawn there."""


HELPER_KEYS = ("robustness_tradeoff", "cost_vs_asr")
"""The figures a :class:`PlotHelper` draws (about half of the drawing time)."""
