"""Writing a run's report from a second process that has loaded the reporting stack meanwhile.

``medmis run`` starts this worker before it starts its own work. While the run imports its
model SDKs and sends its calls, the worker imports DuckDB, the statistics and matplotlib on
the other core; when the run ends, the report is written from the records on disk by a
process that is already warm. The report is the one :func:`write_report` writes in-process,
byte for byte; only the waiting moves.

Protocol: one JSON line per request on the worker's stdin (``{"run_dir": …, "plugins": […]}``), one JSON line
per answer on its stdout (``{"paths": {name: path}}`` or ``{"error": "Type: message"}``). The
worker exits at the end of its stdin, so a parent that dies takes it along. Ctrl-C belongs to
the parent (which may still write the report of a stopped run): the worker ignores SIGINT.

A run that Ctrl-C or SIGTERM stopped (:class:`~medmis.experiments.harness._outcome.RunInterrupted`
leaving the ``with`` block) gets its report at once, which says the run is incomplete.

Anything the worker cannot do (it failed to start, died, or answered an error) is done again
in-process by :meth:`ReportWorker.write`, which then raises as ``write_report`` would:
a failure is never hidden. ``MEDMIS_REPORT_WORKER=0`` turns the worker off.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from medmis.tools import switched_on

from ._lines import serve_paths

ENV_VARIABLE = "MEDMIS_REPORT_WORKER"


def worker_enabled() -> bool:
    """Whether ``medmis run`` should start a worker (``MEDMIS_REPORT_WORKER`` is not ``0``)."""
    return switched_on(ENV_VARIABLE)


class ReportWorker:
    """A started worker process; :meth:`write` falls back to writing in-process."""

    def __init__(self, process: subprocess.Popen[str] | None) -> None:
        self._process = process

    @classmethod
    def start(cls) -> ReportWorker:
        """Start the worker (it begins importing at once); never raises."""
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", "medmis.experiments.reporting._worker"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, encoding="utf-8",
            )
        except OSError:
            process = None
        return cls(process)

    def write(self, run_dir: str | Path, plugins: Sequence[str] = ()) -> dict[str, Path]:
        """The report's paths, written by the worker if it can, otherwise in this process.
        ``plugins``: the run's local plug-in files (loaded in this process already), which the
        worker loads too so its registry knows their defenders (which are controls)."""
        answer = self._ask(str(run_dir), plugins)
        if answer is not None and isinstance(answer.get("paths"), dict):
            return {name: Path(path) for name, path in answer["paths"].items()}
        from ._report import write_report

        return write_report(run_dir)

    def _ask(self, run_dir: str, plugins: Sequence[str] = ()) -> dict[str, Any] | None:
        process = self._process
        if process is None or process.stdin is None or process.stdout is None or process.poll() is not None:
            return None
        try:
            process.stdin.write(json.dumps({"run_dir": run_dir, "plugins": list(plugins)}) + "\n")
            process.stdin.flush()
            line = process.stdout.readline()
        except (OSError, ValueError):
            return None
        try:
            answer = json.loads(line) if line else None
        except json.JSONDecodeError:
            return None
        return answer if isinstance(answer, dict) else None

    def close(self) -> None:
        """End the worker: closing its stdin ends it once it is idle.

        Nothing is left unanswered by then (:meth:`write` waits for its answer), so the worker
        is not waited for: its interpreter's own shutdown (matplotlib, DuckDB, about a second
        here) would only lengthen ``medmis run``. One that is still running after a grace
        period is killed by :meth:`reap`.
        """
        process = self._process
        if process is None:
            return
        try:
            if process.stdin is not None:
                process.stdin.close()
        except OSError:
            process.kill()
        if process.stdout is not None:
            process.stdout.close()

    def reap(self, timeout_s: float = 10.0) -> int | None:
        """Wait for the closed worker to end (killing it after ``timeout_s``); its exit code."""
        process, self._process = self._process, None
        if process is None:
            return None
        try:
            return process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            return process.wait()

    def __enter__(self) -> ReportWorker:
        return self

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        try:
            if isinstance(exc, KeyboardInterrupt):
                from medmis.experiments.harness import RunInterrupted

                # Ctrl-C or SIGTERM stopped the run: its report at once, marked incomplete
                if isinstance(exc, RunInterrupted):
                    from ._interrupted import report_interrupted

                    report_interrupted(self.write, exc.out, _notice)
        finally:
            self.close()


def _notice(message: str) -> None:
    print(f"medmis: {message}", file=sys.stderr)


# What a first report imports besides ``_report`` itself (its modules import some lazily).
_WARM = ("duckdb", "pyarrow", "threadpoolctl", "matplotlib.figure", "matplotlib.backends.backend_agg",
         "PIL.PngImagePlugin", "PIL.BmpImagePlugin", "PIL.GifImagePlugin",
         "PIL.JpegImagePlugin", "PIL.PpmImagePlugin", "medmis.experiments.harness._scan", "medmis.experiments.analysis._columnar",
         "medmis.experiments.reporting._plots", "medmis.experiments.reporting._html",
         "medmis.experiments.reporting._cases",
         "medmis.defenses")  # the verdict asks the defender registry which defenders are controls


def _serve(requests: IO[str], answers: IO[str]) -> None:
    import contextlib
    import gc
    import importlib

    from medmis.tools import collect_from_here

    gc.disable()  # the imports' objects live as long as the process: frozen below
    from ._report import write_report  # the import this process exists to do early

    for name in _WARM:
        with contextlib.suppress(ImportError):  # a missing one fails loudly where it is used
            importlib.import_module(name)
    from medmis.defenses import load_plugins, quiet_broken_plugins

    quiet_broken_plugins()  # the run that started this worker names a broken plug-in
    collect_from_here()
    from ._forked import ForkedPlotter

    plotter = ForkedPlotter.start()
    def handle(request: dict[str, Any]) -> dict[str, Path]:
        load_plugins(request.get("plugins") or ())
        return write_report(request["run_dir"], plot_helper=plotter)

    serve_paths(requests, answers, handle)


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    answers = sys.stdout
    sys.stdout = sys.stderr  # whatever the report code prints stays out of the answers
    _serve(sys.stdin, answers)
    # every answer is written: skip the teardown of the reporting stack, which would keep a
    # parent that reads this process's stderr (a captured `medmis run`) waiting a second more
    from medmis.tools import exit_now

    exit_now(0)


if __name__ == "__main__":
    main()
