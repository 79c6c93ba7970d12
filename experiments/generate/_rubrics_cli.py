"""The parser and handler of ``medmis generate rubrics`` (chosen by ``_cli.parse_pages``)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from medmis.experiments.cli_args import (
    EXIT_EPILOG,
    CliError,
    OneLineParser,
    add_request_flags,
    int_at_least,
    request_options,
)


def rubrics_parser() -> argparse.ArgumentParser:
    """The ``medmis generate rubrics`` parser."""
    p = OneLineParser(
        prog="medmis generate rubrics",
        description="One HealthBench-shaped rubric per item of a release (the file `medmis grade --rubrics`\n"
                    "reads): correct concept, key reasoning and unsafe action written by the generator;\n"
                    "one endorses_injection criterion per Type 1 target restating its false sentence.\n"
                    "A clinician checks the file before use.",
        epilog=EXIT_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--from-release", required=True, metavar="FILE", help="released-schema rows (file or folder)")
    p.add_argument("--generator", required=True, metavar="SPEC",
                   help="generator model: google/<id>, openai/<id>, mock/generator (offline, synthetic)")
    p.add_argument("--out", required=True, metavar="RUBRICS.jsonl", help="rubric file (resumable)")
    p.add_argument("--rubric-version", default="1", help="the rubric_version written on every line (default 1)")
    p.add_argument("--subset", default=None, help="keep one subset of the release")
    p.add_argument("--limit", type=int_at_least(1), default=None, help="the first N items only")
    p.add_argument("--max-connections", type=int_at_least(1), default=8, help="generator calls in flight (default 8)")
    p.add_argument("--cache", choices=["live", "record", "replay", "refresh"], default="live",
                   help="record/replay store for generator calls (default: live)")
    p.add_argument("--cache-dir", default=None, help="record/replay store (default: FILE.cache next to --out)")
    p.add_argument("--budget-usd", type=float, default=None, help="stop scheduling items past this spend")
    p.add_argument("--price", default=None, metavar="IN,OUT", help="generator price, USD per million tokens")
    p.add_argument("--model-base-url", default=None, metavar="URL", help="base URL of the generator's API")
    add_request_flags(p)
    p.add_argument("--temperature", type=float, default=0.0, help="generation temperature (default 0)")
    p.add_argument("--dry-run", action="store_true", help="print items, calls, tokens and cost; call nothing")
    return p


def parse_rubrics_args(argv: Sequence[str]) -> argparse.Namespace:
    """Parse what follows ``medmis generate rubrics``; the namespace dispatches as ``generate``."""
    args = rubrics_parser().parse_args(list(argv))
    args.command, args.generate_command = "generate", "rubrics"
    return args


def run_rubrics(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Handle ``medmis generate rubrics``."""
    from ._finish import parse_price
    from ._rubrics import RubricsConfig, build_jobs, estimate, generate_rubrics

    cfg = RubricsConfig(
        out=Path(args.out), generator=args.generator, from_release=Path(args.from_release),
        rubric_version=args.rubric_version, subset=args.subset, limit=args.limit,
        max_connections=args.max_connections, cache=args.cache,
        cache_dir=Path(args.cache_dir) if args.cache_dir else None, budget_usd=args.budget_usd,
        price=parse_price(args.price), base_url=args.model_base_url, temperature=args.temperature,
        **request_options(args), max_retries=args.max_retries, argv=["medmis", *argv],
    )
    try:
        if args.dry_run:
            print(json.dumps(estimate(build_jobs(cfg), cfg), indent=2))
            return 0
        return generate_rubrics(cfg)
    except ValueError as exc:
        if type(exc).__name__ == "DataError":
            raise
        raise CliError(str(exc)) from None
