"""How the CLI prints a domain error (:class:`medmis.tools.MedmisError`).

The error types themselves live in :mod:`medmis.tools` (the lowest package) so that library
modules raise them without importing the command line.
"""

from medmis.tools import ConfigError

CliError = ConfigError
"""The command line's name for its own argument errors; library code raises
:class:`~medmis.tools.ConfigError` (this is the same class, kept for code that caught it)."""


def error_lines(exc: BaseException) -> list[str]:
    """The lines the CLI prints for a usage, config or data error, credentials masked.

    A data error is one line too: the first problems and their count (the full list is what
    ``medmis data validate`` or ``--on-invalid skip``'s invalid_rows.txt is for). A provider's
    message may echo a key or a Basic credential.
    """
    from medmis.experiments.benchmark import DataError
    from medmis.tools import redact

    text = [exc.summary()] if isinstance(exc, DataError) else str(exc).strip().splitlines()
    return [redact(line) for line in text]
