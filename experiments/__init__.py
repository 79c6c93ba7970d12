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
* :mod:`medmis.experiments.api` -- the public API: ``run``, ``load_run`` (below; ``compare``
  is analysis's).
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
from typing import TYPE_CHECKING, Any

# the domain errors (the CLI maps them to exit codes), defined in the lowest package
from medmis.tools import ConfigError as ConfigError
from medmis.tools import InputError as InputError
from medmis.tools import MedmisError as MedmisError

if TYPE_CHECKING:  # what mypy and IDEs see: the real types (at run time the table below loads them)
    from .ablation import (
        AblationConfig as AblationConfig,
    )
    from .ablation import (
        load_config as load_config,
    )
    from .ablation import (
        run_ablation as run_ablation,
    )
    from .analysis import (
        MetricsReport as MetricsReport,
    )
    from .analysis import (
        compare as compare,
    )
    from .analysis import (
        compute_metrics as compute_metrics,
    )
    from .analysis import (
        mcnemar_exact as mcnemar_exact,
    )
    from .analysis import (
        paired_bootstrap_diff as paired_bootstrap_diff,
    )
    from .analysis import (
        wilson as wilson,
    )
    from .api import (
        RunFolder as RunFolder,
    )
    from .api import (
        load_run as load_run,
    )
    from .api import (
        run as run,
    )
    from .benchmark import (
        CONTENT_TYPES as CONTENT_TYPES,
    )
    from .benchmark import (
        CONTEXT_HEADING as CONTEXT_HEADING,
    )
    from .benchmark import (
        DEFAULT_PROMPT as DEFAULT_PROMPT,
    )
    from .benchmark import (
        PROMPT_NAMES as PROMPT_NAMES,
    )
    from .benchmark import (
        PROTOCOLS as PROTOCOLS,
    )
    from .benchmark import (
        PROVENANCES as PROVENANCES,
    )
    from .benchmark import (
        SUBSETS as SUBSETS,
    )
    from .benchmark import (
        SYSTEM_PROMPT as SYSTEM_PROMPT,
    )
    from .benchmark import (
        Answer as Answer,
    )
    from .benchmark import (
        Case as Case,
    )
    from .benchmark import (
        CaseView as CaseView,
    )
    from .benchmark import (
        ContextSentence as ContextSentence,
    )
    from .benchmark import (
        DataError as DataError,
    )
    from .benchmark import (
        Dataset as Dataset,
    )
    from .benchmark import (
        Extraction as Extraction,
    )
    from .benchmark import (
        Item as Item,
    )
    from .benchmark import (
        ProtocolName as ProtocolName,
    )
    from .benchmark import (
        Record as Record,
    )
    from .benchmark import (
        RowIssue as RowIssue,
    )
    from .benchmark import (
        TraceStep as TraceStep,
    )
    from .benchmark import (
        Usage as Usage,
    )
    from .benchmark import (
        build_cases as build_cases,
    )
    from .benchmark import (
        canonical_content as canonical_content,
    )
    from .benchmark import (
        canonical_provenance as canonical_provenance,
    )
    from .benchmark import (
        cases_for_item as cases_for_item,
    )
    from .benchmark import (
        extract_answer as extract_answer,
    )
    from .benchmark import (
        load_dataset as load_dataset,
    )
    from .benchmark import (
        prompt_preset as prompt_preset,
    )
    from .benchmark import (
        render_prompt as render_prompt,
    )
    from .benchmark import (
        render_user_prompt as render_user_prompt,
    )
    from .benchmark import (
        type1_target as type1_target,
    )
    from .harness import (
        DefenderConfig as DefenderConfig,
    )
    from .harness import (
        Harness as Harness,
    )
    from .harness import (
        RunConfig as RunConfig,
    )
    from .harness import (
        RunOptions as RunOptions,
    )
    from .harness import (
        RunResult as RunResult,
    )
    from .harness import (
        RunSpec as RunSpec,
    )
    from .harness import (
        run_experiment as run_experiment,
    )
    from .records import (
        read_records as read_records,
    )
    from .reporting import (
        write_report as write_report,
    )

_SUBPACKAGES = ("benchmark", "records", "harness", "analysis", "reporting", "ablation", "api")
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
        ("DefenderConfig", "Harness", "RunConfig", "RunOptions", "RunResult", "RunSpec", "run_experiment"),
        "harness",
    ),
    # records (the run folder's records file)
    **dict.fromkeys(("read_records",), "records"),
    # analysis
    **dict.fromkeys(
        ("MetricsReport", "compare", "compute_metrics", "mcnemar_exact", "paired_bootstrap_diff", "wilson"),
        "analysis",
    ),
    # reporting
    **dict.fromkeys(("write_report",), "reporting"),
    # the public API (``load_run`` opens a folder with its records as DuckDB / Arrow)
    **dict.fromkeys(("RunFolder", "load_run", "run"), "api"),
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
