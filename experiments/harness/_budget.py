"""``medmis run --max-usd / --max-calls``: a spending cap through the run's ``stop_when`` hook.

The same hook carries ``medmis ablate``'s ``budget_usd``: after every record the harness asks
``stop_when(stats)``; a reason stops new cases (those in flight finish and are written), the run
exits 3 and the manifest's ``outcome`` and ``stopped`` name the cap. Spend and calls are counted
over the records this invocation writes; re-running the same command resumes with a fresh
allowance.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from medmis.experiments.harness._config import RunSetupError, RunStats

__all__ = ["budget_stop", "spent_usd"]


def spent_usd(stats: RunStats, prices: Mapping[str, tuple[float, float]], share: float = 1.0) -> float:
    """Dollars for the tokens counted so far (USD per million input, output tokens per model)."""
    total = 0.0
    for spec, (tin, tout) in stats.by_model_tokens.items():
        price = prices.get(spec)
        if price is not None:
            total += tin / 1e6 * price[0] + tout / 1e6 * price[1]
    return total * share


def budget_stop(
    *,
    max_usd: float | None,
    max_calls: int | None,
    models: Sequence[str],
    prices: Mapping[str, tuple[float, float]],
    share: float = 1.0,
) -> Callable[[RunStats], str | None] | None:
    """The ``stop_when`` of a run with these caps (``None`` when there is none).

    Raises:
        RunSetupError: ``max_usd`` without a ``--price`` for every model (the spend is unknowable).
    """
    if max_usd is None and max_calls is None:
        return None
    unpriced = [m for m in models if m not in prices]
    if max_usd is not None and unpriced:
        raise RunSetupError(f"--max-usd needs --price MODEL=IN,OUT for every model; none for {', '.join(unpriced)}")

    def stop(stats: RunStats) -> str | None:
        if max_calls is not None and stats.llm_calls >= max_calls:
            return f"call cap {max_calls} reached ({stats.llm_calls} model calls)"
        if max_usd is not None:
            spent = spent_usd(stats, prices, share)
            if spent >= max_usd:
                return f"budget cap ${max_usd:.2f} reached (${spent:.4f} spent)"
        return None

    return stop
