"""``run_experiment``: a configuration run by the harness that fits it (batch jobs or live calls)."""

from __future__ import annotations

from typing import Any

from ._batch import BatchHarness
from ._config import RunConfig, RunResult
from ._runner import Harness


async def run_experiment(config: RunConfig, *, batch_cancel: bool = False, **kwargs: Any) -> RunResult:
    """Run (or resume) a configuration; the caller writes the report (``medmis.experiments.reporting``).

    ``config.batch`` runs it through provider batch jobs (``._batch``); ``batch_cancel``
    then cancels the folder's unfinished jobs instead.
    """
    if config.batch:
        return await BatchHarness(config, cancel=batch_cancel, **kwargs).run()
    return await Harness(config, **kwargs).run()
