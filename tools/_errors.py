"""The toolkit's domain errors: what a user got wrong (a config, a data file, a run folder),
as opposed to a bug. The ``medmis`` command prints one line for any of them and exits with
its ``exit_code``; library callers catch :class:`MedmisError`.

They live in the lowest package so every layer (models, tools, defenders, pipeline) can raise
them without importing the command line.
"""

from __future__ import annotations

EXIT_USAGE = 2
"""Usage, config or data error: nothing was created (see the exit codes in docs/runs.md)."""


class MedmisError(Exception):
    """A user error the ``medmis`` command reports as one line, exiting with ``exit_code``."""

    @property
    def exit_code(self) -> int:
        """The ``medmis`` command's exit status for this error (2 unless a subclass says)."""
        return EXIT_USAGE


class ConfigError(MedmisError):
    """A usage or config problem: a flag, a TOML key, an option or a name the toolkit rejects."""


class InputError(MedmisError):
    """A problem in data the user points the toolkit at: a dataset, a records file, a run folder."""
