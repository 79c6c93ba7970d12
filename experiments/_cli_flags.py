"""Flags and flag-value parsers shared by the ``medmis`` sub-commands."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from medmis.experiments._argtypes import int_at_least
from medmis.experiments._errors import CliError
from medmis.tools import UserFileError, json_value


def add_cache_flags(p: argparse.ArgumentParser, *, search: bool = True) -> None:
    p.add_argument("--cache", choices=["live", "record", "replay", "refresh"], default="live",
                   help="record/replay store for model calls and web fetches (default: live)")
    p.add_argument("--cache-dir", default=None, help="store folder (default: OUT/cache, or .medmis-cache for tools)")
    if search:
        add_search_flags(p)
    p.add_argument("--visit", choices=["direct", "jina"], default="direct",
                   help="page reader: direct fetch + trafilatura (default) or jina (Jina Reader, the "
                        "paper's; needs JINA_API_KEY)")
    p.add_argument("--allow-host", action="append", default=[], metavar="HOST[:PORT]",
                   help="let visit_web reach this host even if it resolves to a private address")
    p.add_argument("--blocklist", default=None, metavar="FILE",
                   help="extra contamination patterns (one per line) added to the default blocklist")


def poison_value(text: str) -> Any:
    """``--poison share=S[,rank=top|spread][,styles=a+b][,pages=FILE]`` -> ``PoisonSettings``
    (``pages`` defaults to the bundled sample's; a comma in a file name stays with it)."""
    from pydantic import ValidationError

    from medmis.tools import DEFAULT_PAGES, PoisonSettings

    fields: dict[str, Any] = {}
    last = ""
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep and last == "pages":
            fields["pages"] += "," + part
            continue
        key = key.strip()
        if not sep or key not in ("share", "rank", "styles", "pages") or key in fields:
            what = "repeats" if key in fields else "is not share=, rank=, styles= or pages="
            raise argparse.ArgumentTypeError(f"{part.strip()!r} {what} (expected share=S[,rank=top|spread]"
                                             "[,styles=a+b][,pages=FILE])")
        fields[key], last = value.strip(), key
    if "share" not in fields:
        raise argparse.ArgumentTypeError(f"{text!r} has no share= (e.g. share=0.5)")
    if "styles" in fields:
        fields["styles"] = tuple(s.strip() for s in fields["styles"].split("+") if s.strip())
    fields.setdefault("pages", str(DEFAULT_PAGES))
    try:
        return PoisonSettings.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise argparse.ArgumentTypeError(f"{where}: {first['msg']}") from None


def add_plugin_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plugin", action="append", default=[], metavar="FILE",
                   help="a local .py file whose @defender(s) register for this command "
                        "(repeatable; its source hash joins the run's fingerprint)")


def add_request_flags(p: argparse.ArgumentParser) -> None:
    """How each model request is bounded and retried: ``--model-timeout``, ``--max-response-mb``
    and ``--max-retries`` (``run``, ``generate``, ``generate pages``; the first two are read
    with :func:`request_options`)."""
    p.add_argument("--model-timeout", type=_float_range(0.0, None, "a number of seconds above 0"),
                   default=120.0, metavar="S",
                   help="seconds for each model request, from sending it to the last byte of the "
                        "reply (default 120); a missed deadline is a timeout, retried")
    p.add_argument("--max-response-mb", type=_float_range(0.0, None, "a number of MiB above 0"),
                   default=8.0, metavar="MIB",
                   help="largest model reply accepted, in MiB once decoded (default 8); a larger one is a case "
                        "error (ResponseTooLargeError), not retried")
    p.add_argument("--max-retries", type=int_at_least(0), default=4, metavar="N",
                   help="retries of a failed model request (default 4)")


def request_options(args: argparse.Namespace) -> dict[str, Any]:
    """The ``ModelOptions`` fields :func:`add_request_flags`' flags set."""
    return {"timeout_s": args.model_timeout, "max_response_bytes": int(args.max_response_mb * 2**20)}


def add_decoding_flags(p: argparse.ArgumentParser) -> None:
    """``--decoding`` and the generation flags that override it (``--thinking-level``,
    ``--reasoning-effort`` and ``--thinking-budget`` stay with the command)."""
    p.add_argument("--decoding", choices=["paper", "reference"], default="paper",
                   help="decoding preset: paper (temperature 0, App. C.1; default) or reference "
                        "(the reference notebooks' per-provider settings, see docs/running.md); the flags "
                        "below override it")
    p.add_argument("--temperature", type=float, default=None, help="sampling temperature (default: the preset's)")
    p.add_argument("--max-output-tokens", type=int, default=None, help="output token cap (default: the preset's)")
    p.add_argument("--model-seed", type=int, default=None, metavar="N",
                   help="seed sent to the providers that take one (default: none; --seed never is)")


# ModelOptions fields the decoding flags set (argparse dest -> field)
_DECODING_DESTS = {"temperature": "temperature", "max_output_tokens": "max_output_tokens",
                   "thinking_level": "thinking_level", "reasoning_effort": "reasoning_effort",
                   "thinking_budget": "thinking_budget", "model_seed": "seed"}


def decoding_options(args: argparse.Namespace) -> dict[str, Any]:
    """``ModelOptions`` keywords from the decoding flags: the preset and only the values the
    user gave (so that the preset decides the rest)."""
    out: dict[str, Any] = {"decoding": args.decoding}
    for dest, name in _DECODING_DESTS.items():
        value = getattr(args, dest, None)
        if value is not None:
            out[name] = value
    return out


def add_batch_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--batch", action="store_true",
                   help="submit the cases as provider batch jobs (openai/ and google/ models, "
                        "single-call defenders); job ids go to OUT/batches.json, and re-running "
                        "the same command polls them again (never resubmits)")
    p.add_argument("--batch-poll", type=_float_range(0.0, None, "a number of seconds above 0"),
                   default=30.0, metavar="S",
                   help="seconds between polls of the batch jobs (default 30)")
    p.add_argument("--batch-cancel", action="store_true",
                   help="with --batch: cancel the run folder's unfinished batch jobs and stop")
    p.add_argument("--batch-discount", type=_float_range(None, 1.0, "a share from 0 up to (not incl.) 1"),
                   default=0.5, metavar="F",
                   help="share taken off --price for batch runs (default 0.5, the providers' "
                        "batch discount; 0 when the prices given are batch prices)")


class RemovedFlag(argparse.Action):
    """A flag that no longer exists: using it is a one-line usage error (exit 2), which says why."""

    def __init__(self, option_strings: list[str], dest: str, *, why: str, **kwargs: Any) -> None:
        self.why = why
        super().__init__(option_strings, dest, nargs="?", default=argparse.SUPPRESS, help=argparse.SUPPRESS)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        parser.error(f"{option_string} was removed: {self.why}")


def add_scale_flags(p: argparse.ArgumentParser) -> None:
    """How a run spreads: provider batch jobs (``--processes`` is gone: one process runs every call)."""
    one_process = "every call runs in one process on one event loop; --max-connections sets the concurrency"
    p.add_argument("--processes", action=RemovedFlag, why=one_process)
    p.add_argument("--helper-timeout", action=RemovedFlag, why=one_process)
    add_batch_flags(p)


def shard_value(text: str) -> Any:
    """``--shard K/N|auto[/N]`` as a :class:`~medmis.experiments.records.Shard` (a bad value,
    or ``auto`` without scheduler variables, is the parser's one-line usage error)."""
    from medmis.experiments.records import Shard
    from medmis.tools import ConfigError

    try:
        return Shard.parse(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix(f"--shard {text}: ")) from None


def add_shard_flags(p: argparse.ArgumentParser) -> None:
    """Spreading a run over machines: ``--shard`` and the rate budget every shard takes a share of."""
    p.add_argument("--shard", type=shard_value, default=None, metavar="K/N|auto[/N]",
                   help="run only shard K of N (0-based; every case of an item in one shard); auto reads "
                        "SLURM array, Kubernetes Indexed Job or NEL_SHARD_IDX/NEL_TOTAL_SHARDS variables "
                        "(docs/shards.md); join the shard folders with `medmis merge`")
    p.add_argument("--max-rps", type=_float_range(0.0, None, "requests per second above 0"), default=None,
                   metavar="R", help="total model requests per second for the run; a shard of N takes R/N")
    p.add_argument("--max-tpm", type=_float_range(0.0, None, "tokens per minute above 0"), default=None,
                   metavar="T", help="total model tokens per minute for the run; a shard of N takes T/N")


def _float_range(above: float | None, below: float | None, what: str) -> Callable[[str], float]:
    def parse(value: str) -> float:
        try:
            number = float(value)
        except ValueError:
            number = float("nan")
        low_ok = number > above if above is not None else number >= 0
        if not (low_ok and (below is None or number < below)):
            raise argparse.ArgumentTypeError(f"expected {what}, got {value!r}")
        return number

    return parse


def add_search_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--search", choices=["tavily", "serper", "local"], default="local",
                   help="search backend: tavily (needs TAVILY_API_KEY), serper (the paper's; needs "
                        "SERPER_API_KEY) or local BM25 corpus (default)")
    p.add_argument("--corpus-dir", default=None, help="folder of documents for --search local (default: fixtures/corpus)")
    p.add_argument("--search-ambient", default=None, metavar="FILE",
                   help="ambient misinformation: a .jsonl of passages searched with the local corpus for "
                        "every case (e.g. fixtures/ambient/misleading.jsonl); named in the manifest, "
                        "report, verdict and exports. Default: none (the clean web)")


def add_hub_repo_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hub-repo", default=None, metavar="OWNER/NAME",
                   help="hub repository for hub: addresses (default AI4HealthResearch/MedMisBench; "
                        "the release is also at HongjianZhou/MedMisBench)")


def parse_kv(pairs: Sequence[str], flag: str) -> dict[str, dict[str, Any]]:
    """``NAME.KEY=VALUE`` pairs into {name: {key: value}}; values parsed as JSON when they can be."""
    out: dict[str, dict[str, Any]] = {}
    for pair in pairs:
        head, sep, raw = pair.partition("=")
        name, dot, key = head.partition(".")
        if not sep or not dot or not key:
            raise CliError(f"{flag} expects NAME.KEY=VALUE, got {pair!r}")
        out.setdefault(name, {})[key] = flag_value(raw, flag)
    return out


def flag_value(raw: str, flag: str) -> Any:
    """A flag's ``VALUE``: JSON when it parses (by the loader every user file goes through),
    else the text itself (``raw``, the same object).

    Raises:
        CliError: The value nests too deep or names a key twice: it is JSON, but not usable.
    """
    try:
        return json_value(raw, flag, None)
    except UserFileError as exc:
        if exc.kind in ("depth", "duplicate"):
            raise CliError(str(exc)) from None
        return raw


def _split_top(text: str) -> list[str]:
    """``text`` split at commas outside brackets and quotes."""
    parts, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def parse_defenders(value: str) -> list[tuple[str, dict[str, Any]]]:
    """``--defender``: ``NAME`` or ``NAME[KEY=VALUE,...]`` entries, comma-separated, so one run
    can hold a defender twice (``search_agent,search_agent[credibility=true]``); values parsed
    as JSON when they can be."""
    out: list[tuple[str, dict[str, Any]]] = []
    for entry in _split_top(value):
        name, bracket, inner = entry.partition("[")
        if bracket and not inner.endswith("]"):
            raise CliError(f"--defender expects NAME or NAME[KEY=VALUE,...], got {entry!r}")
        options: dict[str, Any] = {}
        for pair in _split_top(inner[:-1]) if bracket else []:
            key, sep, raw = pair.partition("=")
            if not sep or not key.strip():
                raise CliError(f"--defender {name}[...] expects KEY=VALUE pairs, got {pair!r}")
            value = flag_value(raw, "--defender")
            options[key.strip()] = raw.strip() if value is raw else value
        out.append((name.strip(), options))
    return out


def parse_prices(pairs: Sequence[str]) -> dict[str, tuple[float, float]]:
    """``MODEL=IN,OUT`` pairs (USD per million tokens) into {model: (in, out)}."""
    out: dict[str, tuple[float, float]] = {}
    for pair in pairs:
        model, sep, raw = pair.rpartition("=")
        parts = raw.split(",")
        try:
            price = (float(parts[0]), float(parts[1])) if sep and model and len(parts) == 2 else None
        except ValueError:
            price = None
        if price is None or min(price) < 0:
            raise CliError(f"--price expects MODEL=IN,OUT with non-negative USD per million tokens, "
                           f"got {pair!r}")
        out[model] = price
    return out


def parse_flat(pairs: Sequence[str], flag: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise CliError(f"{flag} expects KEY=VALUE, got {pair!r}")
        out[key] = flag_value(raw, flag)
    return out


def split(values: Sequence[str]) -> list[str]:
    return [v.strip() for value in values for v in value.split(",") if v.strip()]


def thinking_budget(value: str) -> int | str:
    """``--thinking-budget``: a number of tokens, or ``adaptive``."""
    if value == "adaptive":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of tokens or 'adaptive', got {value!r}") from None


def base_url_list(values: Sequence[str] | None) -> list[str]:
    """``--model-base-url`` values: URLs, or ``@FILE`` naming a file of URLs (one a line,
    ``#`` comments and blank lines ignored). Replicas of one model; a URL listed twice is an
    error.

    Raises:
        CliError: An unreadable or empty file, or a repeated URL.
    """
    urls: list[str] = []
    for value in values or []:
        if not value.startswith("@"):
            urls.append(value.strip())
            continue
        path = value[1:]
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise CliError(f"--model-base-url {value}: cannot read the file ({exc.strerror})") from None
        found = [line.split("#", 1)[0].strip() for line in text.splitlines()]
        found = [u for u in found if u]
        if not found:
            raise CliError(f"--model-base-url {value}: no URL in the file")
        urls.extend(found)
    seen = {u for u in urls if urls.count(u) > 1}
    if seen:
        raise CliError(f"--model-base-url lists {', '.join(sorted(seen))} more than once")
    if any(not u for u in urls):
        raise CliError("--model-base-url: empty URL")
    return urls


seconds_above_zero = _float_range(0.0, None, "a number of seconds above 0")
"""An argparse type: seconds, a number above 0 (``--case-timeout``)."""
