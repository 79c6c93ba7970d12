"""Argument helpers shared by the parsers of ``medmis`` and its subcommand packages
(``medmis generate``, ``medmis generate pages``).

They are the command line's, not the library's: nothing here is in
``medmis.experiments.__all__``. A subpackage's parser imports them from this module.
"""

from ._argtypes import EXIT_EPILOG, OneLineParser, comma_choices, int_at_least
from ._cli_flags import add_plugin_flag, add_request_flags, parse_kv, request_options
from ._errors import CliError, error_lines

__all__ = [
    "EXIT_EPILOG",
    "CliError",
    "OneLineParser",
    "add_plugin_flag",
    "add_request_flags",
    "comma_choices",
    "error_lines",
    "int_at_least",
    "parse_kv",
    "request_options",
]
