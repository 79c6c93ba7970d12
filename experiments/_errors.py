"""The user-error type shared by the CLI and the commands it dispatches to.

It sits below both ``cli`` and the subcommands (``ablation``) so neither imports the other.
"""


class CliError(Exception):
    """A usage, config or data error: the CLI prints its message on one line and exits 2."""
