"""The forked call processes of a run (``--processes``): what they share with the parent
(the case counter), how they talk to it (length-prefixed pickles over a pipe, a heartbeat
every :data:`BEAT_S` seconds), how the parent ends them, and the helper's own side.

The parent's side of the work, and why it forks at all, is in :mod:`._caseloop`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import signal
import struct
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from medmis.agents import LimiterState

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


LOCK_WAIT_S = 5.0
"""The shared counter's lock is held for a few instructions: a process that waits this long for
it finds its holder stopped (SIGSTOP) and takes no more (a killed holder never releases it)."""


class Counter:
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


class Inbox:
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


def send(fd: int, message: Any) -> None:  # pragma: no cover - runs in a forked helper
    """Write one message to the parent (blocking until the pipe takes it all)."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(Inbox._HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


class Helper:
    """The parent's end of one forked helper."""

    def __init__(self, pid: int, fd: int, share: int) -> None:
        self.pid = pid
        self.alive = True  # not reaped yet
        self.inbox = Inbox(fd)
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


def reap(helpers: list[Helper], grace_s: float) -> None:
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


# -- the helper's side ------------------------------------------------------------------------
def drop_inherited_pipes(keep: int) -> None:  # pragma: no cover - runs forked
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


def helper_main(loop: Any, fd: int, share: int) -> None:  # pragma: no cover - runs forked
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
        drop_inherited_pipes(fd)
        loop.harness.after_fork(share)
        asyncio.run(_helper_run(loop, fd, share))
    except KeyboardInterrupt:
        code = 130
    except BaseException as exc:
        code = 1
        with contextlib.suppress(OSError):
            send(fd, ("end", None, f"{type(exc).__name__}: {exc}"))
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


async def _helper_run(loop: Any, fd: int, share: int) -> None:  # pragma: no cover - runs forked
    h = loop.harness
    failed = False  # this helper's own stop: the shared counter stays open for the others

    def fail() -> None:
        nonlocal failed
        failed = True

    async def worker() -> None:
        while not failed and (index := loop._counter.take()) is not None:
            lines = await loop._case(index)
            send(fd, ("case", index, *lines, h.limiter.state()))

    async def beat() -> None:
        # its parent's proof that this process still runs (and, when the parent is gone,
        # the write that fails and ends it)
        while True:
            await asyncio.sleep(BEAT_S)
            send(fd, ("beat", h.limiter.state()))

    beating = asyncio.ensure_future(beat())
    try:
        await run_workers(share, worker, fail)
    finally:
        beating.cancel()
        await asyncio.gather(beating, return_exceptions=True)
        await h.aclose()
    send(fd, ("end", h.limiter.summary(), None))
