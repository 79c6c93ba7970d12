"""The paired harness: ``Case`` -> defender -> ``Answer`` -> ``Record`` in ``records.jsonl``.

``run_experiment`` (and the ``Harness`` behind it) builds the model and defenders, runs the
clean cases first, then the injected protocols, resumably; ``read_records`` /
``append_records`` are the records file's I/O.
"""

from typing import TYPE_CHECKING

from medmis.tools._lazy import lazy_exports

if TYPE_CHECKING:
    from ._experiment import run_experiment
    from ._io import append_records, read_records, repair_torn_tail
    from ._runner import (
        DefenderConfig,
        Harness,
        RunConfig,
        RunResult,
        RunSetupError,
        RunStats,
        package_versions,
        scrub_argv,
    )

# Exports load on first use: the report reads records through ``._io`` without importing the
# runner (and with it LangChain's model stack) into the report worker.
_HOME = {
    **dict.fromkeys(("append_records", "read_records", "repair_torn_tail"), "_io"),
    **dict.fromkeys(("DefenderConfig", "Harness", "RunConfig", "RunResult", "RunSetupError", "RunStats",
                     "package_versions", "scrub_argv"), "_runner"),
    "run_experiment": "_experiment",
}
__getattr__ = lazy_exports(__name__, _HOME, globals())

__all__ = [
    "DefenderConfig",
    "Harness",
    "RunConfig",
    "RunResult",
    "RunSetupError",
    "RunStats",
    "append_records",
    "package_versions",
    "read_records",
    "repair_torn_tail",
    "run_experiment",
    "scrub_argv",
]
