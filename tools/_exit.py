"""A ``medmis`` process's collector and exit: frozen start-up objects, no interpreter teardown.

:func:`collect_from_here` turns the garbage collector back on (``medmis run`` turns it off
for its start-up) with everything made so far frozen: the SDKs' classes and the run's data
are never garbage, so later collections need not scan them again (on the throughput bench the
collector's time went from 0.6 s to 0.2 s). A caller that left the collector on sees no change.

After a run the interpreter would spend about a second (measured on the bench machine)
finalising its modules: tens of thousands of objects from the provider SDKs' type modules,
LangChain, matplotlib and DuckDB, none of which holds anything left to write. :func:`exit_now`
ends the process once everything that must happen at exit has happened: the ``atexit``
handlers run (logging's flush, LangSmith's upload of traced runs, temporary directories),
then the standard streams are flushed. Only when no other thread is alive: a live thread
may still be writing, so the ordinary exit (which joins it) is taken instead.

``MEDMIS_FAST_EXIT=0`` always takes the ordinary exit. Library callers of ``main()`` are
never affected: only the console entry points call this.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, NoReturn

from ._switch import switched_on

ENV_VARIABLE = "MEDMIS_FAST_EXIT"


def enabled() -> bool:
    """Whether :func:`exit_now` may skip the teardown (``MEDMIS_FAST_EXIT`` is not ``0``)."""
    return switched_on(ENV_VARIABLE)


def exit_now(code: int) -> NoReturn:
    """Exit with ``code``: ``atexit`` handlers, flushed streams, then no interpreter teardown."""
    if not enabled() or threading.active_count() > 1:
        gc.unfreeze()  # the ordinary teardown collects what a caller froze, as usual
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # a closed or broken pipe: nothing more can be written
            pass
    os._exit(code)


def collect_from_here() -> None:
    """Freeze what exists and turn the collector on, if the caller had turned it off."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM (``kill``, a job scheduler, ``timeout``) does what Ctrl-C
    does: it goes to SIGINT's handler (``asyncio.run``'s cancels the run, which then records
    why it stopped, ends its helpers and exits 3), or raises ``KeyboardInterrupt`` when SIGINT
    is ignored (a background job). Only in the main thread; the previous handler comes back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(signum: int, frame: FrameType | None) -> None:
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler) and handler is not on_term:
            handler(signal.SIGINT, frame)
        else:
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


_signals = 0  # SIGINT and SIGTERM that arrived while some block noted them (see noting_signals)


def signals_seen() -> int:
    """How many SIGINT / SIGTERM arrived within a :func:`noting_signals` block of this process."""
    return _signals


@contextlib.contextmanager
def noting_signals() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM are counted (:func:`signals_seen`) before they go
    to the handler that was there, so code that catches ``KeyboardInterrupt`` from code it
    runs (a plug-in's import, a defender) can tell a real signal from one that code raised.
    Only in the main thread, and only over a handler that is a Python function (the default
    action and an ignored signal are left as they are); the previous handlers come back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    installed: list[tuple[signal.Signals, Handler, Handler]] = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        before = signal.getsignal(signum)
        if callable(before):
            note = _noting(before)
            signal.signal(signum, note)
            installed.append((signum, note, before))
    try:
        yield
    finally:
        for signum, note, before in installed:
            if signal.getsignal(signum) is note:  # unless someone has replaced it since
                signal.signal(signum, before)


Handler = Callable[[int, FrameType | None], Any]


def _noting(handler: Handler) -> Handler:
    def note(number: int, frame: FrameType | None) -> Any:
        global _signals
        _signals += 1
        return handler(number, frame)

    return note
