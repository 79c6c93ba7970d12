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
