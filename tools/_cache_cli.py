"""``medmis cache stats|verify|export|import|prune``: parsers, handlers and one-line failures.

The work is in :mod:`medmis.tools._cassette`; :func:`one_line` turns a damaged store or a bad
cassette into the single line the CLI prints before exiting 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any, TextIO

# a damaged entry is a finished check that found problems (exit 1, like case errors in a
# run); an unreadable store or a missing folder is a usage/data error (exit 2)
EXIT_DAMAGED = 1


def add_cache_parser(sub: Any) -> None:
    """Add ``medmis cache`` and its subcommands to the ``medmis`` subparsers."""
    cache = sub.add_parser("cache", help="inspect and move the record/replay store")
    csub = cache.add_subparsers(dest="cache_command", required=True)
    cs = csub.add_parser("stats", help="entries per kind and bytes on disk (JSON)")
    cs.add_argument("--cache-dir", required=True, help="the store folder (e.g. runs/NAME/cache)")
    ce = csub.add_parser("export", help="write the store as a sorted, canonical JSONL cassette")
    ce.add_argument("--cache-dir", required=True, help="the store folder (e.g. runs/NAME/cache)")
    ce.add_argument("path", help="cassette file to write (replaced atomically)")
    ce.add_argument("--kind", action="append", default=None, help="model, search or visit (repeatable)")
    ci = csub.add_parser("import", help="load a JSONL cassette into a store (all or nothing)")
    ci.add_argument("--cache-dir", required=True, help="the store folder (created when missing)")
    ci.add_argument("path", help="cassette file to read")
    ci.add_argument("--overwrite", action="store_true",
                    help="replace recordings the store holds with other values (refused by default)")
    cp = csub.add_parser("prune", help="remove entries: damaged ones, old ones or one kind")
    cp.add_argument("--cache-dir", required=True, help="the store folder (e.g. runs/NAME/cache)")
    cp.add_argument("--older-than-days", type=float, default=None, metavar="N",
                    help="drop entries recorded more than N days ago")
    cp.add_argument("--kind", default=None, help="only entries of this kind (model, search or visit); "
                    "alone: every entry of it")
    cp.add_argument("--corrupt", action="store_true", help="drop entries that fail their checks")
    add_verify_parser(csub)


def run_cache(args: argparse.Namespace) -> int:
    """Handle ``medmis cache ...``; returns the exit status (wrap in :func:`one_line`)."""
    import json

    from . import _cassette

    if args.cache_command == "verify":
        return run_verify(args)
    if args.cache_command == "stats":
        print(json.dumps(_cassette.cache_stats(args.cache_dir), indent=2))
    elif args.cache_command == "export":
        n = _cassette.cache_export(args.cache_dir, args.path, args.kind)
        print(f"exported {n} entries to {args.path}")
    elif args.cache_command == "import":
        n = _cassette.cache_import(args.cache_dir, args.path, overwrite=args.overwrite)
        print(f"imported {n} entries into {args.cache_dir}")
    else:
        n = _cassette.cache_prune(args.cache_dir, args.older_than_days, args.kind, corrupt=args.corrupt)
        print(f"pruned {n} entries")
    return 0


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
