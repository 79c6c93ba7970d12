"""``medmis run --batch``: single-call defenders' cases answered through provider batch jobs.

Two passes over the ordinary harness:

1. *Collect.* Each pending case runs its defender with a collecting model
   (:class:`~._batch_model.BatchChat`): the one model call becomes the exact request the
   interactive adapter would send, keyed by its hash, and the case stops there.
2. *Answer.* When a job has ended, its cases run the same defender again through the
   harness's own case path, with a model that answers each request from the job's results.
   Records, traces, usage (from the batch responses), extraction and grading are those of an
   interactive run; a failed or expired line becomes an error record, which
   ``--retry-errors`` submits anew.

Jobs are stored in ``OUT/batches.json`` right after each submission. A run stopped while it
waits (Ctrl-C, a kill) leaves its jobs running at the provider; the same command polls the
stored jobs again and never submits a stored request a second time.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from medmis.agents import ModelOptions, RetryPolicy, parse_spec, retry_async
from medmis.defenses import Defender, DefenderContext
from medmis.experiments.benchmark import Case, Dataset, ProtocolName
from medmis.experiments.records import repair_torn_tail
from medmis.tools import bulk_transfers, redact

from ._batch_model import BatchChat, BatchRequest, RequestCollected
from ._batch_providers import BatchDriver, JobStatus, driver_for
from ._batch_store import BATCHES_FILE, BatchBook, BatchJob, CaseKey
from ._caseloop import CaseLoop
from ._config import RunResult, RunSetupError
from ._models import ModelPool
from ._outcome import RunInterrupted
from ._prepare import ClaimedFolder, write_invalid_rows
from ._progress import RunProgress
from ._resume import CaseJob
from ._runner import Harness
from ._solve import solve_case

BATCH_PROVIDERS = ("openai", "google")

T = TypeVar("T")


def check_batchable(models: list[str], defenders: list[Defender], cache: str) -> None:
    """Refuse, in one line, what a batch run cannot do.

    Raises:
        RunSetupError: A model whose provider has no batch API here, a defender that is not
            declared single-call (agentic defenders need several rounds), or ``--cache
            replay``. (Other cache modes are accepted; a batch run's model calls bypass the
            store, which only web tools would use.)
    """
    for spec in models:
        try:
            provider, _ = parse_spec(spec)
        except ValueError as exc:
            raise RunSetupError(f"--model {spec}: {exc}") from None
        if provider not in BATCH_PROVIDERS:
            raise RunSetupError(f"--batch: {spec} has no batch API here (batch providers: openai/, google/)")
    multi = [d.label for d in defenders if not d.single_call]
    if multi:
        raise RunSetupError(f"--batch: defender(s) {', '.join(multi)} make several model calls per case; "
                            "batch runs take single-call defenders only (none, warning, context_blind, ...)")
    if cache == "replay":
        raise RunSetupError("--batch submits its requests; it cannot answer them from the store (--cache replay)")


class BatchApiError(RunSetupError):
    """A batch API call failed (after the run's retries, for the calls that are safe to
    repeat); the stored jobs stay in ``batches.json`` for the next run."""


def _key(spec: str, d: Defender, case: Case) -> CaseKey:
    return (spec, d.label, case.protocol, case.item.key, case.target)


class BatchHarness(Harness):
    """A :class:`Harness` whose model calls go through provider batch jobs.

    Args:
        config: The run's configuration (``batch=True``; ``batch_poll_s`` between polls).
        cancel: Cancel the folder's stored, unfinished jobs instead of running; a later run
            writes their cases as error records (``--retry-errors`` submits them anew).
        **kwargs: As for :class:`Harness`.
    """

    def __init__(self, config: Any, *, cancel: bool = False, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        self._api_retry = self.retry  # kept: pass 2 turns the run's retries off for its cases
        self.cancel = cancel
        self._answering: str | None = None  # the job whose results pass 2 is writing
        self._drivers: dict[str, BatchDriver] = {}

    def output_paths(self) -> tuple[list[str | Path], list[str | Path]]:
        files, folders = super().output_paths()
        return [*files, BATCHES_FILE], folders

    def check_models(self) -> None:
        # first: a provider without a batch API is refused before its SDK is even imported
        check_batchable([self.config.spec_of(m) for m in self.config.models], self.defenders, self.config.cache)
        super().check_models()

    def _driver(self, spec: str) -> BatchDriver:
        if spec not in self._drivers:
            self._drivers[spec] = driver_for(self._pool.raw(spec))
        return self._drivers[spec]

    async def _api(self, what: str, call: Callable[[], Awaitable[T]], *, repeat: bool = True) -> T:
        """A batch API call, retried by the run's policy when ``repeat`` (polls and reads;
        never a submission, which a lost reply could otherwise duplicate)."""
        try:
            with bulk_transfers():  # uploads and result files are large by design: no reply cap
                return await (retry_async(call, self._api_retry) if repeat else call())
        except Exception as exc:
            text = redact(f"{type(exc).__name__}: {exc}").splitlines()[0][:300] if str(exc) else type(exc).__name__
            raise BatchApiError(f"--batch: {what} failed: {text}; re-run the same command to "
                                "resume (stored jobs are polled, not resubmitted)") from exc

    async def run_case(self, spec: str, defender: Defender, case: Case) -> tuple[Any, dict[str, Any]]:
        """The ordinary case path; the record and trace also name the batch job that answered."""
        record, trace = await super().run_case(spec, defender, case)
        if self._answering is not None:
            record = record.model_copy(update={"extra": {**record.extra, "batch_job": self._answering}})
            trace["batch_job"] = self._answering
        return record, trace

    def _say(self, text: str) -> None:
        if self.config.progress:
            print(f"medmis run --batch: {text}", file=sys.stderr, flush=True)

    # -- pass 1: the requests ------------------------------------------------------------------
    async def _collect(self, jobs: list[CaseJob]) -> dict[CaseKey, BatchRequest]:
        collectors = {spec: BatchChat(real=self._pool.raw(spec)) for spec in self.config.models}
        out: dict[CaseKey, BatchRequest] = {}
        for spec, d, case in jobs:
            chat = collectors[spec]
            before = len(chat.collected)
            ctx = DefenderContext(model=chat, model_spec=spec, retry=RetryPolicy.none())
            try:
                await solve_case(d, case.view(), ctx, timeout_s=self.config.case_timeout_s)
            except RequestCollected:
                pass
            except Exception as exc:
                raise RunSetupError(f"--batch: defender {d.label} failed while its request was "
                                    f"built: {type(exc).__name__}: {exc}".splitlines()[0][:300]) from exc
            if len(chat.collected) != before + 1 or ctx.llm_calls != 1:
                raise RunSetupError(f"--batch: defender {d.label} did not make exactly one model call "
                                    "for a case (it must not be declared single_call)")
            out[_key(spec, d, case)] = chat.collected[-1]
        return out

    async def _submit(self, book: BatchBook, jobs: list[CaseJob],
                      requests: dict[CaseKey, BatchRequest]) -> list[BatchJob]:
        by_spec: dict[str, dict[str, tuple[BatchRequest, list[CaseKey]]]] = {}
        for spec, d, case in jobs:
            key = _key(spec, d, case)
            request = requests[key]
            # identical requests (e.g. context_blind's protocols) are sent once
            by_spec.setdefault(spec, {}).setdefault(request.custom_id, (request, []))[1].append(key)
        submitted: list[BatchJob] = []
        for spec, grouped in by_spec.items():
            driver = self._driver(spec)
            for chunk in driver.chunks([r for r, _ in grouped.values()]):
                job_id, state = await self._api(
                    f"submitting {len(chunk)} requests for {spec}",
                    partial(driver.submit, chunk, f"medmis {self.out.name} {spec}"), repeat=False)
                submitted.append(book.add(driver.provider, spec, job_id, state,
                                          {r.custom_id: grouped[r.custom_id][1] for r in chunk}))
                book.save(self.out)  # at once: a kill from here on never resubmits this job
                self._say(f"submitted {job_id} ({len(chunk)} requests) for {spec}")
        return submitted

    # -- the run ---------------------------------------------------------------------------------
    async def _run_claimed(self, planned: list[tuple[int, ProtocolName, str | None]], dataset: Dataset,
                           claim: ClaimedFolder) -> RunResult:
        (self.out / "traces").mkdir(exist_ok=True)
        skipped = write_invalid_rows(self.out, dataset, self.notice)
        self.write_manifest(dataset, len(planned), claim)
        records_path = self.out / "records.jsonl"
        repair_torn_tail(records_path)
        book = BatchBook.load(self.out)
        if self.cancel:
            return await self._cancel(book, records_path, skipped)
        resumed, clean_state, phases = self._resume(records_path, planned, dataset.items)
        todo = [job for phase in phases for job in phase]
        if not todo:
            return await self._nothing_to_do(records_path, resumed.records, skipped)
        new = 0
        trace_handles: dict[str, Any] = {}
        try:
            active, by_key = await self._prepare_jobs(book, todo)
            with records_path.open("a", encoding="utf-8") as rec_fh:
                new = await self._wait_and_write(book, active, by_key, rec_fh, trace_handles, clean_state)
                rec_fh.flush()
                os.fsync(rec_fh.fileno())
        except (KeyboardInterrupt, asyncio.CancelledError):
            self.stats.stopped_reason = "interrupted"
            self._finish(records_path)
            if self.notice is not None and book.open_jobs():
                self.notice("the batch jobs keep running at the provider (OUT/batches.json); re-run the "
                            "same command to collect their results, nothing is submitted twice")
            raise RunInterrupted(self.out) from None
        except BatchApiError:
            self.stats.stopped_reason = "batch API error"
            self._finish(records_path)
            raise
        finally:
            for fh in trace_handles.values():
                fh.close()
            await self.aclose()
        return RunResult(self.out, self._finish(records_path), new, self.stats, skipped_rows=skipped,
                         outcome=self.outcome)

    async def _prepare_jobs(self, book: BatchBook, todo: list[CaseJob]) -> tuple[list[BatchJob], dict[CaseKey, CaseJob]]:
        """Build every pending case's request; find the stored jobs that hold them and submit
        the rest. Returns the jobs to wait on and the pending cases by key."""
        requests = await self._collect(todo)
        self._say(f"{len(todo)} case(s) to answer, {len({r.custom_id for r in requests.values()})} "
                  "distinct request(s)")
        waiting = book.waiting_for({k: r.custom_id for k, r in requests.items()})
        active = list({id(j): j for j in waiting.values()}.values())
        pairs = {(spec, d.label) for spec in self.config.models for d in self.defenders}
        for job in book.open_jobs():
            # a job of this run's models and defenders that answers no pending case any more
            # (its cases are recorded, or their requests changed) has nothing left to give
            mine = any((k[0], k[1]) in pairs for cid in job.requests for k in job.keys(cid))
            if mine and all(job is not a for a in active):
                job.collected = True
        fresh = [j for j in todo if _key(*j) not in waiting]
        if waiting:
            self._say(f"{len(todo) - len(fresh)} case(s) wait on stored batch jobs (not resubmitted)")
        active += await self._submit(book, fresh, requests)
        book.save(self.out)
        return active, {_key(*j): j for j in todo}

    async def _wait_and_write(self, book: BatchBook, active: list[BatchJob], by_key: dict[CaseKey, CaseJob],
                              rec_fh: Any, trace_handles: dict[str, Any],
                              clean_state: dict[tuple[str, str, str], bool]) -> int:
        new = 0
        while True:
            open_jobs = [j for j in active if not j.collected]
            if not open_jobs:
                return new
            statuses: dict[str, JobStatus] = {}
            for job in open_jobs:
                if not job.ended:
                    driver = self._driver(job.model)
                    status = await self._api(f"polling {job.job_id}", partial(driver.status, job.job_id))
                    statuses[job.job_id] = status
                    job.state, job.ended = status.state, status.ended
                    book.save(self.out)
                if job.ended:
                    new += await self._write_job(job, by_key, rec_fh, trace_handles, clean_state)
                    job.collected = True
                    book.save(self.out)
            still = [j for j in active if not j.collected]
            if still:
                line = "; ".join(f"{j.job_id} {statuses[j.job_id].describe() if j.job_id in statuses else j.state}"
                                 for j in still)
                self._say(f"waiting on {len(still)} job(s): {line}; next poll in {self.config.batch_poll_s:g} s")
                await asyncio.sleep(self.config.batch_poll_s)

    async def _write_job(self, job: BatchJob, by_key: dict[CaseKey, CaseJob], rec_fh: Any,
                         trace_handles: dict[str, Any], clean_state: dict[tuple[str, str, str], bool]) -> int:
        """Pass 2 for one ended job: its cases through the ordinary case path, answered from
        the job's results."""
        order = list(job.requests)
        jobs = [by_key[k] for cid in order for k in job.keys(cid) if k in by_key]
        if not jobs:
            return 0
        driver = self._driver(job.model)
        results = await self._api(f"reading the results of {job.job_id}", partial(driver.results, job.job_id, order))
        real = self._pool.raw(job.model)
        answerer = BatchChat(real=real, results=results)
        interactive, retry = self._pool, self.retry
        # the harness's own case path, with the answers of this job and no retries (a batch
        # answer is what it is; asking again would give the same)
        self._pool = ModelPool(lambda spec: answerer, ModelOptions(), cache_mode="live", cache_dir=self.out)
        self.retry = RetryPolicy.none()
        self._answering = job.job_id
        jobs.sort(key=lambda j: j[2].protocol != "clean")  # clean first, as the harness does
        progress = RunProgress(len(jobs), enabled=self.config.progress)
        try:
            loop = CaseLoop(self, jobs, rec_fh, clean_state, trace_handles=trace_handles)
            written = await loop.run(lambda: progress)
        finally:
            progress.close()
            self._pool, self.retry, self._answering = interactive, retry, None
        self._say(f"{job.job_id} {job.state}: {written} record(s) written")
        return written

    async def _cancel(self, book: BatchBook, records_path: Path, skipped: int) -> RunResult:
        open_jobs = [j for j in book.open_jobs() if not j.ended]
        for job in open_jobs:
            driver = self._driver(job.model)
            await self._api(f"cancelling {job.job_id}", partial(driver.cancel, job.job_id))
            job.state = "cancelling"
            book.save(self.out)
            self._say(f"cancelled {job.job_id}")
        if not open_jobs:
            self._say("no unfinished batch job to cancel")
        await self.aclose()
        self.stats.stopped_reason = "batch jobs cancelled"
        return RunResult(self.out, self._finish(records_path), 0, self.stats, skipped_rows=skipped,
                         outcome=self.outcome)
