"""The paired harness: ``Case`` -> defender -> ``Answer`` -> ``Record`` in ``records.jsonl``.

``run_experiment`` (and the ``Harness`` behind it) builds the model and defenders, runs the
clean phase first, then the injected protocols, resumably; ``read_records`` /
``append_records`` are the records file's I/O.
"""

from ._io import append_records, read_records, repair_torn_tail
from ._runner import (
    DefenderConfig,
    Harness,
    RunConfig,
    RunResult,
    RunSetupError,
    RunStats,
    package_versions,
    run_experiment,
    scrub_argv,
)

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
