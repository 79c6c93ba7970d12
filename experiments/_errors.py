"""The user-error type shared by the CLI and the commands it dispatches to.

It sits below both ``cli`` and the subcommands (``ablation``) so neither imports the other.
"""


class CliError(Exception):
    """A usage, config or data error: the CLI prints its message on one line and exits 2."""


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
