"""Public faces hold user names: no command-line helper in ``medmis.experiments.__all__``, one
``load_run``, the paired comparison in analysis; old names still resolve, with a warning."""

from __future__ import annotations

import warnings

import pytest

import medmis.experiments as experiments
from medmis.experiments import analysis, generate, reporting
from medmis.experiments.api import RunFolder

CLI_HELPERS = ("int_at_least", "comma_choices", "OneLineParser", "EXIT_EPILOG", "parse_kv",
               "add_plugin_flag", "add_request_flags", "request_options", "CliError")


def test_experiments_face_has_no_command_line_helpers() -> None:
    assert not set(CLI_HELPERS) & set(experiments.__all__)
    assert {"MedmisError", "ConfigError", "InputError", "load_run", "compare"} <= set(experiments.__all__)


@pytest.mark.parametrize("name", CLI_HELPERS)
def test_old_helper_imports_still_resolve_with_a_deprecation_warning(name: str) -> None:
    from medmis.experiments import cli_args

    with pytest.warns(DeprecationWarning, match="cli_args"):
        value = getattr(experiments, name)
    assert value is getattr(cli_args, name)


def test_one_load_run_across_the_faces() -> None:
    faces = [experiments, analysis, generate, reporting]
    assert [f.__name__ for f in faces if "load_run" in f.__all__] == ["medmis.experiments"]
    assert experiments.load_run.__annotations__["return"] in (RunFolder, "RunFolder")
    assert "load_run_data" in reporting.__all__
    with pytest.warns(DeprecationWarning, match="load_run_data"):
        old = reporting.load_run
    assert old is reporting.load_run_data


def test_compare_records_is_analysis_s_and_generate_keeps_the_old_name() -> None:
    assert "compare_records" in analysis.__all__ and "CompareRow" in analysis.__all__
    assert "compare_records" not in generate.__all__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert generate.compare_records is analysis.compare_records


PUBLIC_FACES = ("medmis.agents", "medmis.tools", "medmis.graphs", "medmis.defenses", "medmis.experiments",
                "medmis.experiments.ablation", "medmis.experiments.analysis", "medmis.experiments.benchmark",
                "medmis.experiments.export", "medmis.experiments.generate", "medmis.experiments.harness",
                "medmis.experiments.reporting", "medmis.experiments.review", "medmis.experiments.view")


def _is_cli_helper(name: str, value: object) -> bool:
    """A command's plumbing: it builds a parser, takes parsed arguments, or is the command."""
    import inspect

    if name.endswith("_command") or name in ("scrub_argv",):
        return True
    if not inspect.isfunction(value):
        return False
    signature = inspect.signature(value)
    annotations = [str(p.annotation) for p in signature.parameters.values()] + [str(signature.return_annotation)]
    return "sub" in signature.parameters or any(t in a for a in annotations for t in ("Namespace", "SubParsersAction"))


@pytest.mark.parametrize("face", PUBLIC_FACES)
def test_no_public_face_lists_a_command_line_helper(face: str) -> None:
    import importlib

    module = importlib.import_module(face)
    helpers = [n for n in module.__all__ if _is_cli_helper(n, getattr(module, n))]
    assert helpers == [], f"{face}.__all__ lists command-line helpers: {helpers}"


def test_compare_is_analysis_s() -> None:
    """The public ``compare`` (two run folders) is defined in analysis, with the records one."""
    assert experiments.compare is analysis.compare
    assert analysis.compare.__module__.startswith("medmis.experiments.analysis")
    assert "compare" in analysis.__all__ and "compare" not in generate.__all__


def test_run_metrics_is_compute_run_metrics_now() -> None:
    """``run`` names the command that makes a run folder; computing a folder's metrics is
    ``compute_run_metrics`` (the old name resolves, with a warning)."""
    assert "compute_run_metrics" in analysis.__all__ and "run_metrics" not in analysis.__all__
    with pytest.warns(DeprecationWarning, match="compute_run_metrics"):
        old = analysis.run_metrics
    assert old is analysis.compute_run_metrics
