"""The ``medmis`` command line (contracts in docs/contracts.md and docs/cli.md: keep flags stable).

Heavy modules are imported inside each sub-command so that ``medmis --help`` stays fast.
Configuration errors (a missing API key, an unknown defender, a bad data file) print one
clear line to stderr and exit with status 2; no traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from typing import Any

from medmis.experiments._argtypes import (
    EXIT_EPILOG,
    OneLineParser,
    accept_change_fields,
    comma_choices,
    int_at_least,
)
from medmis.experiments._cli_flags import (
    add_cache_flags,
    add_decoding_flags,
    add_hub_repo_flag,
    add_plugin_flag,
    add_request_flags,
    add_scale_flags,
    add_shard_flags,
    base_url_list,
    decoding_options,
    parse_defenders,
    parse_flat,
    parse_kv,
    parse_prices,
    poison_value,
    request_options,
    seconds_above_zero,
    split,
    thinking_budget,
)
from medmis.experiments._errors import CliError, error_lines
from medmis.tools import sigterm_as_interrupt

EXIT_CONFIG = 2

__all__ = ["EXIT_CONFIG", "CliError", "build_parser", "console", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="medmis",
        description="MedMis mitigation toolkit: paired clean / Type 1 / Type 2 evaluation of defenders.",
        epilog=EXIT_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from medmis.experiments._version import VersionAction

    parser.add_argument("--version", action=VersionAction)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run models x defenders x protocols on a dataset (resumable)",
                         epilog=EXIT_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("--data", required=True, help="JSONL/CSV/Parquet file, folder, hub:SUBSET or hub:all")
    run.add_argument("--subset", default=None,
                     help="keep one subset: MEDMISQA, MEDMISMCQA, MEDMISXPERTQA, MEDMISJOURNEY, "
                          "MEDMISHLE (or a custom data set's own name)")
    run.add_argument("--limit", type=int_at_least(1), default=None, help="run the first N items only")
    add_hub_repo_flag(run)
    run.add_argument("--on-invalid", choices=["fail", "skip"], default="fail",
                     help="invalid data rows: fail (exit 2, default) or skip them and run the rest "
                          "(the list is written to OUT/invalid_rows.txt)")
    run.add_argument("--model", required=True, action="append",
                     help="google/<id>, openai/<id>, anthropic/<id>, langchain:<provider>:<model> or "
                          "mock/<name>; repeat or comma-separate for several")
    run.add_argument("--model-base-url", action="append", default=None, metavar="URL|@FILE",
                     help="base URL of the provider's API (gateway, proxy or local server); repeat "
                          "it, or give @FILE (one URL a line), to spread calls over replicas")
    add_decoding_flags(run)
    run.add_argument("--thinking-level", choices=["minimal", "low", "medium", "high"], default=None,
                     help="Gemini thinking level (google/ models; default: the provider's)")
    run.add_argument("--reasoning-effort", default=None,
                     choices=["none", "minimal", "low", "medium", "high", "xhigh", "max"],
                     help="OpenAI reasoning_effort (none..xhigh) or Claude effort (low..max)")
    run.add_argument("--thinking-budget", type=thinking_budget, default=None,
                     metavar="TOKENS|adaptive", help="Claude extended thinking: a token budget (>=1024; 0 = off) or 'adaptive'")
    add_request_flags(run)
    run.add_argument("--model-option", action="append", default=[], metavar="KEY=VALUE",
                     help="provider-specific option (e.g. mock/examinee: fault_rate=0.1, latency_s=0.05)")
    run.add_argument("--defender", required=True, action="append",
                     help="NAME[,NAME...] (see `medmis defenders`); NAME[KEY=VALUE,...] sets options for that "
                          "entry; repeat the flag to add more")
    run.add_argument("--defender-option", action="append", default=[], metavar="NAME.KEY=VALUE",
                     help="set a defender option (value parsed as JSON when possible)")
    run.add_argument("--protocol", default="clean,type1,type2", type=comma_choices(("clean", "type1", "type2")),
                     metavar="{clean,type1,type2}[,...]",
                     help="delivery protocols, comma-separated (default: clean,type1,type2)")
    run.add_argument("--type1-targets", choices=["sampled", "all"], default="sampled",
                     help="type1 wrong options per item: sampled (one, seeded; default) or all")
    run.add_argument("--shuffle-type2", action="store_true", help="seeded shuffle of type2 sentence order")
    run.add_argument("--answer-format", choices=["mcq", "open"], default="mcq",
                     help="mcq (options shown, one chosen; default) or open (the question without its "
                          "options, a free-text answer recorded ungraded: grade it with `medmis grade`)")
    run.add_argument("--prompt", choices=["paper", "toolkit"], default="paper",
                     help="prompt preset: paper (the reference evaluation's wording and JSON "
                          "answer; default) or toolkit (board-exam prompt, 'Final answer: X')")
    run.add_argument("--seed", type=int, default=0, help="seed of target sampling and shuffles (default 0)")
    run.add_argument("--epochs", type=int_at_least(1), default=1, metavar="E",
                     help="answer every case E times at the model's temperature; metrics pool the "
                          "epochs, intervals cluster on items (default 1; docs/epochs.md)")
    run.add_argument("--poison", type=poison_value, default=None, metavar="share=S[,rank=top|spread][,styles=a+b][,pages=FILE]",
                     help="a poisoned web: SHARE of every Type 1 case's search results are that case's "
                          "poisoned pages (top slots or spread; pages: fixtures/poison/sample_pages.jsonl)")
    run.add_argument("--out", required=True,
                     help="run folder; one run per folder (re-running the same command resumes it)")
    run.add_argument("--accept-change", action="append", default=[], metavar="FIELD[,FIELD]",
                     help="resume into an --out that holds a run with other settings, accepting "
                          "these differing fields (named by the refusal; recorded in manifest.json)")
    run.add_argument("--max-connections", type=int_at_least(1), default=8,
                     help="ceiling on concurrent cases and model calls; halved on 429s, regrown (default 8)")
    run.add_argument("--retry-errors", action="store_true", help="re-run only the keys whose record is an error")
    run.add_argument("--case-timeout", type=seconds_above_zero, default=None, metavar="S",
                     help="seconds a defender has to answer one case; past it the case is recorded "
                          "as an error and the run goes on (default 1800: 30 minutes)")
    run.add_argument("--price", action="append", default=[], metavar="MODEL=IN,OUT",
                     help="USD per million input and output tokens for MODEL (repeatable); the "
                          "report then shows dollar cost per case and per 1,000 cases")
    run.add_argument("--max-usd", type=float, default=None, metavar="USD",
                     help="stop (exit 3, resumable) once the tokens of this invocation cost USD "
                          "(needs --price for every model)")
    run.add_argument("--max-calls", type=int_at_least(1), default=None, metavar="N",
                     help="stop (exit 3, resumable) once this invocation's cases made N model calls")
    run.add_argument("--no-progress", action="store_true", help="no progress bar or progress lines")
    add_cache_flags(run)
    add_scale_flags(run)
    add_shard_flags(run)
    add_plugin_flag(run)

    rep = sub.add_parser("report", help="(re)write DIR/metrics.json, metrics.csv, report.md (and plots/HTML)")
    rep.add_argument("dir", help="run folder (holds records.jsonl)")
    rep.add_argument("--baseline", default=None, metavar="DEFENDER",
                     help="defender label the others are compared against (one of the run's "
                          "defenders; default: none when the run has it)")
    rep.add_argument("--seed", type=int, default=0, help="seed of the paired bootstrap")
    rep.add_argument("--paper-tables", action="store_true", help="also DIR/paper_tables.csv and .md")
    rep.add_argument("--mcq-run", default=None, metavar="MCQ_DIR",
                     help="for a graded open-ended run: the multiple-choice run of the same items, shown "
                          "beside it (same models, items and defenders; docs/grading.md)")

    from medmis.experiments.grading import add_parser as add_grade_parser

    add_grade_parser(sub)

    abl = sub.add_parser("ablate", help="run an ablation grid from a TOML config")
    abl.add_argument("config", help="ablation config (TOML), e.g. experiments/configs/demo.toml")
    abl.add_argument("--out", default=None, help="run folder (default: the config's out, else runs/ablation)")
    abl.add_argument("--dry-run", action="store_true",
                     help="print cases, expected calls, tokens and cost per cell; run nothing")
    abl.add_argument("--data", default=None, help="override the config's data (file, folder or hub:SUBSET)")
    abl.add_argument("--limit", type=int_at_least(1), default=None, help="override the config's item limit")
    abl.add_argument("--epochs", type=int_at_least(1), default=None, metavar="E",
                     help="override the config's epochs (every case answered E times)")
    abl.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                     help="override a config key (dotted, e.g. model_options.temperature=0.2; "
                          "value read as TOML, else as a string); repeatable")
    abl.add_argument("--accept-change", action="append", default=[], metavar="FIELD[,FIELD]",
                     help="as for `medmis run`: resume into an --out holding a run with other settings")
    abl.add_argument("--no-progress", action="store_true", help="no progress bar or progress lines")
    abl.add_argument("--retry-errors", action="store_true", help="as for `medmis run`, in every run of the grid")
    add_shard_flags(abl)
    abl.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                     help="run the grid's shards as Ray tasks and merge them into --out (needs "
                          "`pip install 'medmis[ray]'`); ADDRESS: a cluster (ray://HOST:10001 or HOST:6379), "
                          "none: a local Ray instance (docs/clusters.md)")
    abl.add_argument("--shards", type=int_at_least(1), default=None, metavar="N",
                     help="with --ray: how many shards (default: an earlier --ray run's, else the cluster's "
                          "CPU count, at least 2)")
    add_plugin_flag(abl)

    mrg = sub.add_parser("merge", help="join the shard folders of one run (or ablation grid) into one folder",
                         epilog=EXIT_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    mrg.add_argument("shards", nargs="+", metavar="SHARD_DIR",
                     help="every shard's folder (its --out), shards 0..N-1 once each, in any order")
    mrg.add_argument("--out", required=True, help="the merged run folder (new, or an empty folder)")
    mrg.add_argument("--config", default=None, metavar="CONFIG.toml",
                     help="for the grid folders of `medmis ablate --shard`: the config, for its baseline and "
                          "[verdict] settings (default: the report's defaults)")

    from medmis.experiments._data_cli import add_data_parsers

    add_data_parsers(sub)

    from medmis.experiments.review import add_parser as add_review_parser

    add_review_parser(sub)

    add_plugin_flag(sub.add_parser("defenders", help="list registered defenders with their options"))

    from medmis.experiments.generate import add_parsers as _add_generate_parsers

    _add_generate_parsers(sub)

    tools = sub.add_parser("tools", help="debug the web tools")
    tsub = tools.add_subparsers(dest="tools_command", required=True)
    ts = tsub.add_parser("search", help="run one search and print the JSON a model would get")
    ts.add_argument("query", help="search query")
    ts.add_argument("--max-results", type=int_at_least(1), default=5, help="results to return (default 5)")
    add_cache_flags(ts)
    tv = tsub.add_parser("visit", help="fetch one page and print the JSON a model would get")
    tv.add_argument("url", help="page to fetch (after the URL safety checks)")
    tv.add_argument("--goal", default=None, help="what to look for: focuses the extracted text")
    tv.add_argument("--max-chars", type=int_at_least(1), default=6000,
                    help="clip the page text to this many characters (default 6000)")
    add_cache_flags(tv, search=False)

    from medmis.tools import add_cache_parser

    add_cache_parser(sub)
    from medmis.experiments.view import add_parser as add_view_parser

    add_view_parser(sub)
    from medmis.experiments.export import add_export_parser

    add_export_parser(sub)
    return parser



def _cmd_run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from medmis.experiments.harness import RunInterrupted

    try:
        return _run_command(args, argv)
    except RunInterrupted as exc:
        from medmis.experiments.reporting import report_interrupted, write_report

        # Ctrl-C or SIGTERM stopped the run: its report at once, marked incomplete
        report_interrupted(write_report, exc.out, _notice)
        raise


def _run_command(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from medmis.agents import ModelOptions
    from medmis.experiments.harness import DefenderConfig, RunConfig, run_experiment

    protocols = split([args.protocol])
    bad = [p for p in protocols if p not in ("clean", "type1", "type2")]
    if bad:
        raise CliError(f"unknown protocol(s): {', '.join(bad)} (use clean,type1,type2)")
    options = parse_kv(args.defender_option, "--defender-option")
    entries = [entry for value in args.defender for entry in parse_defenders(value)]
    names = [n for n, _ in entries]
    unknown = set(options) - set(names)
    if unknown:
        raise CliError(f"--defender-option names defender(s) not being run: {', '.join(sorted(unknown))}")
    config = RunConfig(
        data=args.data,
        subset=args.subset,
        limit=args.limit,
        hub_repo=args.hub_repo,
        on_invalid=args.on_invalid,
        models=split(args.model),
        model_options=ModelOptions(
            base_urls=tuple(base_url_list(args.model_base_url)),
            **request_options(args),
            extra=parse_flat(args.model_option, "--model-option"),
            **decoding_options(args),  # only the values given: the preset decides the rest
        ),
        defenders=[DefenderConfig(name=n, options={**options.get(n, {}), **inline}) for n, inline in entries],
        plugins=args.plugin,
        protocols=protocols,  # type: ignore[arg-type]
        type1_targets=args.type1_targets,
        shuffle_type2=args.shuffle_type2,
        prompt=args.prompt,
        answer_format=args.answer_format,
        seed=args.seed,
        epochs=args.epochs,
        out=args.out,
        max_connections=args.max_connections,
        max_retries=args.max_retries,
        **({"case_timeout_s": args.case_timeout} if args.case_timeout is not None else {}),
        cache=args.cache,
        cache_dir=args.cache_dir,
        search=args.search,
        visit=args.visit,
        corpus_dir=args.corpus_dir,
        search_ambient=args.search_ambient,
        allow_hosts=args.allow_host,
        blocklist=args.blocklist,
        poison=args.poison,
        retry_errors=args.retry_errors,
        prices=parse_prices(args.price),
        batch=args.batch,
        batch_poll_s=args.batch_poll,
        batch_discount=args.batch_discount,
        progress=not args.no_progress,
        accept_changes=accept_change_fields(args.accept_change),
        shard=args.shard,
        max_rps=args.max_rps,
        max_tpm=args.max_tpm,
    )
    from medmis.experiments.benchmark import DataError

    if args.batch_cancel and not args.batch:
        raise CliError("--batch-cancel goes with --batch (and the run's other flags)")
    extra: dict[str, Any] = {"batch_cancel": True} if args.batch_cancel else {}
    if args.max_usd is not None or args.max_calls is not None:
        from medmis.experiments.harness import budget_stop

        if args.batch:
            raise CliError("--max-usd / --max-calls do not apply to --batch (its jobs are submitted at once)")
        extra["stop_when"] = budget_stop(max_usd=args.max_usd, max_calls=args.max_calls,
                                         models=config.models, prices=config.prices)
    try:
        result = asyncio.run(run_experiment(config, argv=["medmis", *argv], notice=_notice, **extra))
    except DataError as exc:
        if not exc.issues:
            raise
        raise CliError(f"{exc.summary()}; `medmis data validate` lists them all, "
                       "--on-invalid skip runs the valid rows") from None
    from medmis.experiments.reporting import finish_run

    outcome = finish_run(result, report=config.write_report)
    if result.nothing_to_do:
        print(f"nothing to do: {result.records} records complete in {result.out}")
    else:
        print(f"{result.new_records} new records, {result.records} in total -> {result.out / 'records.jsonl'}")
    if result.report:
        print(f"report: {result.report.get('report.md', result.out / 'report.md')}")
    if outcome.message:
        _notice(outcome.message)
    return int(outcome.code)


def _notice(message: str) -> None:
    print(f"medmis: {message}", file=sys.stderr)


def _cmd_report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from medmis.experiments._defenders_cmd import load_run_plugins
    from medmis.experiments.reporting import write_report

    run_dir = Path(args.dir)
    if not (run_dir / "records.jsonl").exists():
        raise CliError(f"{run_dir}: no records.jsonl here")
    from medmis.experiments.harness import check_baseline

    baseline = check_baseline(run_dir / "records.jsonl", args.baseline)
    load_run_plugins(run_dir, _notice)
    paths = write_report(run_dir, baseline=baseline, seed=args.seed, notice=_notice,
                         paper_tables=args.paper_tables,
                         mcq_run=Path(args.mcq_run) if args.mcq_run else None)
    for name, path in paths.items():
        print(f"{name}: {path}")
    return 0


def _cmd_defenders(plugins: Sequence[str]) -> int:
    from medmis.experiments._defenders_cmd import run

    return run(plugins)


def _tool_flags(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "search": getattr(args, "search", "local"),  # `tools visit` has no search flags
        "visit": args.visit,
        "cache_mode": args.cache,
        "cache_dir": args.cache_dir or ".medmis-cache",
        "allow_hosts": tuple(args.allow_host),
        "corpus_dir": getattr(args, "corpus_dir", None),
        "ambient": getattr(args, "search_ambient", None),
        "blocklist": args.blocklist,
    }


def _cmd_tools(args: argparse.Namespace) -> int:
    from medmis.tools import tools_search, tools_visit

    if args.tools_command == "search":
        text = asyncio.run(tools_search(args.query, max_results=args.max_results, **_tool_flags(args)))
    else:
        text = asyncio.run(tools_visit(args.url, goal=args.goal, max_chars=args.max_chars, **_tool_flags(args)))
    print(text)
    # the JSON shows what a model would be told; the exit status tells scripts it failed
    return 1 if "error" in json.loads(text) else 0


def _cmd_cache(args: argparse.Namespace) -> int:
    from medmis.tools import one_line, run_cache

    return one_line(lambda: run_cache(args), CliError)


def _cmd_ablate(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from medmis.experiments.ablation import ablate_command

    overrides = list(args.overrides)
    if args.data is not None:
        overrides.append(f"data={json.dumps(args.data)}")
    overrides += [f"limit={args.limit}"] * (args.limit is not None) + ["retry_errors=true"] * args.retry_errors
    overrides += [f"epochs={args.epochs}"] * (args.epochs is not None)
    if args.shard is not None:
        overrides.append(f"shard={{index={args.shard.index}, count={args.shard.count}}}")
    overrides += [f"{key}={value}" for key in ("max_rps", "max_tpm") if (value := getattr(args, key)) is not None]
    if args.shards is not None and args.ray is None:
        raise CliError("--shards N goes with --ray (to run one shard, give --shard K/N)")
    if args.ray is not None and not args.dry_run:
        from medmis.experiments.shards import ablate_on_ray

        return ablate_on_ray(args.config, address=args.ray or None, shards=args.shards, out=args.out,
                             overrides=overrides, accept_changes=accept_change_fields(args.accept_change),
                             plugins=args.plugin, argv=["medmis", *argv])
    return ablate_command(args.config, out=args.out, dry_run=args.dry_run,
                          progress=not args.no_progress, argv=["medmis", *argv],
                          overrides=overrides, accept_changes=accept_change_fields(args.accept_change),
                          plugins=args.plugin)


def _cmd_merge(args: argparse.Namespace) -> int:
    from pathlib import Path

    from medmis.experiments.shards import merge_command

    return merge_command([Path(d) for d in args.shards], Path(args.out), config=args.config, notice=_notice)


def _dispatch(args: argparse.Namespace, argv: Sequence[str]) -> int:
    if args.command == "run":
        return _cmd_run(args, argv)
    if args.command == "report":
        return _cmd_report(args)
    if args.command == "ablate":
        return _cmd_ablate(args, argv)
    if args.command == "merge":
        return _cmd_merge(args)
    if args.command == "data":
        from medmis.experiments._data_cli import run_data

        return run_data(args)
    if args.command == "defenders":
        return _cmd_defenders(args.plugin)
    if args.command in ("generate", "compare"):
        from medmis.experiments.generate import run_compare, run_generate

        return run_generate(args, argv) if args.command == "generate" else run_compare(args)
    if args.command == "tools":
        return _cmd_tools(args)
    if args.command == "grade":
        from medmis.experiments.grading import run_grade

        return run_grade(args)
    if args.command == "review":
        from medmis.experiments.review import run_review

        return run_review(args)
    if args.command == "export":
        from medmis.experiments.export import run_export

        return run_export(args)
    if args.command == "view":
        from medmis.experiments.view import run as run_view

        return run_view(args)
    return _cmd_cache(args)


def _config_errors() -> tuple[type[BaseException], ...]:
    # Every user error of every layer is a MedmisError (its exit_code: 2, or 3 for a write that
    # failed after records were written); an OSError is a file the user named.
    from medmis.tools import MedmisError

    return (MedmisError, OSError)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from medmis.experiments.generate import parse_pages

    args = parse_pages(argv) or build_parser().parse_args(argv)
    try:
        return _dispatch(args, argv)
    except _config_errors() as exc:
        text = error_lines(exc)
        first = text[0] if text else type(exc).__name__
        print(f"medmis: {first}", file=sys.stderr)
        for line in text[1:50]:
            print(f"  {line}", file=sys.stderr)
        return int(getattr(exc, "exit_code", EXIT_CONFIG))
    except KeyboardInterrupt:
        print("medmis: stopped early: interrupted; re-run the same command to resume", file=sys.stderr)
        return 3


def console() -> None:
    """The ``medmis`` command: :func:`main`, its code as the process's exit status."""
    sys.exit(sigterm_as_interrupt()(main)())  # SIGTERM as Ctrl-C (the command line's, not a library caller's)


if __name__ == "__main__":  # pragma: no cover
    console()
