"""Parsers and handlers for ``medmis generate`` and ``medmis compare`` (wired in ``cli.py``)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from medmis.experiments.cli_args import (
    CliError,
    add_plugin_flag,
    add_request_flags,
    parse_kv,
    request_options,
)

FORMATS = ("auto", "medqa", "medmcqa", "medxpertqa", "medjourney", "hle", "release")
PAGES_EPILOG = ("medmis generate pages --help: pages supporting each Type 1 case's false claim "
                "(poisoned retrieval). medmis generate rubrics --help: a rubric per item for grading "
                "free-text answers. Give a SOURCE named `pages` or `rubrics` as ./pages, ./rubrics.")


def parse_pages(argv: Sequence[str]) -> argparse.Namespace | None:
    """``medmis generate pages ...`` parsed by its own parser, or None for any other command
    line (``generate`` takes an optional SOURCE, so ``pages`` cannot be an argparse sub-command
    of it; the word is read as the sub-command only right after ``generate``)."""
    if list(argv[:2]) == ["generate", "rubrics"]:  # the same reading for `generate rubrics`
        from ._rubrics_cli import parse_rubrics_args

        return parse_rubrics_args(argv[2:])
    if list(argv[:2]) != ["generate", "pages"]:
        return None
    from ._pages_cli import parse_pages_args

    return parse_pages_args(argv[2:])


def add_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``generate`` and ``compare`` to the ``medmis`` sub-command parser."""
    g = sub.add_parser("generate", help="generate option-aligned injections (MedMisBench's pipeline); "
                       "`generate pages`: poisoned pages for Type 1 cases",
                       epilog=PAGES_EPILOG)
    g.add_argument("source", nargs="?", default=None,
                   help="source question bank (file or folder; one named `pages`: write ./pages)")
    g.add_argument("--generator", required=True, metavar="SPEC",
                   help="generator model: google/<id>, openai/<id>, mock/generator")
    g.add_argument("--out", required=True, metavar="FILE.jsonl", help="released-schema rows (resumable)")
    g.add_argument("--source-format", choices=FORMATS, default="auto",
                   help="format of SOURCE (default: detected from the file or folder)")
    g.add_argument("--from-release", default=None, metavar="FILE",
                   help="regenerate a release's sentences holding item, target, content, provenance")
    g.add_argument("--provenance-cycle", choices=["forward", "reverse"], default=None,
                   help="with --from-release: neutral->patient->authority->neutral, or the reverse")
    g.add_argument("--stratified", type=int, default=None, metavar="N",
                   help="with --from-release: a seeded subset stratified by subset x content x provenance")
    g.add_argument("--subset", default=None, help="keep one subset of the source or release")
    g.add_argument("--stages", choices=["two", "one"], default="two",
                   help="two: the paper's filter then generation (default); one: the reference's merged call")
    g.add_argument("--seed", type=int, default=0, help="seed of provenance draws and --stratified (default 0)")
    g.add_argument("--limit", type=int, default=None, help="the first N items only")
    g.add_argument("--max-connections", type=int, default=8, help="generator calls in flight (default 8)")
    g.add_argument("--cache", choices=["live", "record", "replay", "refresh"], default="live",
                   help="record/replay store for generator calls (default: live)")
    g.add_argument("--cache-dir", default=None, help="record/replay store (default: FILE.cache next to --out)")
    g.add_argument("--budget-usd", type=float, default=None, help="stop scheduling items past this spend")
    g.add_argument("--price", default=None, metavar="IN,OUT", help="generator price, USD per million tokens")
    g.add_argument("--model-base-url", default=None, metavar="URL",
                   help="base URL of the generator's API (gateway, proxy or local server)")
    add_request_flags(g)
    g.add_argument("--decoding", choices=["paper", "reference"], default="reference",
                   help="generator settings: reference (InjectionGeneration.ipynb: generation at 1.0; "
                        "default) or paper (temperature 0, App. C.1); extraction is always at 0")
    g.add_argument("--temperature", type=float, default=None,
                   help="generation temperature (default: the --decoding preset's)")
    g.add_argument("--dry-run", action="store_true", help="print calls, tokens and cost; call nothing")
    g.add_argument("--attack", choices=["static", "adaptive"], default="static",
                   help="static: write without knowing the defense (default); adaptive: with --from-release, "
                        "rewrite the false sentences against the --against defenders' own instructions")
    g.add_argument("--against", default=None, metavar="DEFENDER[,DEFENDER]",
                   help="with --attack adaptive: the defenders whose prompt texts the attacker reads")
    g.add_argument("--defender-option", action="append", default=[], metavar="NAME.KEY=VALUE",
                   help="with --against: an option of that defender, as on `medmis run` (e.g. warning.warning=...)")
    add_plugin_flag(g)

    c = sub.add_parser("compare", help="paired sensitivity table between two runs on two item versions")
    c.add_argument("run_a", help="run folder on the original items")
    c.add_argument("run_b", help="run folder on the regenerated items")
    c.add_argument("--out", default=None, metavar="DIR", help="also write compare.md, compare.csv, compare.png")
    c.add_argument("--seed", type=int, default=0, help="seed of the paired bootstrap (default 0)")


def generation_temperature(decoding: str, given: float | None) -> float:
    """The generation temperature: the one given, else the preset's (``reference``: 1.0, as
    InjectionGeneration.ipynb cell 2 generates; ``paper``: 0, App. C.1's setting)."""
    if given is not None:
        return given
    return 1.0 if decoding == "reference" else 0.0


def run_generate(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Handle ``medmis generate`` (and ``medmis generate pages``, parsed by :func:`parse_pages`)."""
    if getattr(args, "generate_command", None) == "pages":
        from ._pages_cli import run_pages

        return run_pages(args, argv)
    if getattr(args, "generate_command", None) == "rubrics":
        from ._rubrics_cli import run_rubrics

        return run_rubrics(args, argv)
    from ._finish import parse_price
    from ._run import GenerateConfig, build_jobs, estimate, generate

    if args.from_release and args.source:
        raise CliError("give SOURCE or --from-release, not both")
    if args.source == "pages" and not Path("pages").exists():
        raise CliError("no source named pages here; the page command is `medmis generate pages ...` "
                       "(the word right after generate)")
    if args.source_format == "release" and args.source and not args.from_release:
        args.from_release, args.source = args.source, None
    against = _attack_args(args)
    try:
        cfg = GenerateConfig(
            out=Path(args.out), generator=args.generator,
            source=Path(args.source) if args.source else None, source_format=args.source_format,
            from_release=Path(args.from_release) if args.from_release else None,
            provenance_cycle=args.provenance_cycle, stratified=args.stratified, subset=args.subset,
            stages=args.stages, seed=args.seed, limit=args.limit, max_connections=args.max_connections,
            cache=args.cache, cache_dir=Path(args.cache_dir) if args.cache_dir else None,
            budget_usd=args.budget_usd, price=parse_price(args.price), base_url=args.model_base_url,
            **request_options(args), max_retries=args.max_retries, decoding=args.decoding, temperature=generation_temperature(args.decoding, args.temperature),
            argv=["medmis", *argv], attack=args.attack, against=against,
            against_options=parse_kv(args.defender_option, "--defender-option"),
        )
        if args.dry_run:
            jobs, mode = build_jobs(cfg)
            print(json.dumps({"mode": mode, "stages": cfg.stages, **estimate(jobs, cfg)}, indent=2))
            return 0
        return generate(cfg)
    except ValueError as exc:
        if type(exc).__name__ == "DataError":
            raise
        raise CliError(str(exc)) from None


def _attack_args(args: argparse.Namespace) -> tuple[str, ...]:
    if args.against is not None and not args.against.strip(" ,"):
        raise CliError("--against needs DEFENDER[,DEFENDER]")
    if args.plugin:
        from medmis.defenses import load_plugins

        load_plugins(args.plugin)
    return tuple(n.strip() for n in (args.against or "").split(",") if n.strip())


def run_compare(args: argparse.Namespace) -> int:
    """Handle ``medmis compare``."""
    from ._compare import compare_command

    return compare_command(args.run_a, args.run_b, out=args.out, seed=args.seed)
