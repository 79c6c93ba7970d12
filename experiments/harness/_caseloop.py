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

A helper also sends a heartbeat every :data:`BEAT_S` seconds. One that sends nothing for the
run's helper timeout (stopped by SIGSTOP, or hung in a call that never returns to its event
loop) is killed, and its cases go back to the parent as a dead one's do. The parent reads its
pipes without blocking (a helper stopped half-way through a message cannot hold it), and ends
its helpers within :data:`STOP_GRACE_S` seconds (SIGTERM, then SIGKILL). A helper holds no
pipe of its parent's but its own (the report worker's stdin among them: the worker ends when
the parent closes it, whatever becomes of the helpers).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import signal
import struct
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from medmis.agents._limiter import AdaptiveLimiter, LimiterState
from medmis.tools._redact import configured_secrets

from ._io import WriteFailed, repair_torn_tail, scrub_lines

# (model spec, defender, case); the defender and case types live in the runner's imports
Job = tuple[str, Any, Any]

AUTO_MAX_PROCESSES = 4
"""``processes="auto"`` uses at most this many, one per usable core."""
AUTO_MIN_CONNECTIONS = 8
"""... and at least this many connections per process (fewer calls in flight keep one loop idle)."""
AUTO_MIN_JOBS = 128
"""... and at least this many cases per process (a fork costs about as much as a few cases)."""
BEAT_S = 1.0
"""A helper's heartbeat: seconds between two messages when it has no case to send."""
HELPER_TIMEOUT_MARGIN_S = 30.0
"""The default helper timeout is the model timeout plus this (``RunConfig.helper_timeout_s``)."""
STOP_GRACE_S = 2.0
"""Seconds a helper has to exit after SIGTERM before SIGKILL."""


def helper_timeout(config: Any) -> float:
    """Seconds a helper may send nothing before it is killed (``--helper-timeout``; default:
    ``--model-timeout`` + :data:`HELPER_TIMEOUT_MARGIN_S`: a helper's event loop, which sends
    the heartbeat, is never held longer than one model request by a healthy call)."""
    given = getattr(config, "helper_timeout_s", None)
    if given is not None:
        return float(given)
    options = getattr(config, "model_options", None)
    return float(getattr(options, "timeout_s", 120.0)) + HELPER_TIMEOUT_MARGIN_S


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


LOCK_WAIT_S = 5.0
"""The shared counter's lock is held for a few instructions: a process that waits this long for
it finds its holder stopped (SIGSTOP) and takes no more (a killed holder never releases it)."""


class _Counter:
    """Hands out job indices in order; with helpers, from shared memory under a lock."""

    def __init__(self, n: int, shared: bool) -> None:
        self.n = n
        self._lock: Any = None
        self._cell: Any = [0, 0]  # [next index, closed]
        self.stuck = False  # the lock was not had in LOCK_WAIT_S: its holder is stopped
        if shared:
            import multiprocessing

            # a semaphore-guarded block that forked children share (kept referenced here)
            self._array = multiprocessing.get_context("fork").Array("q", 2)
            self._lock, self._cell = self._array.get_lock(), self._array.get_obj()

    def _locked(self) -> bool:
        if self._lock is None or self.stuck:
            return False
        if not self._lock.acquire(timeout=LOCK_WAIT_S):
            self.stuck = True
            return False
        return True

    def take(self) -> int | None:
        if self._lock is not None and not self._locked():
            return None  # stuck: this process takes no more (the parent: see CaseLoop._leftovers)
        try:
            if self._cell[1] or self._cell[0] >= self.n:
                return None
            self._cell[0] += 1
            return int(self._cell[0] - 1)
        finally:
            if self._lock is not None:
                self._lock.release()

    def close(self) -> None:
        """No index is handed out any more (the run stops); set even when stuck (one cell)."""
        locked = self._locked()
        self._cell[1] = 1
        if locked:
            self._lock.release()

    def rest(self) -> tuple[int, bool]:
        """How many indices were handed out and whether the counter was closed, read without
        the lock: only once no other process uses it."""
        return int(self._cell[0]), bool(self._cell[1])


class _Inbox:
    """The parent's end of a helper's pipe, read without blocking: length-prefixed pickles."""

    _HEADER = struct.Struct("!Q")
    _READ = 1 << 20  # bytes read per wake-up at most

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.eof = False
        self._buffer = bytearray()

    def fill(self) -> None:
        """Take what the pipe holds now (without waiting for more)."""
        try:
            chunk = os.read(self.fd, self._READ)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.eof = True
        self._buffer += chunk

    def ready(self) -> bool:
        """Whether a whole message is buffered."""
        if len(self._buffer) < self._HEADER.size:
            return False
        return len(self._buffer) >= self._HEADER.size + self._HEADER.unpack_from(self._buffer)[0]

    def pop(self) -> Any:
        """The next whole message (call :meth:`ready` first)."""
        size = self._HEADER.unpack_from(self._buffer)[0]
        end = self._HEADER.size + size
        data = bytes(self._buffer[self._HEADER.size:end])
        del self._buffer[:end]
        return pickle.loads(data)


def _send(fd: int, message: Any) -> None:  # pragma: no cover - runs in a forked helper
    """Write one message to the parent (blocking until the pipe takes it all)."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_Inbox._HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


class _Helper:
    """The parent's end of one forked helper."""

    def __init__(self, pid: int, fd: int, share: int) -> None:
        self.pid = pid
        self.alive = True  # not reaped yet
        self.inbox = _Inbox(fd)
        self.listening = False
        self.heard = time.monotonic()  # when it last sent something
        self.share = share
        self.ended: asyncio.Future[None] | None = None
        self.state: LimiterState | None = None  # sent with each case and heartbeat
        self.limiter: dict[str, Any] | None = None  # sent with its last message
        self.error: str | None = None
        self.noticed = False  # its end was announced when it happened
        self.exit_code: int | None = None

    def reaped(self, block: bool = False) -> bool:
        """Whether it has exited (collecting its exit code); ``block`` waits for it."""
        if not self.alive:
            return True
        try:
            pid, status = os.waitpid(self.pid, 0 if block else os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere (SIGCHLD ignored, a child watcher)
            self.alive = False
            return True
        if pid == 0:
            return False
        self.exit_code = os.waitstatus_to_exitcode(status)
        self.alive = False
        return True


def reap(helpers: list[_Helper], grace_s: float) -> None:
    """Wait up to ``grace_s`` for ``helpers`` to exit, then kill (SIGKILL) and reap the rest;
    interrupted meanwhile (a second Ctrl-C), the rest are killed all the same."""
    waiting = [x for x in helpers if x.alive]
    deadline = time.monotonic() + grace_s
    try:
        while waiting:
            waiting = [x for x in waiting if not x.reaped()]
            if not waiting or time.monotonic() >= deadline:
                break
            time.sleep(0.01)
    finally:
        for helper in waiting:
            with contextlib.suppress(ProcessLookupError):
                os.kill(helper.pid, signal.SIGKILL)
            helper.reaped(block=True)


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
        self.helpers: list[_Helper] = []
        self._secrets = configured_secrets()
        self._counter = _Counter(len(jobs), shared=False)
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
                self._counter = _Counter(len(self.jobs), shared=True)
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
                _helper_main(self, write_fd, share)
            os.close(write_fd)
            os.set_blocking(read_fd, False)
            self.helpers.append(_Helper(pid, read_fd, share))

    def _listen(self) -> None:
        loop = asyncio.get_running_loop()
        for helper in self.helpers:
            helper.ended = loop.create_future()
            helper.heard = time.monotonic()
            loop.add_reader(helper.inbox.fd, self._receive, helper)
            helper.listening = True

    def _receive(self, helper: _Helper) -> None:
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

    def _ended(self, helper: _Helper, failure: BaseException | None = None) -> None:
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

    def _stall(self, helper: _Helper, timeout_s: float) -> None:
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
        on it), :data:`STOP_GRACE_S` to exit, then SIGKILL."""
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


# -- helpers: child side -------------------------------------------------------------------
def _drop_inherited_pipes(keep: int) -> None:  # pragma: no cover - runs forked
    """Point stdin and every pipe this helper inherited but ``keep`` (the report worker's
    stdin, the other helpers' ends, ...) at /dev/null: a helper that outlives its parent must
    not keep the worker from seeing the end of its input. ``dup2`` rather than ``close``: an
    object that still owns a number closes /dev/null later, never a file opened since."""
    devnull = os.open(os.devnull, os.O_RDWR)
    try:
        os.dup2(devnull, 0)
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            if fd <= 2 or fd in (keep, devnull):
                continue
            with contextlib.suppress(OSError):  # (the listing's own descriptor, gone by now)
                if os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:"):
                    os.dup2(devnull, fd, inheritable=False)
    finally:
        os.close(devnull)


def _helper_main(loop: CaseLoop, fd: int, share: int) -> None:  # pragma: no cover - runs forked
    """A forked helper: run cases from the shared counter, send each back; never returns."""
    code = 0
    try:
        # the parent's event loop and its signal set-up came along with the fork; Python
        # 3.12+ resets the first by itself
        asyncio._set_running_loop(None)
        signal.set_wakeup_fd(-1)
        if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # not when the run ignores it
            signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _drop_inherited_pipes(fd)
        loop.harness.after_fork(share)
        asyncio.run(_helper_run(loop, fd, share))
    except KeyboardInterrupt:
        code = 130
    except BaseException as exc:
        code = 1
        with contextlib.suppress(OSError):
            _send(fd, ("end", None, f"{type(exc).__name__}: {exc}"))
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


async def _helper_run(loop: CaseLoop, fd: int, share: int) -> None:  # pragma: no cover - runs forked
    h = loop.harness
    failed = False  # this helper's own stop: the shared counter stays open for the others

    def fail() -> None:
        nonlocal failed
        failed = True

    async def worker() -> None:
        while not failed and (index := loop._counter.take()) is not None:
            lines = await loop._case(index)
            _send(fd, ("case", index, *lines, h.limiter.state()))

    async def beat() -> None:
        # its parent's proof that this process still runs (and, when the parent is gone,
        # the write that fails and ends it)
        while True:
            await asyncio.sleep(BEAT_S)
            _send(fd, ("beat", h.limiter.state()))

    beating = asyncio.ensure_future(beat())
    try:
        await run_workers(share, worker, fail)
    finally:
        beating.cancel()
        await asyncio.gather(beating, return_exceptions=True)
        await h.aclose()
    _send(fd, ("end", h.limiter.summary(), None))
