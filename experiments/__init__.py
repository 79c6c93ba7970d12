"""Data, delivery protocols, answer extraction, the paired harness, metrics, reports and the CLI.

Data flows one way: rows -> ``Item`` (``load_dataset``) -> ``Case`` (``build_cases``) ->
defender -> ``Answer`` -> ``Record`` (``Harness`` / ``run_experiment``) -> ``compute_metrics``
-> ``write_report``. The harness and ablation names are imported lazily (they pull in the
defenders and providers).
"""

from typing import Any

from ._data import (
    DataError,
    Dataset,
    RowIssue,
    canonical_content,
    canonical_provenance,
    load_dataset,
)
from ._extract import Extraction, extract_answer
from ._io import read_records
from ._metrics import MetricsReport, compute_metrics
from ._protocols import (
    CONTEXT_HEADING,
    SYSTEM_PROMPT,
    build_cases,
    cases_for_item,
    render_prompt,
    render_user_prompt,
    type1_target,
)
from ._report import load_run, write_report
from ._stats import mcnemar_exact, paired_bootstrap_diff, wilson
from ._types import (
    CONTENT_TYPES,
    PROTOCOLS,
    PROVENANCES,
    SUBSETS,
    Answer,
    Case,
    ContextSentence,
    Item,
    ProtocolName,
    Record,
    TraceStep,
    Usage,
)

_LAZY = {
    "DefenderConfig": "._runner",
    "Harness": "._runner",
    "RunConfig": "._runner",
    "RunResult": "._runner",
    "run_experiment": "._runner",
    "AblationConfig": "._ablate",
    "load_config": "._ablate",
    "run_ablation": "._ablate",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module 'experiments' has no attribute {name!r}")


__all__ = [
    "CONTENT_TYPES",
    "CONTEXT_HEADING",
    "PROTOCOLS",
    "PROVENANCES",
    "SUBSETS",
    "SYSTEM_PROMPT",
    "AblationConfig",
    "Answer",
    "Case",
    "ContextSentence",
    "DataError",
    "Dataset",
    "DefenderConfig",
    "Extraction",
    "Harness",
    "Item",
    "MetricsReport",
    "ProtocolName",
    "Record",
    "RowIssue",
    "RunConfig",
    "RunResult",
    "TraceStep",
    "Usage",
    "build_cases",
    "canonical_content",
    "canonical_provenance",
    "cases_for_item",
    "compute_metrics",
    "extract_answer",
    "load_config",
    "load_dataset",
    "load_run",
    "mcnemar_exact",
    "paired_bootstrap_diff",
    "read_records",
    "render_prompt",
    "render_user_prompt",
    "run_ablation",
    "run_experiment",
    "type1_target",
    "wilson",
    "write_report",
]
