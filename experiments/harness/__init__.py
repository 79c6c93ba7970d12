"""The paired harness: ``Case`` -> defender -> ``Answer`` -> ``Record`` in ``records.jsonl``.

``run_experiment`` (and the ``Harness`` behind it) builds the model and defenders, runs the
clean cases first, then the injected protocols, resumably. The records file's I/O is
``medmis.experiments.records``, below the harness.
"""

from typing import TYPE_CHECKING

from medmis.tools import lazy_exports

if TYPE_CHECKING:
    from ._budget import budget_stop, spent_usd
    from ._checks import check_baseline
    from ._config import CacheMode, ModelVariant, RunOptions, RunSpec, merge_options
    from ._experiment import run_experiment
    from ._fingerprint import ACCEPTABLE_CHANGES, Fingerprint, FingerprintDiff
    from ._identity import bare_url
    from ._lock import RunLock
    from ._outcome import (
        EXIT_CASE_ERRORS,
        EXIT_OK,
        EXIT_STOPPED,
        Outcome,
        RunInterrupted,
        outcome_of,
        record_outcome,
    )
    from ._resume import error_texts
    from ._runner import (
        DefenderConfig,
        Harness,
        RunConfig,
        RunResult,
        RunSetupError,
        RunStats,
        package_versions,
    )
    from ._runner import (
        scrub_argv as scrub_argv,  # the manifest's, importable; not in __all__
    )

# Exports load on first use: ``medmis --help`` and the exit-code constants (``_outcome``) do
# not import the runner and with it LangChain's model stack.
_HOME = {
    **dict.fromkeys(("DefenderConfig", "Harness", "RunConfig", "RunResult", "RunSetupError", "RunStats",
                     "package_versions", "scrub_argv"), "_runner"),
    "run_experiment": "_experiment",
    **dict.fromkeys(("budget_stop", "spent_usd"), "_budget"),
    **dict.fromkeys(("check_baseline",), "_checks"),
    **dict.fromkeys(("CacheMode", "ModelVariant", "RunOptions", "RunSpec", "merge_options"), "_config"),
    **dict.fromkeys(("ACCEPTABLE_CHANGES", "Fingerprint", "FingerprintDiff"), "_fingerprint"),
    **dict.fromkeys(("bare_url",), "_identity"),
    "RunLock": "_lock",
    **dict.fromkeys(
        (
            "EXIT_CASE_ERRORS", "EXIT_OK", "EXIT_STOPPED", "Outcome", "RunInterrupted",
            "outcome_of", "record_outcome"
        ),
        "_outcome",
    ),
    **dict.fromkeys(("error_texts",), "_resume"),
}
__getattr__ = lazy_exports(__name__, _HOME, globals())

__all__ = [
    "ACCEPTABLE_CHANGES",
    "EXIT_CASE_ERRORS",
    "EXIT_OK",
    "EXIT_STOPPED",
    "CacheMode",
    "DefenderConfig",
    "Fingerprint",
    "FingerprintDiff",
    "Harness",
    "ModelVariant",
    "Outcome",
    "RunConfig",
    "RunInterrupted",
    "RunLock",
    "RunOptions",
    "RunResult",
    "RunSetupError",
    "RunSpec",
    "RunStats",
    "bare_url",
    "budget_stop",
    "check_baseline",
    "error_texts",
    "merge_options",
    "outcome_of",
    "package_versions",
    "record_outcome",
    "run_experiment",
    "spent_usd",
]
