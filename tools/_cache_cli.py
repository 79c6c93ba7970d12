"""``medmis cache verify`` and the one-line failures of the cache maintenance commands.

The other ``medmis cache`` subcommands are set up in ``medmis.experiments.cli``; their work is
in :mod:`medmis.tools._cassette`. This module adds ``verify`` (parser and handler) and
:func:`one_line`, which turns a damaged store or a bad cassette into the single line the CLI
prints before exiting 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any, TextIO

# a damaged entry is a finished check that found problems (exit 1, like case errors in a
# run); an unreadable store or a missing folder is a usage/data error (exit 2)
EXIT_DAMAGED = 1


def add_verify_parser(csub: Any) -> argparse.ArgumentParser:
    """Add ``verify`` to the ``medmis cache`` subparsers."""
    verify = csub.add_parser(
        "verify",
        help="read every entry and check it against its content hash; exit 1 if any is damaged",
        description="Read every entry of the store and check its content hash and key. Prints "
        "one line per damaged entry and a summary; exits 0 when all are sound, 1 when any is "
        "damaged, 2 when the store cannot be read at all.",
    )
    verify.add_argument("--cache-dir", required=True, help="the store folder (e.g. runs/NAME/cache)")
    verify.add_argument("--kind", action="append", default=None,
                        help="model, search or visit (repeatable; default all)")
    return verify


def run_verify(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Handle ``medmis cache verify``; returns the exit status."""
    from ._cassette import cache_verify

    stream = sys.stdout if out is None else out
    checked, problems = cache_verify(args.cache_dir, args.kind)
    for problem in problems:
        print(f"damaged: {problem.digest}: {problem.reason}", file=stream)
    if problems:
        print(
            f"{len(problems)} of {checked} entries in {args.cache_dir} are damaged: re-record "
            "them with --cache refresh or drop them with `medmis cache prune --corrupt`",
            file=stream,
        )
        return EXIT_DAMAGED
    print(f"ok: {checked} entries in {args.cache_dir} match their content hashes", file=stream)
    return 0


def one_line(handler: Callable[[], int], error: type[Exception]) -> int:
    """Run a cache command, turning a damaged store or bad cassette into ``error`` (one line).

    ``error`` is the CLI's user-error type (it prints the message and exits 2).
    """
    from ._cassette import CassetteError
    from ._types import StoreCorruptError

    try:
        return handler()
    except (StoreCorruptError, CassetteError) as exc:
        raise error(" ".join(str(exc).split())) from None
