"""The one place a run awaits a defender on a case: under the case's deadline, with the case's
web tools routed behind the facade, and with whatever the defender's code raises kept to
that case.

Every path that runs cases comes through :func:`solve_case`: :meth:`~._runner.Harness.run_case`
(direct runs, the forked call processes, a batch run's answered cases) and the request
collection of ``--batch`` (:mod:`._batch`).

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
  which is what Ctrl-C does under ``asyncio.run``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from medmis.experiments.benchmark import Answer, CaseView
from medmis.graphs import DefenderContext
from medmis.tools import Toolset, routed, signals_seen

from ._config import DEFAULT_CASE_TIMEOUT_S

__all__ = ["DEFAULT_CASE_TIMEOUT_S", "CaseTimeout", "DefenderExit", "solve_case"]

class CaseTimeout(Exception):
    """The defender gave no answer within the case's deadline (recorded on the case)."""


class DefenderExit(Exception):
    """The defender's code raised ``SystemExit`` or ``KeyboardInterrupt`` (recorded on the case)."""


def _signalled(before: int) -> bool:
    """Whether a real signal is stopping the run: one arrived since ``before`` was counted, or
    this task is being cancelled (what Ctrl-C does to a run under ``asyncio.run``)."""
    task = asyncio.current_task()
    return signals_seen() > before or (task is not None and task.cancelling() > 0)


async def solve_case(defender: Any, view: CaseView, ctx: DefenderContext, *, timeout_s: float,
                     tools: Toolset | None = None) -> Answer:
    """``defender(view, ctx)`` within ``timeout_s`` seconds, with ``ctx.tools`` forwarding to
    ``tools`` (when the context was given the facade).

    Raises:
        CaseTimeout: No answer within ``timeout_s``.
        DefenderExit: The defender raised ``SystemExit`` or ``KeyboardInterrupt`` itself.
        Exception: Whatever else the defender raised.
    """
    signals = signals_seen()
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
            if isinstance(exc, KeyboardInterrupt) and _signalled(signals):
                raise  # Ctrl-C or SIGTERM met the defender's code: the run stops
            code = f"({exc.code!r})" if isinstance(exc, SystemExit) and exc.code is not None else ""
            raise DefenderExit(f"the defender raised {type(exc).__name__}{code}; "
                               "only a signal stops a run") from None
