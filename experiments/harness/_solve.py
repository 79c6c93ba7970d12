"""The one place a run awaits a defender on a case: under the case's deadline, with the case's
web tools routed behind the facade, and with whatever the defender's code raises kept to
that case.

Every path that runs cases comes through :func:`solve_case`: :meth:`~._runner.Harness.run_case`
(direct runs, and each round of ``--batch``, :mod:`._batch`).

* **Deadline.** A defender that never returns (awaits forever, a server that never answers
  below every other timeout) would hold its worker, and at the end the whole run, forever.
  ``RunConfig.case_timeout_s`` (``--case-timeout``, ``case_timeout`` in an ablation config;
  default :data:`DEFAULT_CASE_TIMEOUT_S`) bounds the case; past it the case is cancelled
  and recorded as an error (never graded), and the run goes on. It is operational, like the
  model timeout: it is not part of the fingerprint. A defender blocking the event loop
  itself (a synchronous endless loop) cannot be stopped from inside the process.
* **Exits raised by plug-in code.** ``SystemExit`` or ``KeyboardInterrupt`` raised by the
  defender is that case's failure (:class:`DefenderExit`, an ordinary exception): only a
  real signal stops a run (``medmis.tools.signals_seen``, or the run's task being cancelled,
  which is what Ctrl-C does under ``asyncio.run``). A task the defender starts is guarded the
  same way (the loop's task factory, :func:`_guard_tasks`): asyncio would otherwise re-raise
  such an exception out of the event loop, past the case.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from contextvars import ContextVar
from typing import Any, TypeVar

from medmis.defenses import DefenderContext
from medmis.experiments.benchmark import Answer, CaseView
from medmis.tools import Toolset, routed, signals_seen

from ._config import DEFAULT_CASE_TIMEOUT_S

__all__ = ["DEFAULT_CASE_TIMEOUT_S", "CaseTimeout", "DefenderExit", "solve_case"]

T = TypeVar("T")


class CaseTimeout(Exception):
    """The defender gave no answer within the case's deadline (recorded on the case)."""


class DefenderExit(Exception):
    """The defender's code raised ``SystemExit`` or ``KeyboardInterrupt`` (recorded on the case)."""


def _signalled(before: int) -> bool:
    """Whether a real signal is stopping the run: one arrived since ``before`` was counted, or
    this task is being cancelled (what Ctrl-C does to a run under ``asyncio.run``)."""
    task = asyncio.current_task()
    return signals_seen() > before or (task is not None and task.cancelling() > 0)


def _as_case_error(exc: SystemExit | KeyboardInterrupt, signals: int) -> DefenderExit | None:
    """What ``exc`` raised by the defender's code becomes: a :class:`DefenderExit`, or None
    when it is a real signal's (the run stops)."""
    if isinstance(exc, KeyboardInterrupt) and _signalled(signals):
        return None
    code = f"({exc.code!r})" if isinstance(exc, SystemExit) and exc.code is not None else ""
    return DefenderExit(f"the defender raised {type(exc).__name__}{code}; only a signal stops a run")


# Set while a defender runs: the signal count at its start. A task the defender starts
# (asyncio.gather, create_task) inherits it, and the loop's task factory guards that task.
_defending: ContextVar[int | None] = ContextVar("medmis_defending", default=None)


async def _guarded(coro: Coroutine[Any, Any, T], signals: int) -> T:
    try:
        return await coro
    except (SystemExit, KeyboardInterrupt) as exc:
        error = _as_case_error(exc, signals)
        if error is None:
            raise
        raise error from None


def _guard_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """Have ``loop`` guard the tasks a defender starts. ``SystemExit`` or ``KeyboardInterrupt``
    that leaves a task's coroutine is re-raised by asyncio out of the event loop itself, past
    every ``except`` of the case; a guarded task turns it into :class:`DefenderExit`, which
    reaches the case as any exception does. Installed once per loop (over a factory the loop
    had, which still makes the task); inert outside a defender."""
    previous = loop.get_task_factory()
    if getattr(previous, "medmis_guard", False):
        return

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Future[Any]:
        signals = _defending.get()
        if signals is not None and asyncio.iscoroutine(coro):
            coro = _guarded(coro, signals)
        if previous is not None:
            return previous(loop, coro, **kwargs)
        return asyncio.Task(coro, loop=loop, **kwargs)

    factory.medmis_guard = True  # type: ignore[attr-defined]
    loop.set_task_factory(factory)


async def solve_case(defender: Any, view: CaseView, ctx: DefenderContext, *, timeout_s: float,
                     tools: Toolset | None = None) -> Answer:
    """``defender(view, ctx)`` within ``timeout_s`` seconds, with ``ctx.tools`` forwarding to
    ``tools`` (when the context was given the facade).

    Raises:
        CaseTimeout: No answer within ``timeout_s``.
        DefenderExit: The defender (or a task it started) raised ``SystemExit`` or
            ``KeyboardInterrupt`` itself.
        Exception: Whatever else the defender raised.
    """
    signals = signals_seen()
    _guard_tasks(asyncio.get_running_loop())
    token = _defending.set(signals)
    try:
        with routed(tools):
            deadline = asyncio.timeout(timeout_s)
            try:
                async with deadline:
                    return await defender(view, ctx)
            except TimeoutError:
                if deadline.expired():
                    raise CaseTimeout(f"no answer within the case deadline of {timeout_s:g} s "
                                      "(--case-timeout)") from None
                raise
            except (SystemExit, KeyboardInterrupt) as exc:
                error = _as_case_error(exc, signals)
                if error is None:
                    raise  # Ctrl-C or SIGTERM met the defender's code: the run stops
                raise error from None
    finally:
        _defending.reset(token)
