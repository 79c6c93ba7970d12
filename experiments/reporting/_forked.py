"""The report worker's :class:`~._plot_helper.PlotHelper`: a child forked from the warm worker."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from ._lines import serve_paths
from ._plots import PLOTS_DIR, draw_plots


class ForkedPlotter:
    """A child forked from the warm worker that draws some of a report's figures meanwhile.

    Forked after the imports, it starts warm at no import cost; it reads one JSON request per
    line (run folder, metrics, figure keys) and answers the paths it wrote. Whatever it fails
    to deliver (it died, answered an error, or the pipe broke) the worker draws itself
    (:func:`~._plots.write_plots`), so the files never depend on it. Linux only: forking a
    process that has loaded numpy and matplotlib is not safe everywhere.
    """

    def __init__(self) -> None:
        request_r, request_w = os.pipe()
        answer_r, answer_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child; its drawing is checked through the parent
            code = 0
            try:
                os.close(request_w)
                os.close(answer_r)
                devnull = os.open(os.devnull, os.O_RDWR)
                os.dup2(devnull, 0)  # the parent's pipes to medmis run are not the child's
                os.dup2(devnull, 1)
                _draw_requests(os.fdopen(request_r, encoding="utf-8"), os.fdopen(answer_w, "w", encoding="utf-8"))
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        os.close(request_r)
        os.close(answer_w)
        self.pid = pid
        self._requests: IO[str] | None = os.fdopen(request_w, "w", encoding="utf-8")
        self._answers = os.fdopen(answer_r, encoding="utf-8")
        self._pending = False

    @classmethod
    def start(cls) -> ForkedPlotter | None:
        """A started helper, or None where forking is not used or fails."""
        if not sys.platform.startswith("linux"):
            return None
        try:
            return cls()
        except OSError:
            return None

    def submit(self, run_dir: Path, metrics: dict[str, Any], keys: Sequence[str]) -> None:
        try:
            if self._requests is None:
                return
            self._requests.write(json.dumps({"run_dir": str(run_dir), "metrics": metrics, "keys": list(keys)}) + "\n")
            self._requests.flush()
            self._pending = True
        except (OSError, ValueError):
            self._requests = None

    def collect(self) -> dict[str, Path] | None:
        if not self._pending:
            return None
        self._pending = False
        try:
            answer = json.loads(self._answers.readline() or "null")
        except (OSError, ValueError):
            return None
        if not isinstance(answer, dict) or not isinstance(answer.get("paths"), dict):
            return None
        return {key: Path(path) for key, path in answer["paths"].items()}


def _draw_requests(requests: IO[str], answers: IO[str]) -> None:  # pragma: no cover - in the child
    serve_paths(requests, answers, lambda request: draw_plots(
        Path(request["run_dir"]) / PLOTS_DIR, request["metrics"], request["keys"]))
