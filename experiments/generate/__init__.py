"""Injection generation and sensitivity studies (``medmis generate``, ``medmis compare``).

The benchmark's generation machinery (arXiv 2606.12291 §3.3, App. A.3, D.1-D.2; reference
notebook ``InjectionGeneration.ipynb`` in AI-in-Health/MedMisBench): source readers, the
two-stage pipeline (applicability filter, option-aligned generation) or the reference's merged
call, seeded provenance sampling, rows in the released schema, and the sensitivity studies
(generator swap, cyclic provenance reassignment, stratified subset, paired comparison); and
poisoned pages for Type 1 cases (``medmis generate pages``, :func:`generate_pages`).
"""

from medmis.tools import lazy_exports

# Loaded on first use: `medmis --help` builds this package's parsers and must stay light
# (the comparison pulls in the statistics stack).
_HOME = {
    "parse_pages": "_cli",
    "CompareRow": "_compare",  # at home in medmis.experiments.analysis (kept for old imports)
    "GenerateConfig": "_run",
    "Job": "_pipeline",
    "MERGED_VERSION": "_prompts",
    "MISINFO_TYPES": "_prompts",
    "Outcome": "_pipeline",
    "PagesConfig": "_pages",
    "PROVENANCE_TYPES": "_prompts",
    "Pipeline": "_pipeline",
    "SOURCE_FORMATS": "_sources",
    "SourceItem": "_sources",
    "TWO_STAGE_VERSION": "_prompts",
    "build_jobs": "_run",
    "compare_command": "_compare",
    "compare_records": "_compare",  # at home in medmis.experiments.analysis
    "cycle_provenance": "_release",
    "detect_format": "_sources",
    "estimate": "_run",
    "generate": "_run",
    "generate_pages": "_pages",
    "read_source": "_sources",
    "run_compare": "_cli",
    "run_generate": "_cli",
    "release_row": "_release",
    "sample_provenance": "_pipeline",
    "stratified_sample": "_release",
    **dict.fromkeys(("add_parsers",), "_cli"),
}


__getattr__ = lazy_exports(__name__, _HOME, globals())

__all__ = [
    "MERGED_VERSION",
    "MISINFO_TYPES",
    "PROVENANCE_TYPES",
    "SOURCE_FORMATS",
    "TWO_STAGE_VERSION",
    "GenerateConfig",
    "Job",
    "Outcome",
    "PagesConfig",
    "Pipeline",
    "SourceItem",
    "build_jobs",
    "cycle_provenance",
    "detect_format",
    "estimate",
    "generate",
    "generate_pages",
    "read_source",
    "release_row",
    "sample_provenance",
    "stratified_sample",
]
