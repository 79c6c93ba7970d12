"""The parser and handler of ``medmis generate pages`` (chosen by ``_cli.parse_pages``)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from medmis.experiments.cli_args import (
    EXIT_EPILOG,
    CliError,
    OneLineParser,
    add_request_flags,
    comma_choices,
    int_at_least,
    request_options,
)
from medmis.tools import PAGE_STYLES

_AMBIGUOUS = ("`pages` after `generate` is this command; to generate injections from a source "
              "named pages, write ./pages")


class _PagesParser(OneLineParser):
    def error(self, message: str) -> NoReturn:
        # a usage error where a file or folder named `pages` exists: the user may have meant it
        if Path("pages").exists():
            message = f"{message}; {_AMBIGUOUS}"
        super().error(message)


def pages_parser() -> argparse.ArgumentParser:
    """The ``medmis generate pages`` parser."""
    p = _PagesParser(
        prog="medmis generate pages",
        description="For every Type 1 case of a release (each item x each wrong option with a false\n"
                    "sentence), one page per style that argues for that sentence: synthetic poisoned\n"
                    "pages, written only to evaluate defenses under retrieval poisoning. Rows are\n"
                    "PoisonedPage (medmis.tools._poison_types); publishers and URLs are fictional\n"
                    "(reserved .example hosts).",
        epilog=EXIT_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--from-release", required=True, metavar="FILE",
                   help="released-schema rows (file or folder); its inject<key> sentences are the claims")
    p.add_argument("--generator", required=True, metavar="SPEC",
                   help="generator model: google/<id>, openai/<id>, mock/generator")
    p.add_argument("--out", required=True, metavar="PAGES.jsonl", help="poisoned-page rows (resumable)")
    p.add_argument("--styles", type=comma_choices(PAGE_STYLES), default=",".join(PAGE_STYLES),
                   help=f"page styles, comma-separated (default: all: {','.join(PAGE_STYLES)})")
    p.add_argument("--subset", default=None, help="keep one subset of the release")
    p.add_argument("--limit", type=int_at_least(1), default=None, help="the first N items only")
    p.add_argument("--seed", type=int, default=0, help="seed of the publisher and URL draws (default 0)")
    p.add_argument("--max-connections", type=int_at_least(1), default=8,
                   help="generator calls in flight (default 8)")
    p.add_argument("--cache", choices=["live", "record", "replay", "refresh"], default="live",
                   help="record/replay store for generator calls (default: live)")
    p.add_argument("--cache-dir", default=None, help="record/replay store (default: FILE.cache next to --out)")
    p.add_argument("--budget-usd", type=float, default=None, help="stop scheduling pages past this spend")
    p.add_argument("--price", default=None, metavar="IN,OUT", help="generator price, USD per million tokens")
    p.add_argument("--model-base-url", default=None, metavar="URL",
                   help="base URL of the generator's API (gateway, proxy or local server)")
    add_request_flags(p)
    p.add_argument("--temperature", type=float, default=1.0,
                   help="generation temperature (default 1.0, as generate's reference preset)")
    p.add_argument("--dry-run", action="store_true", help="print cases, pages, calls, tokens and cost; call nothing")
    return p


def parse_pages_args(argv: Sequence[str]) -> argparse.Namespace:
    """Parse what follows ``medmis generate pages``; the namespace dispatches as ``generate``."""
    args = pages_parser().parse_args(list(argv))
    args.command, args.generate_command = "generate", "pages"
    return args


def run_pages(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Handle ``medmis generate pages``."""
    from ._finish import parse_price
    from ._pages import PagesConfig, build_jobs, estimate, generate_pages

    if Path("pages").exists():
        print(f"medmis generate pages: note: {_AMBIGUOUS}", file=sys.stderr)
    cfg = PagesConfig(
        out=Path(args.out), generator=args.generator, from_release=Path(args.from_release),
        styles=tuple(args.styles.split(",")), subset=args.subset, seed=args.seed, limit=args.limit,
        max_connections=args.max_connections, cache=args.cache,
        cache_dir=Path(args.cache_dir) if args.cache_dir else None, budget_usd=args.budget_usd,
        price=parse_price(args.price), base_url=args.model_base_url, temperature=args.temperature,
        **request_options(args), max_retries=args.max_retries,
        argv=["medmis", *argv],
    )
    try:
        if args.dry_run:
            print(json.dumps(estimate(build_jobs(cfg), cfg), indent=2))
            return 0
        return generate_pages(cfg)
    except ValueError as exc:
        if type(exc).__name__ == "DataError":
            raise
        raise CliError(str(exc)) from None
