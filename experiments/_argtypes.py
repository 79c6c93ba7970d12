"""Argument types and the parser class of the ``medmis`` command line.

A usage mistake is one line on stderr and exit status 2, like every other user error
(``medmis run: error: --limit must be >= 1, got 0 (see medmis run --help)``); argparse's
default prints the whole usage block first.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from medmis.experiments._errors import CliError

__all__ = ["EXIT_EPILOG", "OneLineParser", "accept_change_fields", "comma_choices", "int_at_least"]

EXIT_EPILOG = """\
exit status (every command):
  0  finished: every case ran and was graded
  1  finished with case errors (one summary line: how many, by kind, and the
     command that redoes them with --retry-errors)
  2  usage, config or data error (one line, no traceback, nothing created)
  3  stopped early (budget cap or interrupted); re-run the same command to resume
"""


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line (and exit 2)."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {message} (see {self.prog} --help)\n")
        sys.exit(2)


def int_at_least(low: int) -> Callable[[str], int]:
    """An argparse ``type`` for integers ``>= low``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value

    parse.__name__ = f"integer >= {low}"
    return parse


def comma_choices(choices: tuple[str, ...]) -> Callable[[str], str]:
    """An argparse ``type`` for a comma-separated subset of ``choices`` (kept as text)."""

    def parse(text: str) -> str:
        values = [v.strip() for v in text.split(",") if v.strip()]
        bad = [v for v in values if v not in choices]
        if bad or not values:
            raise argparse.ArgumentTypeError(
                f"unknown value(s) {', '.join(bad) or repr(text)} (choose from {','.join(choices)})"
            )
        return ",".join(values)

    parse.__name__ = "comma-separated list"
    return parse


def accept_change_fields(values: Sequence[str]) -> list[str]:
    """``--accept-change`` values (repeatable, comma-separated), checked against the
    fingerprint's field names.

    Raises:
        CliError: An unknown field name.
    """
    from medmis.experiments.harness import ACCEPTABLE_CHANGES

    fields = [v.strip() for value in values for v in value.split(",") if v.strip()]
    bad = [f for f in fields if f not in ACCEPTABLE_CHANGES]
    if bad:
        raise CliError(f"--accept-change: unknown field(s) {', '.join(bad)} "
                       f"(choose from {', '.join(ACCEPTABLE_CHANGES)})")
    return fields
