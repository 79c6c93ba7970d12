"""One domain error type (``MedmisError``) for every layer's user errors; the CLI maps it to an
exit code and one line, and library modules never raise the command line's own error type."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from medmis.agents import MissingKeyError, ModelConfigError
from medmis.defenses import DefenderConfigError
from medmis.experiments import ConfigError, DataError, InputError, MedmisError
from medmis.experiments.cli import main
from medmis.experiments.export._run import read_run
from medmis.experiments.harness import RunSetupError
from medmis.experiments.records import RecordsFileError, WriteFailed

ROOT = Path(__file__).resolve().parents[1]
# The command line's own modules: argument parsing and the handlers wired in cli.py (a
# subpackage's handlers are named ``*_cli.py``).
CLI_MODULES = {"cli.py", "_argtypes.py", "_cli_flags.py", "_errors.py"}


@pytest.mark.parametrize(
    "error",
    [ConfigError("x"), DataError("x"), RecordsFileError("x"), RunSetupError("x"),
     DefenderConfigError("x"), ModelConfigError("x"), MissingKeyError("openai", ("OPENAI_API_KEY",)),
     WriteFailed("f", OSError(28, "No space left on device"))],
    ids=lambda e: type(e).__name__,
)
def test_every_user_error_is_a_medmis_error_with_an_exit_code(error: Exception) -> None:
    # a library caller catches one type; the CLI reads the exit code from the error
    assert isinstance(error, MedmisError)
    assert error.exit_code == 2


def test_data_errors_are_input_errors_and_a_late_write_failure_is_exit_3() -> None:
    assert isinstance(DataError("x"), InputError) and isinstance(RecordsFileError("x"), InputError)
    assert WriteFailed("f", OSError(28, "full"), written=3).exit_code == 3


def test_a_library_error_maps_to_exit_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match="not a run folder"):  # the export module's own error
        read_run(tmp_path)
    assert main(["export", "parquet", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("medmis: ") and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_no_library_module_raises_the_cli_error() -> None:
    offenders = []
    for path in sorted((ROOT / "experiments").rglob("*.py")):
        if path.name in CLI_MODULES or path.name.endswith("_cli.py"):
            continue
        names = {n.id for n in ast.walk(ast.parse(path.read_text("utf-8"))) if isinstance(n, ast.Name)}
        if "CliError" in names:
            offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []
