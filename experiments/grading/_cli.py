"""``medmis grade RUN_DIR --rubrics FILE --judge SPEC --judge SPEC [--threshold T]``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ._defaults import DEFAULT_THRESHOLD


def add_parser(sub: Any) -> None:
    """Add ``grade`` to the ``medmis`` command's subparsers."""
    p = sub.add_parser("grade", help="grade an open-ended run's free-text answers with a rubric jury (resumable)")
    p.add_argument("dir", help="open-ended run folder (answer_format = \"open\")")
    p.add_argument("--rubrics", required=True, metavar="FILE", help="rubric file (JSONL, one item per line)")
    p.add_argument("--judge", action="append", required=True, metavar="SPEC",
                   help="a judge model spec (repeat: at least two; mock/judge, mock/judge-lenient and "
                        "mock/judge-strict are SIMULATED judges for offline use)")
    p.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                   help=f"jury score at or above which an answer counts as correct (open-ended ASR; default {DEFAULT_THRESHOLD})")
    p.add_argument("--cache", choices=("live", "record", "replay", "refresh"), default="live",
                   help="record/replay judge calls in the run's store (default: live)")
    p.add_argument("--cache-dir", default=None, help="the store's folder (default RUN_DIR/cache)")
    p.add_argument("--max-connections", type=int, default=8, help="judge calls in flight (default 8)")
    p.add_argument("--max-retries", type=int, default=4, help="retries per judge call (default 4)")


def run_grade(args: argparse.Namespace) -> int:
    """Run ``medmis grade``; every user error is raised as a one-line MedmisError (exit 2)."""
    from medmis.tools import ConfigError

    from ._grade import GradeSettings, grade

    judges = tuple(args.judge)
    settings = GradeSettings(run_dir=Path(args.dir), rubrics=Path(args.rubrics), judges=judges,
                             threshold=args.threshold, cache=args.cache,
                             cache_dir=Path(args.cache_dir) if args.cache_dir else None,
                             max_connections=args.max_connections, max_retries=args.max_retries)
    try:
        code, message = grade(settings)
    except ValueError as exc:  # a judge spec the registry rejects (unknown provider or mock)
        from medmis.tools import MedmisError

        if isinstance(exc, MedmisError):
            raise
        raise ConfigError(f"--judge: {exc}") from None
    print(message, file=sys.stderr if code else sys.stdout)
    return code
