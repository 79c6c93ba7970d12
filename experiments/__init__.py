"""Everything between a dataset row and a report, one subpackage per step of the data flow.

::

    rows --benchmark--> Item --benchmark--> Case --(defender)--> Answer
         --harness--> Record (records.jsonl) --analysis--> metrics --reporting--> report
    ablation: grids of models x defenders x protocols over the harness;  cli: ``medmis``

* :mod:`medmis.experiments.benchmark` -- core types, loading/validation, delivery protocols,
  answer extraction.
* :mod:`medmis.experiments.harness` -- the paired runner and the records file.
* :mod:`medmis.experiments.analysis` -- metrics and statistics.
* :mod:`medmis.experiments.reporting` -- markdown, HTML and plots.
* :mod:`medmis.experiments.ablation` -- TOML-configured grids, dry-run estimates, budget cap.
* :mod:`medmis.experiments.api` -- the public API: ``run``, ``load_run``, ``compare`` (below).
* :mod:`medmis.experiments.testing` -- the pytest plug-in's fixtures, registered as
  ``medmis.testing`` (entry point ``pytest11``).

The names below are re-exported lazily: importing ``medmis.experiments.benchmark`` (as the
graphs and defenders do) must not pull in the harness, which imports the defenders.
"""

# The folder is the package ``medmis.experiments``; imported as ``experiments`` from the clone's root it
# would be a second copy of every class (isinstance checks and registries silently split).
if __name__ != "medmis.experiments":
    raise ImportError(f"import medmis.experiments, not {__name__}: the folder experiments/ is installed as medmis.experiments (pip install -e .)")

import warnings
from importlib import import_module
from typing import Any

# the domain errors (the CLI maps them to exit codes), defined in the lowest package
from medmis.tools import ConfigError as ConfigError
from medmis.tools import InputError as InputError
from medmis.tools import MedmisError as MedmisError

_SUBPACKAGES = ("benchmark", "harness", "analysis", "reporting", "ablation", "api")
# The command line's helpers, once re-exported here: still resolved (with a DeprecationWarning)
# for code that imported them, but no part of the public face; import them from their modules.
_CLI_HELPERS: dict[str, str] = {
    "int_at_least": "_argtypes",
    "comma_choices": "_argtypes",
    "OneLineParser": "_argtypes",
    "EXIT_EPILOG": "_argtypes",
    "parse_kv": "_cli_flags",
    "add_plugin_flag": "_cli_flags",
    "add_request_flags": "_cli_flags",
    "request_options": "_cli_flags",
    "CliError": "_errors",
}
_EXPORTS: dict[str, str] = {
    # benchmark
    **dict.fromkeys(
        (
            "CONTENT_TYPES", "CONTEXT_HEADING", "PROTOCOLS", "PROVENANCES", "SUBSETS",
            "SYSTEM_PROMPT", "Answer", "Case", "CaseView", "ContextSentence", "DataError", "Dataset",
            "Extraction", "Item", "ProtocolName", "Record", "RowIssue", "TraceStep", "Usage",
            "build_cases", "canonical_content", "canonical_provenance", "cases_for_item",
            "extract_answer", "load_dataset", "render_prompt", "render_user_prompt",
            "type1_target", "DEFAULT_PROMPT", "PROMPT_NAMES", "prompt_preset",
        ),
        "benchmark",
    ),
    # harness
    **dict.fromkeys(
        ("DefenderConfig", "Harness", "RunConfig", "RunResult", "read_records", "run_experiment"),
        "harness",
    ),
    # analysis
    **dict.fromkeys(
        ("MetricsReport", "compute_metrics", "mcnemar_exact", "paired_bootstrap_diff", "wilson"),
        "analysis",
    ),
    # reporting
    **dict.fromkeys(("write_report",), "reporting"),
    # the public API (``load_run`` opens a folder with its records as DuckDB / Arrow)
    **dict.fromkeys(("RunFolder", "compare", "load_run", "run"), "api"),
    # ablation
    **dict.fromkeys(("AblationConfig", "load_config", "run_ablation"), "ablation"),
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    if name in _CLI_HELPERS:
        warnings.warn(f"medmis.experiments.{name} is a command-line helper, no longer part of the public "
                      f"API; import it from medmis.experiments.cli_args", DeprecationWarning,
                      stacklevel=2)
        return getattr(import_module(f"{__name__}.{_CLI_HELPERS[name]}"), name)
    if name in _SUBPACKAGES:
        return import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS, *_SUBPACKAGES])


__all__ = sorted([*_EXPORTS, "ConfigError", "InputError", "MedmisError"])
