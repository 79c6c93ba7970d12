"""The live progress of a run: a rich bar on a terminal, plain periodic lines otherwise.

A bar drawn into a log file or a pipe is cut to 80 columns and repeated control codes; when
stderr is not a terminal the run prints one plain line at every tenth of the work and at
least every ``interval_s`` seconds instead.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO


class RunProgress:
    """A rich progress bar with the live accuracy / ASR line (silent when disabled).

    Args:
        total: Cases this invocation will run.
        enabled: Show progress at all.
        stream: Where progress goes (default ``sys.stderr``); a non-terminal stream gets
            plain lines.
        interval_s: Longest gap between two plain lines while cases complete.
    """

    def __init__(self, total: int, *, enabled: bool, stream: TextIO | None = None,
                 interval_s: float = 30.0) -> None:
        self._bar: Any = None
        self._plain: TextIO | None = None
        self.total = total
        self.done = 0
        if not enabled:
            return
        out = stream if stream is not None else sys.stderr
        if not out.isatty():
            self._plain = out
            self._interval = interval_s
            self._step = max(1, total // 10)
            self._last = time.monotonic()
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        self._bar = Progress(
            TextColumn("[bold]medmis run"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.description}"),
            console=Console(file=out),
            transient=False,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._bar.start()
        self._task = self._bar.add_task("", total=total)

    def advance(self, description: str, limiter: Any = None) -> None:
        """Count one case; ``limiter`` (a ``LimiterState``) adds the current concurrency and
        whether 429s are throttling the run."""
        self.done += 1
        if limiter is not None:
            description = f"{description} | {limiter.describe()}" if description else limiter.describe()
        if self._bar is not None:
            self._bar.update(self._task, advance=1, description=description)
        elif self._plain is not None:
            now = time.monotonic()
            if self.done % self._step == 0 or self.done == self.total or now - self._last >= self._interval:
                self._last = now
                line = f"medmis run: {self.done}/{self.total} cases"
                self._plain.write(line + (f" | {description}" if description else "") + "\n")
                self._plain.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
