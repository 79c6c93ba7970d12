"""``medmis generate``: sources or a release -> jobs -> the pipeline -> released rows, resumably.

Files next to ``--out FILE.jsonl``: ``FILE.generation.jsonl`` (one outcome per item: stage-1
decision, raw replies, tokens), ``FILE.manifest.json`` (generator, prompt versions, seed,
fingerprint, totals, cost), ``FILE.lock`` while running, and the record/replay store
(``FILE.cache/`` unless ``--cache-dir``). Re-running the same command skips items with a final
outcome and retries provider errors; another configuration for the same file is refused.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from medmis.experiments.records import repair_torn_tail
from medmis.tools import ConfigError, json_file, json_lines, redact_json, scrub_url

from . import _prompts as P
from ._finish import exit_status, write_manifest_file
from ._pipeline import FINAL_STATUSES, Job, Pipeline, Stages, sample_provenance
from ._release import Cycle, release_jobs_input, stratified_sample
from ._sources import detect_format, read_source

if TYPE_CHECKING:
    from medmis.agents import RetryPolicy
    from medmis.tools import RecordStore

CacheMode = Literal["live", "record", "replay", "refresh"]


@dataclass(kw_only=True)
class GenerationSettings:
    """What every generation shares and the steps below read (``medmis generate`` and
    ``medmis generate pages`` add their own fields)."""

    out: Path
    generator: str
    subset: str | None = None
    seed: int = 0
    limit: int | None = None
    max_connections: int = 8
    cache: CacheMode = "live"
    cache_dir: Path | None = None
    budget_usd: float | None = None
    price: tuple[float, float] | None = None  # USD per million input, output tokens
    base_url: str | None = None
    temperature: float = 1.0  # the reference generates at 1.0 and extracts at 0.0
    # how each generator request is bounded and retried (--model-timeout, --max-response-mb,
    # --max-retries, as on `medmis run`); not in the fingerprint: they do not change a reply
    timeout_s: float = 120.0
    max_response_bytes: int | None = 8 * 1024 * 1024
    max_retries: int = 4
    argv: list[str] = field(default_factory=list)

    def side(self, suffix: str) -> Path:
        return self.out.with_name(self.out.name.removesuffix(".jsonl") + suffix)


class Result(Protocol):
    """One job's outcome as the job loop records it."""

    @property
    def status(self) -> str: ...
    @property
    def row(self) -> dict[str, Any] | None: ...
    @property
    def input_tokens(self) -> int: ...
    @property
    def output_tokens(self) -> int: ...
    def sidecar(self) -> dict[str, Any]: ...


class Runner(Protocol):
    async def run(self, job: Any) -> Result: ...


@dataclass(kw_only=True)
class GenerateConfig(GenerationSettings):
    """Everything that decides what ``medmis generate`` writes (see :func:`fingerprint`)."""

    source: Path | None = None
    source_format: str = "auto"
    from_release: Path | None = None
    provenance_cycle: Cycle | None = None
    stratified: int | None = None
    stages: Stages = "two"
    decoding: Literal["paper", "reference"] = "reference"
    """The preset ``temperature`` came from (``medmis generate --decoding``); recorded in the
    manifest. Neither preset sends a seed, cap or thinking setting to the generator."""
    attack: Literal["static", "adaptive"] = "static"
    against: tuple[str, ...] = ()
    """``adaptive``: rewrite a release's false sentences knowing these defenders (``_adaptive``)."""
    against_options: dict[str, dict[str, Any]] = field(default_factory=dict)


def _hash_path(path: Path) -> str:
    digest = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for p in files:
        digest.update(p.name.encode())
        digest.update(p.read_bytes())
    return digest.hexdigest()


def build_jobs(cfg: GenerateConfig) -> tuple[list[Job], str]:
    """The jobs in source order, and the mode name recorded in the manifest."""
    if cfg.attack != "static" or cfg.against or cfg.against_options:
        from ._adaptive import check_attack

        check_attack(cfg.attack, cfg.against, cfg.provenance_cycle, cfg.against_options)
    if cfg.from_release is not None:
        from medmis.experiments.benchmark import load_dataset

        items = load_dataset(cfg.from_release, subset=cfg.subset).items
        if cfg.stages == "one":
            raise ConfigError("--from-release holds each item's content type fixed, which the merged "
                           "one-call prompt cannot (it picks its own): use --stages two")
        if cfg.stratified:
            items = stratified_sample(items, cfg.stratified, cfg.seed)
        if cfg.attack == "adaptive":
            from ._adaptive import adaptive_jobs, resolve_defense

            defense = resolve_defense(cfg.against, cfg.against_options)
            jobs = adaptive_jobs(items, defense, cfg.from_release)
            return (jobs[: cfg.limit] if cfg.limit is not None else jobs), f"adaptive-against-{defense.label()}"
        jobs = []
        for item in items:
            try:
                source, content, provenance = release_jobs_input(item, cfg.provenance_cycle)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
            jobs.append(Job(source, provenance, content))
        mode = f"provenance-cycle-{cfg.provenance_cycle}" if cfg.provenance_cycle else "generator-swap"
    else:
        if cfg.attack == "adaptive":
            raise ConfigError("--attack adaptive rewrites a release's false sentences: give --from-release FILE")
        if cfg.source is None:
            raise ConfigError("generate needs SOURCE or --from-release FILE")
        if cfg.provenance_cycle or cfg.stratified:
            raise ConfigError("--provenance-cycle and --stratified work on --from-release")
        fmt = detect_format(cfg.source) if cfg.source_format == "auto" else cfg.source_format
        if fmt == "release":
            raise ConfigError(f"{cfg.source} holds released rows: use --from-release")
        sources = read_source(cfg.source, fmt, cfg.subset)
        jobs = [Job(it, sample_provenance(cfg.seed, it.subset, it.id)) for it in sources]
        mode = f"fresh-{fmt}"
    return (jobs[: cfg.limit] if cfg.limit is not None else jobs), mode


def fingerprint(cfg: GenerateConfig, mode: str) -> dict[str, Any]:
    data = cfg.from_release or cfg.source
    versions = [P.EXTRACT_VERSION]
    versions.append(P.MERGED_VERSION if cfg.stages == "one" else P.TWO_STAGE_VERSION)
    extra: dict[str, Any] = {}
    if cfg.attack == "adaptive":
        from ._adaptive import ADAPTIVE_VERSION, fingerprint_fields, resolve_defense

        versions = [ADAPTIVE_VERSION]
        extra = fingerprint_fields(resolve_defense(cfg.against, cfg.against_options))
    return {
        "mode": mode,
        "data_sha256": _hash_path(data) if data else None,
        "subset": cfg.subset,
        "seed": cfg.seed,
        "stages": cfg.stages,
        "stratified": cfg.stratified,
        "generator": cfg.generator,
        "base_url": scrub_url(cfg.base_url) if cfg.base_url else None,  # no credentials on disk
        "endpoint": _endpoint(cfg),
        "temperature": cfg.temperature,
        "prompts": [f"{v.name}@{v.version}" for v in versions],
        **extra,
    }


def _endpoint(cfg: GenerationSettings) -> str | None:
    """The server the generator talks to: ``--model-base-url`` or its provider's environment
    variable (``OPENAI_BASE_URL`` …), credentials stripped."""
    from medmis.agents import ModelOptions, effective_base_url
    from medmis.experiments.harness import bare_url

    try:
        return bare_url(effective_base_url(cfg.generator, ModelOptions(base_url=cfg.base_url)))
    except ValueError:  # a malformed spec: building the model says so in one line
        return None


def estimate(jobs: list[Job], cfg: GenerateConfig) -> dict[str, Any]:
    """Calls, tokens and cost a run would need, from the prompts themselves (``--dry-run``)."""
    from medmis.agents import estimate_tokens

    calls = tokens_in = tokens_out = 0
    for job in jobs:
        it = job.item
        if cfg.attack == "adaptive":
            from ._adaptive import AdaptiveJob, adaptive_prompt

            assert isinstance(job, AdaptiveJob)
            calls += 1
            tokens_in += estimate_tokens(adaptive_prompt(job))
            tokens_out += 120 * len(job.claims())
            continue
        if it.options is None:
            calls += 1
            tokens_in += estimate_tokens(P.extract_prompt(it.question, it.language))
            tokens_out += 120
            options, gold = {"1": "", "2": "", "3": "", "4": ""}, "1"
        else:
            options, gold = it.options, it.gold or ""
        content = job.content or next(iter(P.MISINFO_TYPES))
        if job.content is None and cfg.stages == "one":
            prompts = [P.merged_prompt(it.question, options, gold, job.provenance, it.language)]
        else:
            prompts = [P.generation_prompt(it.question, options, gold, content, job.provenance, it.language)]
            if job.content is None:
                prompts.append(P.filter_prompt(it.question, options, gold))
        calls += len(prompts)
        tokens_in += sum(estimate_tokens(p) for p in prompts)
        tokens_out += 60 * (len(options) + 1) + 40 * (len(prompts) - 1)
    return {"items": len(jobs), "calls": calls, "input_tokens": tokens_in, "output_tokens": tokens_out,
            "usd": _usd(cfg.price, tokens_in, tokens_out)}


def _usd(price: tuple[float, float] | None, tin: int, tout: int) -> float | None:
    return None if price is None else round((tin * price[0] + tout * price[1]) / 1e6, 6)


class _Lock:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> _Lock:
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            pid = self.path.read_text().strip()
            if pid.isdigit() and _alive(int(pid)):
                raise ConfigError(f"{self.path.name}: another generate (pid {pid}) is writing this file") from None
            self.path.unlink(missing_ok=True)  # left by a process that died
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        return self

    def __exit__(self, *exc: object) -> None:
        self.path.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    repair_torn_tail(path)
    return [row for _number, row in json_lines(path.read_bytes(), path)]


def _append(path: Path, obj: dict[str, Any]) -> None:
    # a provider error may echo the key or the Basic credential it was sent
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(redact_json(obj), ensure_ascii=False) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def _check_resume(cfg: GenerationSettings, fp: dict[str, Any]) -> dict[str, Any] | None:
    path = cfg.side(".manifest.json")
    if not path.exists():
        if cfg.out.exists() and cfg.out.stat().st_size:
            raise ConfigError(f"{cfg.out} exists and was not written by medmis generate; choose another --out")
        return None
    previous: dict[str, Any] = json_file(path)
    recorded = previous.get("fingerprint") or {}
    # a field an older version did not record is not compared
    diff = sorted(k for k in fp if k in recorded and recorded[k] != fp[k])
    if diff or not recorded:
        diff = diff or sorted(fp)
        raise ConfigError(f"{cfg.out} belongs to another generation (differs in: {', '.join(diff)}); choose another --out")
    return previous


def check_budget(cfg: GenerationSettings) -> None:
    """Refuse ``--budget-usd`` without ``--price`` (a spend cannot be counted without prices)."""
    if cfg.budget_usd is not None and cfg.price is None:
        raise ConfigError("--budget-usd needs --price IN,OUT (USD per million tokens)")


def open_store(cfg: GenerationSettings) -> RecordStore | None:
    """The record/replay store the generator's calls go through (None for ``--cache live``)."""
    if cfg.cache == "live":
        return None
    from medmis.tools import RecordStore

    return RecordStore(cfg.cache_dir or cfg.side(".cache"), cfg.cache)


def replace_rows(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    """Rewrite the JSONL file ``path`` with ``rows`` (in that order), atomically."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    os.replace(tmp, path)


def _model(cfg: GenerationSettings, temperature: float, store: Any) -> Any:
    """The generator at ``temperature``, behind the record/replay store when there is one."""
    from medmis.agents import ModelOptions, load_model

    chat = load_model(cfg.generator, ModelOptions(temperature=temperature, base_url=cfg.base_url, seed=None,
                                                  timeout_s=cfg.timeout_s, max_response_bytes=cfg.max_response_bytes))
    if store is not None:
        from medmis.tools import attach_cache

        chat = attach_cache(chat, store)
    return chat


def retry_policy(cfg: GenerationSettings) -> RetryPolicy:
    """The retry policy of every generator call (``--max-retries``)."""
    from medmis.agents import RetryPolicy

    return RetryPolicy(max_retries=cfg.max_retries)


def _models(cfg: GenerateConfig, store: Any) -> tuple[Any, Any]:
    return _model(cfg, cfg.temperature, store), _model(cfg, 0.0, store)


async def _run_jobs(cfg: GenerationSettings, pipeline: Runner, todo: list[Any], spent: list[float]) -> tuple[int, bool]:
    """Run jobs with at most ``max_connections`` in flight; stop scheduling at the budget."""
    sem = asyncio.Semaphore(max(1, cfg.max_connections))
    stopped = False
    errors = 0

    async def one(job: Any) -> None:
        nonlocal stopped, errors
        async with sem:
            if cfg.budget_usd is not None and spent[0] >= cfg.budget_usd:
                stopped = True
                return
            outcome = await pipeline.run(job)
        spent[0] += _usd(cfg.price, outcome.input_tokens, outcome.output_tokens) or 0.0
        _record(cfg, outcome)
        errors += outcome.status in ("error", "malformed")

    try:
        await asyncio.gather(*(one(j) for j in todo))
    finally:
        from medmis.agents import aclose_transports

        await aclose_transports()
    return errors, stopped


def run_pending(cfg: GenerationSettings, fp: dict[str, Any], jobs: Sequence[Any], pipeline: Runner, store: Any, *,
                job_key: Callable[[Any], Any], row_key: Callable[[dict[str, Any]], Any],
                outcome_key: Callable[[dict[str, Any]], Any] | None = None, final: frozenset[str], finish: Callable[[dict[str, Any] | None, bool], dict[str, Any]]
                ) -> tuple[int, bool, dict[str, Any]]:
    """The resumable run every generate command shares: under the output's lock, check the
    fingerprint, run the jobs not yet final (a final outcome whose row was written counts only
    when the row is on disk; errors are retried), close the store, then ``finish(previous,
    stopped)`` (reorder the rows, write the manifest) and return (errors, stopped, its totals).
    ``job_key`` keys a job, ``row_key`` an output row, ``outcome_key`` a sidecar outcome (the
    row's key when not given)."""
    cfg.out.parent.mkdir(parents=True, exist_ok=True)
    with _Lock(cfg.side(".lock")):
        previous = _check_resume(cfg, fp)
        outcomes = {(outcome_key or row_key)(o): o for o in _read_jsonl(cfg.side(".generation.jsonl"))}
        written = {row_key(r) for r in _read_jsonl(cfg.out)}
        done = {k for k, o in outcomes.items() if o["status"] in final and (not o["written"] or k in written)}
        todo = [j for j in jobs if job_key(j) not in done]
        spent = [float((previous or {}).get("totals", {}).get("usd") or 0.0)]
        try:
            errors, stopped = asyncio.run(_run_jobs(cfg, pipeline, todo, spent))
        finally:
            if store is not None:
                store.close()
        totals = finish(previous, stopped)
    return errors, stopped, totals


def _record(cfg: GenerationSettings, outcome: Result) -> None:
    # the row first: a crash between the two writes re-generates the item rather than losing it
    if outcome.row is not None:
        _append(cfg.out, outcome.row)
    _append(cfg.side(".generation.jsonl"), outcome.sidecar())


def generate(cfg: GenerateConfig) -> int:
    """Run ``medmis generate``; returns the exit status (0, 1 case errors, 3 stopped)."""
    check_budget(cfg)
    jobs, mode = build_jobs(cfg)
    fp = fingerprint(cfg, mode)
    store = open_store(cfg)
    model, extract_model = _models(cfg, store)  # before any file: a missing key creates nothing
    pipeline: Pipeline
    if cfg.attack == "adaptive":
        from ._adaptive import AdaptivePipeline

        pipeline = AdaptivePipeline(model, extract_model, stages=cfg.stages, retry=retry_policy(cfg))
    else:
        pipeline = Pipeline(model, extract_model, stages=cfg.stages, retry=retry_policy(cfg))

    def finish(previous: dict[str, Any] | None, stopped: bool) -> dict[str, Any]:
        _order_rows(cfg, jobs)
        return _write_manifest(cfg, fp, previous, stopped)

    # final = generated (and its row is on disk), rejected or malformed; errors are retried
    errors, stopped, totals = run_pending(cfg, fp, jobs, pipeline, store, job_key=lambda j: (j.item.subset, j.item.id),
                                          row_key=lambda r: (r["subset"], r["id"]), final=FINAL_STATUSES,
                                          finish=finish)
    return exit_status("medmis generate", f"{totals['generated']} generated, {totals['rejected']} "
                       f"rejected, {totals['malformed']} malformed, {totals['error']} errors -> {cfg.out}",
                       stopped=stopped, failed=bool(errors or totals["error"] or totals["malformed"]))


def _attack_versions(cfg: GenerateConfig) -> list[P.PromptVersion]:
    if cfg.attack != "adaptive":
        return []
    from ._adaptive import ADAPTIVE_VERSION

    return [ADAPTIVE_VERSION]


def _order_rows(cfg: GenerateConfig, jobs: list[Job]) -> None:
    """Rewrite the rows in source order, one per item (the last written wins), atomically."""
    order = {(j.item.subset, j.item.id): i for i, j in enumerate(jobs)}
    latest = {(r["subset"], r["id"]): r for r in _read_jsonl(cfg.out)}
    ranked = sorted(latest.items(), key=lambda kv: order.get(kv[0], len(order)))
    replace_rows(cfg.out, (redact_json(r) for _, r in ranked))


def _write_manifest(cfg: GenerateConfig, fp: dict[str, Any], previous: dict[str, Any] | None,
                    stopped: bool) -> dict[str, Any]:
    latest = {(o["subset"], o["id"]): o for o in _read_jsonl(cfg.side(".generation.jsonl"))}
    every = _read_jsonl(cfg.side(".generation.jsonl"))
    tin = sum(o["input_tokens"] for o in every)
    tout = sum(o["output_tokens"] for o in every)
    totals: dict[str, Any] = {s: sum(o["status"] == s for o in latest.values())
                              for s in ("generated", "rejected", "malformed", "error")}
    totals.update(calls=sum(o["calls"] for o in every), input_tokens=tin, output_tokens=tout,
                  usd=_usd(cfg.price, tin, tout))
    write_manifest_file(cfg, fp, previous, stopped, totals, {
        "decoding": {"preset": cfg.decoding, "generation_temperature": cfg.temperature,
                     "extraction_temperature": 0.0},
        "prompt_versions": {v.name: {"version": v.version, "source": v.source}
                            for v in (P.EXTRACT_VERSION, P.MERGED_VERSION, P.TWO_STAGE_VERSION, *_attack_versions(cfg))},
    })
    return totals
