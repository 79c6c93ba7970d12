"""Injection generation and sensitivity studies (``medmis generate``, ``medmis compare``).

The benchmark's generation machinery (arXiv 2606.12291 §3.3, App. A.3, D.1-D.2; reference
notebook ``InjectionGeneration.ipynb`` in AI-in-Health/MedMisBench): source readers, the
two-stage pipeline (applicability filter, option-aligned generation) or the reference's merged
call, seeded provenance sampling, rows in the released schema, and the sensitivity studies
(generator swap, cyclic provenance reassignment, stratified subset, paired comparison).
"""

from ._compare import CompareRow, compare_command, compare_records
from ._pipeline import Job, Outcome, Pipeline, sample_provenance
from ._prompts import MERGED_VERSION, MISINFO_TYPES, PROVENANCE_TYPES, TWO_STAGE_VERSION
from ._release import cycle_provenance, release_row, stratified_sample
from ._run import GenerateConfig, build_jobs, estimate, generate
from ._sources import SOURCE_FORMATS, SourceItem, detect_format, read_source

__all__ = [
    "MERGED_VERSION",
    "MISINFO_TYPES",
    "PROVENANCE_TYPES",
    "SOURCE_FORMATS",
    "TWO_STAGE_VERSION",
    "CompareRow",
    "GenerateConfig",
    "Job",
    "Outcome",
    "Pipeline",
    "SourceItem",
    "build_jobs",
    "compare_command",
    "compare_records",
    "cycle_provenance",
    "detect_format",
    "estimate",
    "generate",
    "read_source",
    "release_row",
    "sample_provenance",
    "stratified_sample",
]
