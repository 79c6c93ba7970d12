"""The loop that runs a run's cases, in this process or shared with forked call processes.

One process drives a run's calls with one event loop; with a fast provider and many
connections that loop, not the provider, becomes the bottleneck (building requests, parsing
replies, writing records: a few milliseconds of CPU per call). ``processes > 1`` forks
helpers once the run has built its models and found its cases (Linux; no other thread may be
alive then, see :func:`fork_ready`). Every process takes the next case from one shared
counter over the same clean-first list, so the order and the balance are those of a single
queue; ``--max-connections`` is split between them, each with its own adaptive limiter.

The parent stays the only writer: a helper sends each case's record and its scrubbed lines
over a pipe, and the parent writes them, counts them and draws the progress exactly as for
its own cases. A stop (a budget, an error ceiling) closes the counter for every process; the
calls in flight finish and are written. A helper that dies is noticed at the end of its pipe:
the cases it had taken and not sent back are run by the parent, and the run says so.

A helper also sends a heartbeat every second (``._helpers``, which holds the helpers' side).
One that sends nothing for the run's helper timeout (stopped by SIGSTOP, or hung in a call
that never returns to its event loop) is killed, and its cases go back to the parent as a
dead one's do. The parent reads its pipes without blocking (a helper stopped half-way through
a message cannot hold it), and ends its helpers within a grace period (SIGTERM, then SIGKILL).
A helper holds no pipe of its parent's but its own (the report worker's stdin among them: the
worker ends when the parent closes it, whatever becomes of the helpers).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from medmis.agents import AdaptiveLimiter, LimiterState
from medmis.tools import configured_secrets

from ._helpers import STOP_GRACE_S, Counter, Helper, helper_main, helper_timeout, reap, run_workers
from ._io import WriteFailed, repair_torn_tail, scrub_lines

# (model spec, defender, case); the defender and case types live in the runner's imports
Job = tuple[str, Any, Any]

AUTO_MAX_PROCESSES = 4
"""``processes="auto"`` uses at most this many, one per usable core."""
AUTO_MIN_CONNECTIONS = 8
"""... and at least this many connections per process (fewer calls in flight keep one loop idle)."""
AUTO_MIN_JOBS = 128
"""... and at least this many cases per process (a fork costs about as much as a few cases)."""
def fork_ready() -> bool:
    """Whether this process may fork helpers (see :func:`fork_blocker`)."""
    return fork_blocker() is None


def fork_blocker() -> str | None:
    """Why this process may not fork helpers, or None: it needs Linux and no thread but this
    one alive (those of C extensions counted too). Not on CPython 3.14.0, whose fork inside a
    running task leaves that task current in the child (gh-139894, fixed in 3.14.1)."""
    if not (sys.platform.startswith("linux") and hasattr(os, "fork")):
        return "forked call processes need Linux"
    if sys.version_info[:3] == (3, 14, 0):
        return "CPython 3.14.0 cannot fork inside a running task (gh-139894); use 3.14.1 or later"
    try:
        threads = max(threading.active_count(), len(os.listdir("/proc/self/task")))
    except OSError:
        return "/proc/self/task is unreadable (threads cannot be counted)"
    if threads != 1:
        return f"{threads - 1} other thread(s) alive in this process (a fork would copy them half-done)"
    return None


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def resolve_processes(requested: int | str, *, jobs: int, connections: int, remote: bool) -> int:
    """How many processes run ``jobs`` cases: ``requested`` or, for ``"auto"``, one per usable
    core (at most :data:`AUTO_MAX_PROCESSES`) when the models are remote and there is work and
    concurrency enough to share; never more than there are connections or cases."""
    if requested == "auto":
        if not remote:
            return 1
        n = min(usable_cores(), AUTO_MAX_PROCESSES, connections // AUTO_MIN_CONNECTIONS, jobs // AUTO_MIN_JOBS)
    else:
        n = int(requested)
    return max(1, min(n, connections, jobs))


def connection_shares(connections: int, processes: int) -> list[int]:
    """``connections`` split over ``processes`` (the parent's share first), summing to it."""
    base, extra = divmod(connections, processes)
    return [base + (1 if i < extra else 0) for i in range(processes)]


def merge_limiter_summaries(summaries: list[dict[str, Any]], processes: int | None = None) -> dict[str, Any]:
    """The limiters of every process as one: the run's ceiling and limits are their sums
    (``processes``: how many shared the run, when some of them never reported)."""
    processes = len(summaries) if processes is None else processes
    if processes == 1:
        return summaries[0]
    merged: dict[str, Any] = {key: sum(s[key] for s in summaries)
                              for key in ("ceiling", "final", "lowest", "rate_limited", "decreases")}
    merged["waited_s"] = round(max(s["waited_s"] for s in summaries), 3)
    merged["processes"] = processes
    return merged


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

    def __init__(self, harness: Any, jobs: list[Job], rec_fh: Any,
                 clean_state: dict[tuple[str, str, str], bool],
                 trace_handles: dict[str, Any] | None = None) -> None:
        self.harness = harness
        self.jobs = jobs
        self.rec_fh = rec_fh
        self.clean_state = clean_state
        self.trace_handles: dict[str, Any] = {} if trace_handles is None else trace_handles
        self.written = 0
        self.progress: Any = None
        self.helpers: list[Helper] = []
        self._secrets = configured_secrets()
        self._counter = Counter(len(jobs), shared=False)
        self._done: set[int] = set()
        self._failed = False
        self.helper_timeout_s = helper_timeout(harness.config)

    # -- writing (parent) ------------------------------------------------------------------
    def accept(self, index: int, record: Any, record_line: str, trace_line: str) -> None:
        """Write one case's record and trace, count it, and apply the run's stop rule.

        Once a write has failed nothing more is written (the run raises that failure; the
        cases not written are left to a resume)."""
        if self._failed:
            return
        try:
            self._write(index, record, record_line, trace_line)
        except BaseException:
            self._fail()
            raise

    def _write(self, index: int, record: Any, record_line: str, trace_line: str) -> None:
        h = self.harness
        key = record.trace_file or h._trace_file(record.model, record.defender)
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
        self._done.add(index)
        if h._fresh_errors is not None and record.error is not None:
            h._fresh_errors.append(record.error)
        h.stats.add(record, self.clean_state)
        if self.progress is not None:
            self.progress.advance(h.stats.describe(), self._limiter_state())
        if h.stop_when is not None and not h.stats.stopped_reason:
            reason = h.stop_when(h.stats)
            if reason:
                h.stats.stopped_reason = reason
        if h.stats.stopped_reason:
            self._counter.close()

    async def _case(self, index: int) -> tuple[Any, str, str]:
        spec, defender, case = self.jobs[index]
        record, trace = await self.harness.run_case(spec, defender, case)
        return scrub_lines(record, trace, self._secrets)

    async def _work(self, indices: Callable[[], int | None], workers: int) -> None:
        async def worker() -> None:
            while not self.harness.stats.stopped_reason and (index := indices()) is not None:
                self.accept(index, *await self._case(index))

        await run_workers(workers, worker, self._fail)

    def _fail(self) -> None:
        self._failed = True
        self._counter.close()

    # -- the run ---------------------------------------------------------------------------
    async def run(self, processes: int, make_progress: Callable[[], Any]) -> int:
        """Run every job (or until the run stops); the number of records written.

        ``make_progress`` is called once the helpers are forked (a progress bar's refresh
        thread must not exist at a fork).
        """
        h = self.harness
        own = h.config.max_connections
        watch: asyncio.Future[None] | None = None
        try:
            if processes > 1:
                self._counter = Counter(len(self.jobs), shared=True)
                self._fork(connection_shares(own, processes)[1:])
                if self.helpers:  # what forks failed to take stays here
                    own -= sum(x.share for x in self.helpers)
                    h.limiter = AdaptiveLimiter(own)
            self.progress = make_progress()
            self._listen()
            if self.helpers:
                watch = asyncio.ensure_future(self._watch(self.helper_timeout_s))
            await self._first_failure(self._work(self._counter.take, min(own, len(self.jobs))))
            self._take_over()
            await self._work(self._leftovers(), min(own, len(self.jobs)))
        finally:
            if watch is not None:
                watch.cancel()
            self._counter.close()
            self._stop_helpers()
        return self.written

    async def _first_failure(self, own_work: Awaitable[None]) -> None:
        """This process's cases and every helper's end; the first failure of either (a write
        that failed here) cancels this process's cases and is raised."""
        work = asyncio.ensure_future(own_work)
        pending: set[asyncio.Future[None]] = {work, *(x.ended for x in self.helpers if x.ended is not None)}
        try:
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
                for future in done:
                    if not future.cancelled() and future.exception() is not None:
                        raise future.exception()  # type: ignore[misc]
        finally:
            if not work.done():
                work.cancel()
                await asyncio.gather(work, return_exceptions=True)

    def _limiter_state(self) -> LimiterState:
        """This process's limiter and the helpers' last reported ones, as one."""
        own = self.harness.limiter.state()
        states = [x.state for x in self.helpers if x.state is not None]
        if not states:
            return own
        every = [own, *states]
        return LimiterState(sum(x.limit for x in every), sum(x.ceiling for x in every),
                            sum(x.in_flight for x in every), max(x.paused_s for x in every),
                            sum(x.rate_limited for x in every))

    def limiter_summary(self) -> dict[str, Any]:
        own = self.harness.limiter.summary()
        return merge_limiter_summaries([own, *(x.limiter for x in self.helpers if x.limiter)],
                                       1 + len(self.helpers))

    # -- helpers: parent side --------------------------------------------------------------
    def _fork(self, shares: list[int]) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        for share in shares:
            read_fd, write_fd = os.pipe()
            try:
                pid = os.fork()
            except OSError:  # no more processes: the ones made share the work
                os.close(read_fd)
                os.close(write_fd)
                return
            if pid == 0:  # pragma: no cover - the child's coverage is not collected
                helper_main(self, write_fd, share)
            os.close(write_fd)
            os.set_blocking(read_fd, False)
            self.helpers.append(Helper(pid, read_fd, share))

    def _listen(self) -> None:
        loop = asyncio.get_running_loop()
        for helper in self.helpers:
            helper.ended = loop.create_future()
            helper.heard = time.monotonic()
            loop.add_reader(helper.inbox.fd, self._receive, helper)
            helper.listening = True

    def _receive(self, helper: Helper) -> None:
        """Write what a helper sent (at most a batch per wake-up, so that the parent's own
        calls are not starved); its end when the pipe closes."""
        if not helper.listening:
            return
        inbox = helper.inbox
        inbox.fill()
        for _ in range(64):
            if self._failed:  # the run is failing: nothing more is written
                return
            if not inbox.ready():
                break
            try:
                message = inbox.pop()
                helper.heard = time.monotonic()
                if message[0] == "case":
                    helper.state = message[5]
                    self.accept(*message[1:5])
                elif message[0] == "beat":
                    helper.state = message[1]
                elif message[0] == "end":
                    helper.limiter, helper.error = message[1], message[2]
            except BaseException as exc:  # writing failed here: the run stops and raises it
                self._fail()
                self._ended(helper, exc)
                return
        else:
            if inbox.ready():  # more than a batch buffered: the rest on the loop's next turn
                asyncio.get_running_loop().call_soon(self._receive, helper)
                return
        if inbox.eof and not inbox.ready():  # the helper is gone (or going): its pipe is closed
            self._ended(helper)

    def _ended(self, helper: Helper, failure: BaseException | None = None) -> None:
        if helper.listening:
            asyncio.get_running_loop().remove_reader(helper.inbox.fd)
            helper.listening = False
        helper.state = None
        try:
            if failure is None:  # its pipe closed as it exits: reap it
                reap([helper], STOP_GRACE_S)
        finally:
            assert helper.ended is not None
            if not helper.ended.done():
                if failure is None:
                    helper.ended.set_result(None)
                else:
                    helper.ended.set_exception(failure)

    async def _watch(self, timeout_s: float) -> None:
        """Kill a helper that has sent nothing (no case, no heartbeat) for ``timeout_s``; the
        cases it had taken are then run here (:meth:`_take_over`)."""
        while True:
            await asyncio.sleep(min(1.0, timeout_s / 4))
            for helper in self.helpers:
                if helper.listening:
                    self._receive(helper)  # what waits in its pipe counts (this loop may have been busy)
                if helper.listening and time.monotonic() - helper.heard > timeout_s:
                    self._stall(helper, timeout_s)

    def _stall(self, helper: Helper, timeout_s: float) -> None:
        helper.error = f"sent nothing for {timeout_s:g} s: stopped or hung; killed"
        with contextlib.suppress(ProcessLookupError):
            os.kill(helper.pid, signal.SIGKILL)
        if self.harness.notice is not None:
            helper.noticed = True
            then = ("its unfinished cases are left to a resume" if self.harness.stats.stopped_reason
                    else "this process runs the cases it had taken")
            self.harness.notice(f"call process {helper.pid} {helper.error}; {then}")
        self._ended(helper)

    def _take_over(self) -> None:
        lost = [x for x in self.helpers if (x.limiter is None or x.error) and not x.noticed]
        for helper in lost:
            why = helper.error or f"exit code {helper.exit_code}"
            if self.harness.notice is not None:
                then = ("its unfinished cases are left to a resume" if self.harness.stats.stopped_reason
                        else "this process runs the cases it had taken")
                self.harness.notice(f"call process {helper.pid} ended early ({why}); {then}")

    def _leftovers(self) -> Callable[[], int | None]:
        """The cases a helper took and never sent back (a helper that died); and, when the
        counter got stuck (a helper stopped holding its lock), those never handed out. Every
        helper has ended by now: the counter is read without its lock."""
        handed_out, closed = self._counter.rest()
        end = handed_out if closed or not self._counter.stuck else len(self.jobs)
        pending = iter([i for i in range(end) if i not in self._done])
        return lambda: next(pending, None)

    def _stop_helpers(self) -> None:
        """End every helper still alive: SIGTERM (and SIGCONT, which a stopped one needs to act
        on it), :data:`._helpers.STOP_GRACE_S` to exit, then SIGKILL."""
        loop = asyncio.get_running_loop()
        for helper in self.helpers:
            if helper.listening:
                loop.remove_reader(helper.inbox.fd)
                helper.listening = False
            if helper.alive:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(helper.pid, signal.SIGTERM)
                    os.kill(helper.pid, signal.SIGCONT)
        try:
            reap(self.helpers, STOP_GRACE_S)
        finally:
            for helper in self.helpers:
                if helper.inbox.fd >= 0:
                    os.close(helper.inbox.fd)
                    helper.inbox.fd = -1
