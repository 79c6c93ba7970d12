"""The loop that runs a run's cases in this process, writing records and traces as they come.

One event loop drives every call: ``--max-connections`` workers take the next case from one
clean-first queue, so the last clean calls overlap the first injected ones. One loop writes,
so lines never interleave. A stop (a budget, an error ceiling) ends the handing out; the calls
in flight finish and are written.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from medmis.experiments.records import WriteFailed, repair_torn_tail, scrub_lines
from medmis.tools import configured_secrets

from ._resume import CaseJob

if TYPE_CHECKING:  # the runner imports this module
    from medmis.experiments.benchmark import Record

    from ._progress import RunProgress
    from ._runner import Harness


async def run_workers(n: int, worker: Callable[[], Awaitable[None]], on_failure: Callable[[], None]) -> None:
    """``n`` copies of ``worker``; the first that raises calls ``on_failure`` (which stops the
    others taking work), the others are cancelled and its exception is raised as it is."""
    tasks = [asyncio.ensure_future(worker()) for _ in range(max(1, n))]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    except BaseException:  # cancelled (Ctrl-C): the workers go too
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    failed = [t for t in done if not t.cancelled() and t.exception() is not None]
    if failed:
        on_failure()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise failed[0].exception()  # type: ignore[misc]


def _take_back(fh: Any, at: int) -> None:
    """Cut what a failed write left of its line (``at``: the file's length before it) and point
    the handle at /dev/null: what it still buffers goes nowhere when it is closed."""
    with contextlib.suppress(OSError, ValueError):
        fd = fh.fileno()
        os.ftruncate(fd, at)
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, fd)
        finally:
            os.close(devnull)


class CaseLoop:
    """Runs jobs through a harness's :meth:`run_case`, writing records and traces as they come.

    Args:
        harness: The run's :class:`~._runner.Harness` (its cases, models, stats, stop rule).
        jobs: The cases to run, clean first.
        rec_fh: ``records.jsonl``, open for appending.
        clean_state: Clean correctness by (model, defender, item), for the live ASR.
        trace_handles: Open trace files by name, shared with the caller (it closes them).
    """

    def __init__(self, harness: Harness, jobs: list[CaseJob], rec_fh: IO[str],
                 clean_state: dict[tuple[str, str, str], bool],
                 trace_handles: dict[str, Any] | None = None) -> None:
        self.harness = harness
        self.jobs = jobs
        self.rec_fh = rec_fh
        self.clean_state = clean_state
        self.trace_handles: dict[str, Any] = {} if trace_handles is None else trace_handles
        self.written = 0
        self.progress: RunProgress | None = None
        self._secrets = configured_secrets()
        self._pending: Iterator[int] = iter(range(len(jobs)))
        self._failed = False

    def accept(self, record: Record, record_line: str, trace_line: str) -> None:
        """Write one case's record and trace, count it, and apply the run's stop rule.

        Once a write has failed nothing more is written (the run raises that failure; the
        cases not written are left to a resume)."""
        if self._failed:
            return
        try:
            self._write(record, record_line, trace_line)
        except BaseException:
            self._fail()
            raise

    def _write(self, record: Record, record_line: str, trace_line: str) -> None:
        h = self.harness
        key = record.trace_file or h.trace_file(record.model, record.defender)
        fh = self.trace_handles.get(key)
        if fh is None:
            try:
                repair_torn_tail(h.out / key)
                fh = self.trace_handles[key] = (h.out / key).open("a", encoding="utf-8")
            except OSError as exc:
                raise WriteFailed(h.out / key, exc, self.written) from None
        # one event loop writes: lines never interleave. The trace line goes first, then the
        # record; when either fails both are taken back, so a resume (which reruns the case)
        # writes neither twice
        trace_at, record_at = fh.tell(), self.rec_fh.tell()
        in_trace = True
        try:
            fh.write(trace_line + "\n")
            fh.flush()
            in_trace = False
            self.rec_fh.write(record_line + "\n")
            self.rec_fh.flush()
        except OSError as exc:
            _take_back(fh, trace_at)
            _take_back(self.rec_fh, record_at)
            failing = h.out / key if in_trace else Path(getattr(self.rec_fh, "name", h.out / "records.jsonl"))
            raise WriteFailed(failing, exc, self.written) from None
        self.written += 1
        if h.fresh_errors is not None and record.error is not None:
            h.fresh_errors.append(record.error)
        h.stats.add(record, self.clean_state)
        if self.progress is not None:
            self.progress.advance(h.stats.describe(), h.limiter.state())
        if h.stop_when is not None and not h.stats.stopped_reason:
            reason = h.stop_when(h.stats)
            if reason:
                h.stats.stopped_reason = reason
        if h.stats.stopped_reason:
            self._close()

    async def _case(self, index: int) -> tuple[Record, str, str] | None:
        """The case's record and trace lines (None: nothing to write yet, e.g. a batch
        round's case that still waits for a request)."""
        spec, defender, case = self.jobs[index]
        record, trace = await self.harness.run_case(spec, defender, case)
        return scrub_lines(record, trace, self._secrets)

    def _close(self) -> None:
        """No case is handed out any more (the run stops or a write failed)."""
        self._pending = iter(())

    def _fail(self) -> None:
        self._failed = True
        self._close()

    async def run(self, make_progress: Callable[[], RunProgress]) -> int:
        """Run every job (or until the run stops); the number of records written.

        ``make_progress`` is called once, before the first case.
        """
        self.progress = make_progress()

        async def worker() -> None:
            while not self.harness.stats.stopped_reason and (index := next(self._pending, None)) is not None:
                if (done := await self._case(index)) is not None:
                    self.accept(*done)

        try:
            await run_workers(min(self.harness.config.max_connections, len(self.jobs)), worker, self._fail)
        finally:
            self._close()
        return self.written

    def limiter_summary(self) -> dict[str, Any]:
        """The run's adaptive limiter, summarised for the manifest."""
        return dict(self.harness.limiter.summary())
