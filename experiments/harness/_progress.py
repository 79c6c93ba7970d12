"""The live progress bar of a run (rich), silent when disabled."""

from __future__ import annotations

from typing import Any


class RunProgress:
    """A rich progress bar with the live accuracy / ASR line (silent when disabled)."""

    def __init__(self, total: int, *, enabled: bool) -> None:
        self._bar: Any = None
        if not enabled:
            return
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
            transient=False,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._bar.start()
        self._task = self._bar.add_task("", total=total)

    def advance(self, description: str) -> None:
        if self._bar is not None:
            self._bar.update(self._task, advance=1, description=description)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
