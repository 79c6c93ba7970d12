"""The paired harness: every (model, defender) through clean / type1 / type2, resumably.

A run directory holds ``manifest.json`` (what was run, with which versions and data),
``records.jsonl`` (one graded line per case key), ``traces/`` (one JSONL per model x defender,
one line per case with every step) and the report files. Re-running the same command skips
keys already recorded; ``retry_errors`` re-runs only the keys whose last record is an error.
Clean cases are queued first, so that most pairs are complete early for the live ASR figure
(a Type 1 record that overtakes its clean one is paired when that arrives).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel

from medmis.agents import (
    AdaptiveLimiter,
    RateBudget,
    RetryPolicy,
    accepts_logprobs,
    aclose_transports,
)
from medmis.defenses import (
    Defender,
    DefenderConfigError,
    DefenderContext,
    create_defender,
    load_plugins,
    mcq_only,
)
from medmis.experiments.benchmark import (
    Answer,
    Case,
    Dataset,
    Item,
    ProtocolName,
    Record,
    plan_cases,
    prompt_preset,
)
from medmis.experiments.records import (
    PLAN_FILE,
    WriteFailed,
    describe_outside,
    has_plan,
    repair_torn_tail,
    write_plan,
)
from medmis.tools import CaseTools, noting_signals, redact

from ._ambient import check_ambient
from ._caseloop import CaseLoop
from ._config import (
    INVALID_ROWS_FILE,
    CacheMode,
    DefenderConfig,
    RunConfig,
    RunResult,
    RunSetupError,
    RunStats,
    SearchBackendName,
    VisitBackendName,
)
from ._fingerprint import Fingerprint, FingerprintDiff, run_fingerprint
from ._lock import LOCK_FILE, OWNER_FILE
from ._manifest import is_simulated, mark_outcome, package_versions, scrub_argv, write_manifest
from ._models import ModelPool
from ._outcome import Outcome, RunInterrupted, record_outcome
from ._poison import RunPoison, check_pages
from ._prepare import (
    ClaimedFolder,
    check_fingerprint,
    check_out_path,
    check_shard,
    check_writable,
    write_invalid_rows,
)
from ._progress import RunProgress
from ._resume import CaseJob, CasePlan, ResumeState, jobs_for_missing, resume_state
from ._solve import solve_case
from ._sources import with_sources

# Re-exported: callers import the run's types from here as well as from the package.
__all__ = [
    "INVALID_ROWS_FILE", "CacheMode", "DefenderConfig", "Harness", "RunConfig", "RunResult",
    "RunSetupError", "RunStats", "SearchBackendName", "VisitBackendName",
    "is_simulated", "package_versions", "scrub_argv",
]


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", text).strip("_") or "x"


class Harness:
    """Runs one configuration. Build with :func:`._experiment.run_experiment` unless you need the parts."""

    def __init__(
        self,
        config: RunConfig,
        *,
        model_factory: Callable[[str], BaseChatModel] | None = None,
        tools: Any = None,
        argv: Sequence[str] | None = None,
        stop_when: Callable[[RunStats], str | None] | None = None,
        notice: Callable[[str], None] | None = None,
        dataset: Dataset | None = None,
        planned: Sequence[tuple[int, ProtocolName, str | None]] | None = None,
    ) -> None:
        self.config = config
        # a caller that loaded the data and planned the cases already (an ablation's folders
        # share one load; each folder's plan is made once, before its estimate) passes them on
        self._dataset = dataset
        self._given_plan = list(planned) if planned is not None else None
        self.notice = notice
        self.out = Path(config.out)
        self._tools = tools
        self._tools_built = tools is not None
        self.argv = list(argv if argv is not None else sys.argv)
        self.stop_when = stop_when
        self.stats = RunStats()
        self.outcome: Outcome | None = None
        self._trace_files: dict[tuple[str, str], str] = {}
        # the error texts this invocation wrote into a folder that had no records: with the
        # count of records written (stats.done) the outcome needs no read of records.jsonl
        self.fresh_errors: list[str] | None = None
        self._loop: CaseLoop | None = None
        self._planned: list[tuple[int, ProtocolName, str | None]] | None = None
        self.retry = RetryPolicy(
            max_retries=config.max_retries,
            base_delay=config.retry_base_delay,
            deadline_s=config.retry_deadline_s,
        )
        # every model call of the run (not each case) takes a slot; 429s lower the limit
        budget = config.rate_budget()  # --max-rps / --max-tpm: this folder's share, paced before the limiter
        self.limiter = AdaptiveLimiter(config.max_connections, budget=RateBudget(
            budget["per_shard"]["max_rps"], budget["per_shard"]["max_tpm"]) if budget else None)
        # the models live apart from the harness: a defender's context reaches the pool's
        # factory, and through it nothing of the run's config, data or cases
        self._pool = ModelPool(
            model_factory, config.seeded(config.model_options), cache_mode=config.cache, cache_dir=self._cache_dir(),
            max_connections=config.max_connections,
            variants={m: (config.spec_of(m), config.options_of(m)) for m in config.model_variants},
        )
        load_plugins(config.plugins)  # the run's local plug-in files (--plugin) register their defenders
        self.poison = RunPoison.of(config)  # the pages of --poison (None without it)
        self.ambient = check_ambient(config)  # --search-ambient, checked before any folder exists
        if config.answer_format != "mcq" and (need := mcq_only([d.name for d in config.defenders],
                                                                config.answer_format)):
            # before anything is made: an MCQ-only defender handed a case without options would
            # vote on, compare or check options it is not shown
            raise RunSetupError(
                f"--answer-format {config.answer_format}: defender(s) {', '.join(need)} need the options "
                "(multiple choice only; `medmis defenders` lists what each works with)")
        if config.epochs > 1 and (config.batch or config.answer_format == "open"):
            # the batch path keys its requests, and `medmis grade` its grades, by case without
            # the epoch: a later epoch would be answered (or graded) as the first
            raise RunSetupError(f"--epochs {config.epochs}: not with "
                                f"{'--batch' if config.batch else '--answer-format open'} (one epoch only)")
        self.defenders: list[Defender] = [
            create_defender(d.name, d.options, label=d.label) for d in config.defenders
        ]
        labels = [d.label for d in self.defenders]
        if twice := sorted({x for x in labels if labels.count(x) > 1}):  # defaults leave no mark
            raise DefenderConfigError(f"defender labels must be unique: {', '.join(twice)} twice")

    # -- resources -------------------------------------------------------------------------
    def _cache_dir(self) -> Path:
        return Path(self.config.cache_dir) if self.config.cache_dir else self.out / "cache"

    def _get_store(self) -> Any:
        return self._pool.store()

    def check_models(self) -> None:
        """Build every model once (no request is sent, no store opened): a bad spec or a
        missing key stops the run before the run folder is made."""
        for spec in self.config.models:
            try:
                self._pool.raw(spec)
            except ValueError as exc:  # a malformed spec or an unknown provider
                raise RunSetupError(f"--model {spec}: {exc}") from None
        # a defender that weighs token probabilities (``calibrate``) cannot run on a model
        # that returns none: refused here, in one line, before anything is created
        needing = [d.label for d in self.defenders if getattr(type(d.options), "needs_logprobs", False)]
        if needing:
            for spec in self.config.models:
                if not accepts_logprobs(self._pool.raw(spec)):
                    raise RunSetupError(
                        f"--model {spec}: returns no token log-probabilities, which defender "
                        f"{', '.join(needing)} needs (use an openai/ or google/ model, or mock/examinee)"
                    )

    def model(self, spec: str) -> BaseChatModel:
        """The chat model for a spec, built once, wired to the record/replay store."""
        return self._pool.get(spec)

    def tools(self) -> Any:
        if not self._tools_built:
            self._tools_built = True
            if any(d.uses_tools for d in self.defenders):
                from medmis.tools import ToolError, make_tools

                try:
                    self._tools = make_tools(
                        search=self.config.search,
                        visit=self.config.visit,
                        cache_mode=self.config.cache,
                        cache_dir=str(self._cache_dir()) if self.config.cache != "live" else None,
                        allow_hosts=tuple(self.config.allow_hosts),
                        corpus_dir=self.config.corpus_dir,
                        ambient=self.config.search_ambient,
                        store=self._get_store(),
                        blocklist=self.config.blocklist,
                    )
                except ToolError as exc:
                    raise RunSetupError(f"web tools: {exc.message}") from exc
        return self._tools

    async def aclose(self) -> None:
        closer = getattr(self._tools, "aclose", None)
        if closer is not None:
            await closer()
        self._pool.close()
        await aclose_transports()  # the models' HTTP sessions opened in this loop

    # -- run ---------------------------------------------------------------------------------
    def load_dataset(self) -> Dataset:
        """The run's data: the dataset passed to the harness, else loaded from ``config.data``."""
        if self._dataset is not None:
            return self._dataset
        return self._load_dataset()

    def _load_dataset(self) -> Dataset:
        """The run's items (strict or skipping invalid rows, as configured)."""
        from medmis.experiments.benchmark import DataError, load_dataset

        dataset = load_dataset(
            self.config.data,
            subset=self.config.subset,
            limit=self.config.limit,
            mode="skip" if self.config.on_invalid == "skip" else "strict",
            hub_repo=self.config.hub_repo,
        )
        if not dataset.items:  # skip mode over a source whose every row is invalid
            raise DataError(f"{self.config.data}: no valid items ({len(dataset.issues)} problem(s))",
                            dataset.issues)
        return dataset

    def plan_cases(self, dataset: Dataset) -> list[tuple[int, ProtocolName, str | None]]:
        """``(item index, protocol, target)`` of every case, in the order the cases are built
        (the plan passed to the harness, when one was)."""
        if self._given_plan is not None and dataset is self._dataset:
            return self._given_plan
        return plan_cases(dataset.items, self.config.protocols, seed=self.config.seed,
                          type1_targets=self.config.type1_targets, shard=self.config.shard)

    def fingerprint(self, dataset: Dataset) -> Fingerprint:
        """The run's fingerprint (``._fingerprint``), from the models as built."""
        models = {spec: self._pool.raw(spec) for spec in self.config.models}
        return run_fingerprint(self.config, self.defenders, dataset, models)

    def output_paths(self) -> tuple[list[str | Path], list[str | Path]]:
        """The files and folders this run writes in its folder (an absolute cache folder as it
        is): what :func:`._prepare.check_writable` checks before anything is made."""
        files: list[str | Path] = [LOCK_FILE, OWNER_FILE, "manifest.json", PLAN_FILE, "records.jsonl",
                                   INVALID_ROWS_FILE]
        files += [self.trace_file(m, d.label) for m in self.config.models for d in self.defenders]
        folders: list[str | Path] = ["traces"]
        if self.config.cache != "live":
            folders.append(self._cache_dir())
        return files, folders

    def check_outputs(self) -> None:
        """Refuse (``RunSetupError``) a folder where a path this run writes cannot be written,
        before anything is made: ``--out`` a file, a folder in place of a trace file, ..."""
        check_out_path(self.out)
        check_writable(self.out, *self.output_paths())

    def check_folder(self, dataset: Dataset | None = None) -> FingerprintDiff | None:
        """:meth:`run`'s checks before it claims the folder, writing nothing: how the run
        differs from the folder's (None for a new folder). Raises ``RunSetupError`` as it would."""
        self.check_outputs()
        self.check_models()
        dataset = dataset if dataset is not None else self.load_dataset()
        check_shard(self.out, self.config.shard)
        return check_fingerprint(self.out, self.fingerprint(dataset), self.config.accept_changes)[1]

    def write_manifest(self, dataset: Dataset, n_cases: int, claim: ClaimedFolder | None = None) -> None:
        fingerprint = claim.fingerprint if claim else self.fingerprint(dataset)
        if claim is not None and claim.recorded is not None:
            fingerprint = claim.recorded.merged_with(fingerprint)
        write_manifest(self.out, self.config, self.defenders, dataset, n_cases, self.argv,
                       fingerprint=fingerprint, accepted=claim.accepted if claim else None)
        if self._planned is not None:  # what the readers keep of records.jsonl (``._plan``)
            write_plan(self.out, fingerprint.models, fingerprint.defenders, dataset.items, self._planned,
                       self.config.epochs)

    def trace_file(self, model: str, defender: str) -> str:
        """The trace file of a model x defender, relative to the run folder (``traces/…``)."""
        name = self._trace_files.get((model, defender))
        if name is None:
            name = self._trace_files[(model, defender)] = f"traces/{_safe_name(model)}__{_safe_name(defender)}.jsonl"
        return name

    async def run_case(self, spec: str, defender: Defender, case: Case) -> tuple[Record, dict[str, Any]]:
        """Run one case; failures of the case are recorded on the record, never graded.

        The record and trace are returned as the case left them; the run masks credentials
        in both (:func:`._io.scrub_lines`) as it writes them.

        The defender is handed the case's :class:`CaseView` and a context of services; the
        case itself (gold, target, sentence labels, protocol) stays here for grading.
        """
        web = self.tools() if defender.uses_tools else None
        poison = self.poison.case(case, web) if self.poison else None
        web = poison.tools if poison else web
        sample = self._pool.sampler(case.epoch)  # every model of a later epoch samples afresh
        ctx = DefenderContext(
            model=sample(spec),
            model_spec=spec,
            # the facade, whatever the toolset: the poisoned layer and its counts stay here
            tools=CaseTools() if web is not None else None,
            model_factory=sample,
            retry=self.retry,
            tool_timeout_s=self.config.tool_timeout_s,
            limiter=self.limiter,
        )
        start = time.perf_counter()
        view = case.view()
        try:
            answer = await solve_case(defender, view, ctx, timeout_s=self.config.case_timeout_s, tools=web)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            answer = Answer(
                # redact before cutting: a key split at the cut would not match its value
                error=redact(f"{type(exc).__name__}: {exc}").splitlines()[0][:300],
                usage=ctx.usage,
                llm_calls=ctx.llm_calls,
                tool_calls=ctx.tool_calls,
                trace=ctx.trace,
            )
        if answer.error is None:
            answer = with_sources(answer, view.options, ctx.answer_evidence)
        item = case.item
        record = Record(
            model=spec,
            defender=defender.label,
            protocol=case.protocol,
            item_id=item.id,
            subset=item.subset,
            target=case.target,
            gold=item.gold,
            # an open-ended answer is free text: no choice, and not graded here (`medmis grade`)
            choice=None if answer.error or case.answer_format == "open" else answer.choice,
            correct=None if answer.error or case.answer_format == "open" else answer.choice == item.gold,
            answer_format=case.answer_format,
            raw=answer.raw if case.answer_format == "open" and not answer.error else None,
            content_type=item.content_type,
            provenance=item.provenance,
            error=answer.error,
            usage=answer.usage,
            llm_calls=answer.llm_calls,
            tool_calls=answer.tool_calls,
            latency_s=round(time.perf_counter() - start, 6),
            seed=case.seed,
            method=answer.method,
            prompt=case.prompt,
            prompt_version=prompt_preset(case.prompt).version_for(case.answer_format),
            defender_options=defender.options.model_dump(mode="json"),
            extra=answer.extra,
            trace_file=self.trace_file(spec, defender.label),
            poison=poison.exposure(answer) if poison else None,
            epoch=case.epoch,
        )
        trace = {
            "model": spec,
            "defender": defender.label,
            "protocol": case.protocol,
            "item_id": item.id,
            "subset": item.subset,
            "target": case.target,
            # right after the key fields (trace readers match the line's head), only when above 0
            **({"epoch": case.epoch} if case.epoch else {}),
            "context": [c.model_dump() for c in case.context],
            "choice": record.choice,
            "gold": item.gold,
            "error": answer.error,
            "raw": answer.raw,
            "method": answer.method,
            "extra": answer.extra,
            "steps": (poison.mark if poison else list)([s.model_dump(mode="json") for s in answer.trace]),
        }
        return record, trace

    async def run(self) -> RunResult:
        # Every user mistake is found before OUT is made: the path, the model specs and keys,
        # the data; then the folder is claimed (lock + fingerprint) for the rest of the run.
        self.check_outputs()
        self.check_models()
        dataset = self.load_dataset()
        planned = self._planned = self.plan_cases(dataset)
        check_pages(self.poison, dataset.items, planned, self.notice)  # no page for any Type 1 case: exit 2
        fingerprint = self.fingerprint(dataset)
        # signals are noted from here (inside the event loop, over asyncio.run's own handler):
        # a KeyboardInterrupt a defender raises is its case's error, a real one stops the run
        with noting_signals():
            try:
                with ClaimedFolder(self.out, fingerprint, accept_changes=self.config.accept_changes,
                                   notice=self.notice, shard=self.config.shard) as claim:
                    try:
                        return await self._run_claimed(planned, dataset, claim)
                    except OSError as exc:  # the cases' own failures are on their records: this is the folder's
                        raise self._write_failed(WriteFailed(exc.filename or self.out / "records.jsonl", exc)) from None
                    except WriteFailed as failure:
                        raise self._write_failed(failure) from None
            except OSError as exc:  # the folder could not be claimed (its lock, its manifest)
                raise WriteFailed(exc.filename or self.out, exc) from None

    def _write_failed(self, failure: WriteFailed) -> WriteFailed:
        """Note in the manifest (when it can still be written) that a write failed."""
        failure.written = max(failure.written, self.stats.done)  # this invocation's records
        self.stats.stopped_reason = "write failed"
        self.outcome = Outcome(failure.exit_code, str(failure))
        limiter = self._loop.limiter_summary() if self._loop is not None else self.limiter.summary()
        with contextlib.suppress(OSError, ValueError):  # the manifest may be as unwritable
            mark_outcome(self.out, self.outcome, stopped=f"write failed: {failure.path.name}",
                         errors=self.stats.errors, concurrency=limiter, status="write failed")
        return failure

    def _resume(self, records_path: Path, planned: list[tuple[int, ProtocolName, str | None]],
                items: Sequence[Item]) -> tuple[ResumeState, dict[tuple[str, str, str], bool],
                                                list[list[CaseJob]]]:
        """What the folder's records leave to do, as jobs in two phases (clean, then the
        rest); the records' progress figures are added to ``stats`` and the clean answers to the
        returned map. Missing keys come from a columnar scan, not a Record per line."""
        cfg = self.config
        records_path.touch()  # a shard may hold no item of a small data set: still a run folder, finished
        plan = CasePlan(cfg.models, [d.label for d in self.defenders],
                        [(protocol, items[i].key, target) for i, protocol, target in planned], cfg.epochs)
        resumed = resume_state(records_path, plan, retry_errors=cfg.retry_errors,
                               keep=self.out if has_plan(self.out) else None)
        if resumed.outside.count and self.notice is not None:
            self.notice(describe_outside(records_path, resumed.outside))
        self.fresh_errors = [] if resumed.records == 0 else None
        clean_state: dict[tuple[str, str, str], bool] = {}
        resumed.apply(self.stats, clean_state)
        self.stats.done = 0  # progress counts this invocation's work
        return resumed, clean_state, jobs_for_missing(cfg, self.defenders, resumed.missing, planned, items)

    async def _run_claimed(self, planned: list[tuple[int, ProtocolName, str | None]], dataset: Dataset,
                           claim: ClaimedFolder) -> RunResult:
        cfg = self.config
        self.tools()  # fail before any case runs when the tools cannot be built
        (self.out / "traces").mkdir(exist_ok=True)
        skipped = write_invalid_rows(self.out, dataset, self.notice)
        self.write_manifest(dataset, len(planned), claim)
        records_path = self.out / "records.jsonl"
        repair_torn_tail(records_path)
        resumed, clean_state, todo = self._resume(records_path, planned, dataset.items)
        total = len(todo[0]) + len(todo[1])
        if total == 0:
            return await self._nothing_to_do(records_path, resumed.records, skipped)
        try:
            with records_path.open("a", encoding="utf-8") as rec_fh:
                # one queue, clean cases first: the last clean calls overlap the first
                # injected ones instead of the whole run waiting for the slowest of them
                jobs = todo[0] + todo[1]
                self._loop = CaseLoop(self, jobs, rec_fh, clean_state)
                new = await self._loop.run(lambda: RunProgress(total, enabled=cfg.progress and total > 0))
                rec_fh.flush()
                os.fsync(rec_fh.fileno())
        except (KeyboardInterrupt, asyncio.CancelledError):
            # Ctrl-C: what was written stays (resumable); the manifest says why it stopped
            self.stats.stopped_reason = "interrupted"
            self._finish(records_path)
            raise RunInterrupted(self.out) from None
        finally:
            if self._loop is not None:
                if self._loop.progress is not None:
                    self._loop.progress.close()
                for fh in self._loop.trace_handles.values():
                    fh.close()
            await self.aclose()
        return RunResult(self.out, self._finish(records_path), new, self.stats, skipped_rows=skipped,
                         outcome=self.outcome)

    async def _nothing_to_do(self, records_path: Path, n_records: int, skipped: int) -> RunResult:
        """Every key is recorded already: record the outcome (the caller decides on a report)."""
        await self.aclose()
        self._finish(records_path)
        return RunResult(self.out, n_records, 0, self.stats, skipped_rows=skipped, nothing_to_do=True,
                         outcome=self.outcome)

    def _finish(self, records_path: Path) -> int:
        tally = (self.stats.done, self.fresh_errors) if self.fresh_errors is not None else None
        limiter = self._loop.limiter_summary() if self._loop is not None else self.limiter.summary()
        n, self.outcome = record_outcome(self.out, records_path, self.stats.stopped_reason,
                                         scrub_argv(self.argv), limiter, tally=tally)
        return n
