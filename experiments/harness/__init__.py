"""The paired harness: ``Case`` -> defender -> ``Answer`` -> ``Record`` in ``records.jsonl``.

``run_experiment`` (and the ``Harness`` behind it) builds the model and defenders, runs the
clean cases first, then the injected protocols, resumably; ``read_records`` /
``append_records`` are the records file's I/O.
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
    from ._io import RecordsFileError, WriteFailed, append_records, read_records, repair_torn_tail
    from ._outcome import (
        EXIT_CASE_ERRORS,
        EXIT_OK,
        EXIT_STOPPED,
        Outcome,
        RunInterrupted,
        outcome_of,
    )
    from ._plan import (
        Outside,
        describe_outside,
        keep_planned,
        load_plan,
        outside_plan,
        planned_records_view,
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
    from ._scan import (
        KEY,
        RECORD_COLUMNS,
        compact_records,
        connect,
        load_records_table,
        records_view,
        scan_jsonl,
    )

# Exports load on first use: the report reads records through ``._io`` without importing the
# runner (and with it LangChain's model stack) into ``medmis report``.
_HOME = {
    "KEY": "_scan",
    **dict.fromkeys(("append_records", "read_records", "repair_torn_tail"), "_io"),
    **dict.fromkeys(("DefenderConfig", "Harness", "RunConfig", "RunResult", "RunSetupError", "RunStats",
                     "package_versions", "scrub_argv"), "_runner"),
    "run_experiment": "_experiment",
    **dict.fromkeys(("budget_stop", "spent_usd"), "_budget"),
    **dict.fromkeys(("check_baseline",), "_checks"),
    **dict.fromkeys(("CacheMode", "ModelVariant", "RunOptions", "RunSpec", "merge_options"), "_config"),
    **dict.fromkeys(("ACCEPTABLE_CHANGES", "Fingerprint", "FingerprintDiff"), "_fingerprint"),
    **dict.fromkeys(("bare_url",), "_identity"),
    **dict.fromkeys(("RecordsFileError", "WriteFailed"), "_io"),
    **dict.fromkeys(
        (
            "EXIT_CASE_ERRORS", "EXIT_OK", "EXIT_STOPPED", "Outcome", "RunInterrupted",
            "outcome_of"
        ),
        "_outcome",
    ),
    **dict.fromkeys(
        (
            "Outside", "describe_outside", "keep_planned", "load_plan", "outside_plan",
            "planned_records_view"
        ),
        "_plan",
    ),
    **dict.fromkeys(("error_texts",), "_resume"),
    **dict.fromkeys(
        (
            "RECORD_COLUMNS", "compact_records", "connect", "load_records_table",
            "records_view", "scan_jsonl"
        ),
        "_scan",
    ),
}
__getattr__ = lazy_exports(__name__, _HOME, globals())

__all__ = [
    "ACCEPTABLE_CHANGES",
    "EXIT_CASE_ERRORS",
    "EXIT_OK",
    "EXIT_STOPPED",
    "KEY",
    "RECORD_COLUMNS",
    "CacheMode",
    "DefenderConfig",
    "Fingerprint",
    "FingerprintDiff",
    "Harness",
    "ModelVariant",
    "Outcome",
    "Outside",
    "RecordsFileError",
    "RunConfig",
    "RunInterrupted",
    "RunOptions",
    "RunResult",
    "RunSetupError",
    "RunSpec",
    "RunStats",
    "WriteFailed",
    "append_records",
    "bare_url",
    "budget_stop",
    "check_baseline",
    "compact_records",
    "connect",
    "describe_outside",
    "error_texts",
    "keep_planned",
    "load_plan",
    "load_records_table",
    "merge_options",
    "outcome_of",
    "outside_plan",
    "package_versions",
    "planned_records_view",
    "read_records",
    "records_view",
    "repair_torn_tail",
    "run_experiment",
    "scan_jsonl",
    "spent_usd",
]
