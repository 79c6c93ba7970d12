"""Signals in a ``medmis`` process: SIGTERM as Ctrl-C, and real signals told from raised ones."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any


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
