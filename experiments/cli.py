"""The ``medmis`` command line (contracts in DESIGN.md: keep flags stable).

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

from medmis.experiments._errors import CliError

EXIT_CONFIG = 2

__all__ = ["EXIT_CONFIG", "CliError", "build_parser", "main"]


def _add_cache_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cache", choices=["live", "record", "replay", "refresh"], default="live",
                   help="record/replay store for model calls and web fetches (default: live)")
    p.add_argument("--cache-dir", default=None, help="store folder (default: OUT/cache, or .medmis-cache for tools)")
    p.add_argument("--search", choices=["tavily", "serper", "local"], default="local",
                   help="search backend: tavily (needs TAVILY_API_KEY), serper (the paper's; needs "
                        "SERPER_API_KEY) or local BM25 corpus (default)")
    p.add_argument("--visit", choices=["direct", "jina"], default="direct",
                   help="page reader: direct fetch + trafilatura (default) or jina (Jina Reader, the "
                        "paper's; needs JINA_API_KEY)")
    p.add_argument("--corpus-dir", default=None, help="folder of documents for --search local (default: fixtures/corpus)")
    p.add_argument("--allow-host", action="append", default=[], metavar="HOST[:PORT]",
                   help="let visit_web reach this host even if it resolves to a private address")
    p.add_argument("--blocklist", default=None, metavar="FILE",
                   help="extra contamination patterns (one per line) added to the default blocklist")


def _add_hub_repo_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hub-repo", default=None, metavar="OWNER/NAME",
                   help="hub repository for hub: addresses (default AI4HealthResearch/MedMisBench; "
                        "the release is also at HongjianZhou/MedMisBench)")


def _parse_kv(pairs: Sequence[str], flag: str) -> dict[str, dict[str, Any]]:
    """``NAME.KEY=VALUE`` pairs into {name: {key: value}}; values parsed as JSON when they can be."""
    out: dict[str, dict[str, Any]] = {}
    for pair in pairs:
        head, sep, raw = pair.partition("=")
        name, dot, key = head.partition(".")
        if not sep or not dot or not key:
            raise CliError(f"{flag} expects NAME.KEY=VALUE, got {pair!r}")
        try:
            value: Any = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        out.setdefault(name, {})[key] = value
    return out


def _parse_flat(pairs: Sequence[str], flag: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise CliError(f"{flag} expects KEY=VALUE, got {pair!r}")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="medmis",
        description="MedMis mitigation toolkit: paired clean / Type 1 / Type 2 evaluation of defenders.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run models x defenders x protocols on a dataset (resumable)")
    run.add_argument("--data", required=True, help="JSONL/CSV/Parquet file, folder, hub:SUBSET or hub:all")
    run.add_argument("--subset", default=None)
    run.add_argument("--limit", type=int, default=None)
    _add_hub_repo_flag(run)
    run.add_argument("--on-invalid", choices=["fail", "skip"], default="fail",
                     help="invalid data rows: fail (exit 2, default) or skip them and run the rest "
                          "(the list is written to OUT/invalid_rows.txt)")
    run.add_argument("--model", required=True, action="append",
                     help="google/<id>, openai/<id> or mock/<name>; repeat or comma-separate for several")
    run.add_argument("--model-base-url", default=None)
    run.add_argument("--temperature", type=float, default=0.0)
    run.add_argument("--max-output-tokens", type=int, default=None)
    run.add_argument("--thinking-level", choices=["minimal", "low", "medium", "high"], default=None)
    run.add_argument("--reasoning-effort", choices=["minimal", "low", "medium", "high"], default=None)
    run.add_argument("--model-timeout", type=float, default=120.0, help="seconds per model request")
    run.add_argument("--model-option", action="append", default=[], metavar="KEY=VALUE",
                     help="provider-specific option (e.g. mock/examinee: fault_rate=0.1, latency_s=0.05)")
    run.add_argument("--defender", required=True, help="NAME[,NAME...] (see `medmis defenders`)")
    run.add_argument("--defender-option", action="append", default=[], metavar="NAME.KEY=VALUE",
                     help="set a defender option (value parsed as JSON when possible)")
    run.add_argument("--protocol", default="clean,type1,type2")
    run.add_argument("--type1-targets", choices=["sampled", "all"], default="sampled")
    run.add_argument("--shuffle-type2", action="store_true", help="seeded shuffle of type2 sentence order")
    run.add_argument("--prompt", choices=["paper", "toolkit"], default="paper",
                     help="prompt preset: paper (the reference evaluation's wording and JSON "
                          "answer; default) or toolkit (board-exam prompt, 'Final answer: X')")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--out", required=True)
    run.add_argument("--max-connections", type=int, default=8)
    run.add_argument("--max-retries", type=int, default=4)
    run.add_argument("--retry-errors", action="store_true", help="re-run only the keys whose record is an error")
    run.add_argument("--no-progress", action="store_true")
    _add_cache_flags(run)

    rep = sub.add_parser("report", help="(re)write DIR/metrics.json, metrics.csv, report.md (and plots/HTML)")
    rep.add_argument("dir")
    rep.add_argument("--baseline", default="none")
    rep.add_argument("--seed", type=int, default=0, help="seed of the paired bootstrap")

    abl = sub.add_parser("ablate", help="run an ablation grid from a TOML config")
    abl.add_argument("config")
    abl.add_argument("--out", default=None)
    abl.add_argument("--dry-run", action="store_true")
    abl.add_argument("--data", default=None, help="override the config's data (file, folder or hub:SUBSET)")
    abl.add_argument("--limit", type=int, default=None, help="override the config's item limit")
    abl.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                     help="override a config key (dotted, e.g. model_options.temperature=0.2; "
                          "value read as TOML, else as a string); repeatable")
    abl.add_argument("--no-progress", action="store_true")

    data = sub.add_parser("data", help="dataset utilities")
    dsub = data.add_subparsers(dest="data_command", required=True)
    val = dsub.add_parser("validate", help="validate a data file; exit 0 when valid")
    val.add_argument("path")
    val.add_argument("--subset", default=None)
    _add_hub_repo_flag(val)

    sub.add_parser("defenders", help="list registered defenders with their options")

    tools = sub.add_parser("tools", help="debug the web tools")
    tsub = tools.add_subparsers(dest="tools_command", required=True)
    ts = tsub.add_parser("search")
    ts.add_argument("query")
    ts.add_argument("--max-results", type=int, default=5)
    _add_cache_flags(ts)
    tv = tsub.add_parser("visit")
    tv.add_argument("url")
    tv.add_argument("--goal", default=None)
    tv.add_argument("--max-chars", type=int, default=6000)
    _add_cache_flags(tv)

    cache = sub.add_parser("cache", help="inspect and move the record/replay store")
    csub = cache.add_subparsers(dest="cache_command", required=True)
    cs = csub.add_parser("stats")
    cs.add_argument("--cache-dir", required=True)
    ce = csub.add_parser("export")
    ce.add_argument("--cache-dir", required=True)
    ce.add_argument("path")
    ce.add_argument("--kind", action="append", default=None, help="model, search or visit (repeatable)")
    ci = csub.add_parser("import")
    ci.add_argument("--cache-dir", required=True)
    ci.add_argument("path")
    cp = csub.add_parser("prune")
    cp.add_argument("--cache-dir", required=True)
    cp.add_argument("--older-than-days", type=float, default=None)
    cp.add_argument("--kind", default=None)
    from medmis.experiments.view import add_parser as add_view_parser

    add_view_parser(sub)
    return parser


def _split(values: Sequence[str]) -> list[str]:
    return [v.strip() for value in values for v in value.split(",") if v.strip()]


def _cmd_run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from medmis.agents._registry import ModelOptions
    from medmis.experiments.harness._runner import DefenderConfig, RunConfig, run_experiment

    protocols = _split([args.protocol])
    bad = [p for p in protocols if p not in ("clean", "type1", "type2")]
    if bad:
        raise CliError(f"unknown protocol(s): {', '.join(bad)} (use clean,type1,type2)")
    options = _parse_kv(args.defender_option, "--defender-option")
    names = _split([args.defender])
    unknown = set(options) - set(names)
    if unknown:
        raise CliError(f"--defender-option names defender(s) not being run: {', '.join(sorted(unknown))}")
    config = RunConfig(
        data=args.data,
        subset=args.subset,
        limit=args.limit,
        hub_repo=args.hub_repo,
        on_invalid=args.on_invalid,
        models=_split(args.model),
        model_options=ModelOptions(
            temperature=args.temperature,
            max_output_tokens=args.max_output_tokens,
            base_url=args.model_base_url,
            thinking_level=args.thinking_level,
            reasoning_effort=args.reasoning_effort,
            timeout_s=args.model_timeout,
            seed=args.seed,
            extra=_parse_flat(args.model_option, "--model-option"),
        ),
        defenders=[DefenderConfig(name=n, options=options.get(n, {})) for n in names],
        protocols=protocols,  # type: ignore[arg-type]
        type1_targets=args.type1_targets,
        shuffle_type2=args.shuffle_type2,
        prompt=args.prompt,
        seed=args.seed,
        out=args.out,
        max_connections=args.max_connections,
        max_retries=args.max_retries,
        cache=args.cache,
        cache_dir=args.cache_dir,
        search=args.search,
        visit=args.visit,
        corpus_dir=args.corpus_dir,
        allow_hosts=args.allow_host,
        blocklist=args.blocklist,
        retry_errors=args.retry_errors,
        progress=not args.no_progress,
    )
    from medmis.experiments.benchmark._dataset import DataError

    try:
        result = asyncio.run(run_experiment(config, argv=["medmis", *argv], notice=_notice))
    except DataError as exc:
        if not exc.issues:
            raise
        raise CliError(f"{exc.summary()}; `medmis data validate` lists them all, "
                       "--on-invalid skip runs the valid rows") from None
    print(f"{result.new_records} new records, {result.records} in total -> {result.out / 'records.jsonl'}")
    if result.stats.stopped_reason:
        print(f"stopped early: {result.stats.stopped_reason}")
    if result.report:
        print(f"report: {result.report.get('report.md', result.out / 'report.md')}")
    return 0


def _notice(message: str) -> None:
    print(f"medmis: {message}", file=sys.stderr)


def _cmd_report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from medmis.experiments.reporting._report import write_report

    run_dir = Path(args.dir)
    if not (run_dir / "records.jsonl").exists():
        raise CliError(f"{run_dir}: no records.jsonl here")
    paths = write_report(run_dir, baseline=args.baseline, seed=args.seed)
    for name, path in paths.items():
        print(f"{name}: {path}")
    return 0


def _cmd_defenders() -> int:
    from medmis.defenses import list_defenders

    for spec in list_defenders():
        tags = [t for t, on in (("uses web tools", spec.uses_tools), ("control", spec.control)) if on]
        print(spec.name + (f"  [{', '.join(tags)}]" if tags else ""))
        if spec.description:
            print(f"    {spec.description}")
        for fname, finfo in spec.options.model_fields.items():
            ann = getattr(finfo.annotation, "__name__", None) or str(finfo.annotation).replace("typing.", "")
            default = finfo.default
            shown = repr(default)
            if len(shown) > 60:
                shown = shown[:57] + "...'"
            print(f"    --defender-option {spec.name}.{fname}=<{ann}>  (default {shown})")
    return 0


def _tool_flags(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "search": args.search,
        "visit": args.visit,
        "cache_mode": args.cache,
        "cache_dir": args.cache_dir or ".medmis-cache",
        "allow_hosts": tuple(args.allow_host),
        "corpus_dir": args.corpus_dir,
        "blocklist": args.blocklist,
    }


def _cmd_tools(args: argparse.Namespace) -> int:
    from medmis.tools._cli import tools_search, tools_visit

    if args.tools_command == "search":
        text = asyncio.run(tools_search(args.query, max_results=args.max_results, **_tool_flags(args)))
    else:
        text = asyncio.run(tools_visit(args.url, goal=args.goal, max_chars=args.max_chars, **_tool_flags(args)))
    print(text)
    # the JSON shows what a model would be told; the exit status tells scripts it failed
    return 1 if "error" in json.loads(text) else 0


def _cmd_cache(args: argparse.Namespace) -> int:
    from medmis.tools import _cassette

    if args.cache_command == "stats":
        print(json.dumps(_cassette.cache_stats(args.cache_dir), indent=2))
    elif args.cache_command == "export":
        n = _cassette.cache_export(args.cache_dir, args.path, args.kind)
        print(f"exported {n} entries to {args.path}")
    elif args.cache_command == "import":
        n = _cassette.cache_import(args.cache_dir, args.path)
        print(f"imported {n} entries into {args.cache_dir}")
    else:
        n = _cassette.cache_prune(args.cache_dir, args.older_than_days, args.kind)
        print(f"pruned {n} entries")
    return 0


def _cmd_ablate(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from medmis.experiments.ablation._ablate import ablate_command

    overrides = list(args.overrides)
    if args.data is not None:
        overrides.append(f"data={json.dumps(args.data)}")
    if args.limit is not None:
        overrides.append(f"limit={args.limit}")
    return ablate_command(args.config, out=args.out, dry_run=args.dry_run,
                          progress=not args.no_progress, argv=["medmis", *argv],
                          overrides=overrides)


def _dispatch(args: argparse.Namespace, argv: Sequence[str]) -> int:
    if args.command == "run":
        return _cmd_run(args, argv)
    if args.command == "report":
        return _cmd_report(args)
    if args.command == "ablate":
        return _cmd_ablate(args, argv)
    if args.command == "data":
        from medmis.experiments.benchmark._data import validate_command

        return validate_command(args.path, subset=args.subset, hub_repo=args.hub_repo)
    if args.command == "defenders":
        return _cmd_defenders()
    if args.command == "tools":
        return _cmd_tools(args)
    if args.command == "view":
        from medmis.experiments.view import run as run_view

        return run_view(args)
    return _cmd_cache(args)


def _config_errors() -> tuple[type[BaseException], ...]:
    from medmis.agents._errors import MissingKeyError
    from medmis.defenses._base import DefenderConfigError
    from medmis.experiments.harness._runner import RunSetupError

    errors: list[type[BaseException]] = [
        CliError, MissingKeyError, DefenderConfigError, RunSetupError, FileNotFoundError,
    ]
    try:
        from medmis.experiments.benchmark._data import DataError

        errors.append(DataError)
    except ImportError:  # pragma: no cover - data module always present in a release
        pass
    return tuple(errors)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    try:
        return _dispatch(args, argv)
    except _config_errors() as exc:
        # a data error is one line too: the first problems and their count (the full list is
        # what `medmis data validate` or --on-invalid skip's invalid_rows.txt is for)
        from medmis.experiments.benchmark._dataset import DataError

        text = [exc.summary()] if isinstance(exc, DataError) else str(exc).strip().splitlines()
        first = text[0] if text else type(exc).__name__
        print(f"medmis: {first}", file=sys.stderr)
        for line in text[1:50]:
            print(f"  {line}", file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        print("medmis: interrupted; re-run the same command to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
