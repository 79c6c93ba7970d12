"""``medmis run --batch``: every case's model calls answered through provider batch jobs, in rounds.

Round r runs every pending case's defender through the harness's own case path with a
:class:`~._batch_model.BatchChat` in place of each model: a call whose request (the exact body
the interactive adapter would send, keyed by its hash) has a result from an earlier round's
job is answered with it; the first call without one is *collected* and the case stops for
this round (a defender that runs calls in parallel may collect a few). A case that finishes
with every call answered is written as an ordinary record (grading, traces, usage summed over
all its calls, hence over the rounds) in the round it completes. The collected requests of all
cases form the round's batch job(s), one per model spec (a role model named by a defender
option, e.g. ``planner_model``, has its own); when they have ended, the next round starts.
A single-call defender needs one round.

This works for a defender whose requests follow from the case, its options, earlier replies
and tool results alone (declared ``single_call`` or ``deterministic``): each round replays the
same calls and reaches the same first unknown request. Web tool calls between model calls go
through the run's record store (``--cache live`` becomes ``record`` for a batch run with a
tool-using defender), so a round reads the pages and results the first round read instead of
fetching them again (and getting other ones).

Jobs are stored in ``OUT/batches.json`` right after each submission, with their round. A run
stopped while it waits (Ctrl-C, a kill) leaves its jobs running at the provider; the same
command reads the ended jobs' results back from the provider, replays the cases up to where
they stopped, waits on the stored jobs that still run and submits only requests no stored job
holds: it resumes at the next round and never submits a stored request a second time.
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
from medmis.defenses import Defender
from medmis.experiments.benchmark import Case, Dataset, ProtocolName
from medmis.experiments.records import repair_torn_tail
from medmis.tools import bulk_transfers, redact

from ._batch_model import (
    BATCH_FAMILIES,
    BatchChat,
    BatchRequest,
    LineResult,
    collecting,
    current_calls,
)
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

BATCH_PROVIDERS = BATCH_FAMILIES
MAX_ROUNDS = 100
"""Rounds after which cases that still ask new requests stop the run (a defender whose
requests are not what it declared: they change from one round to the next)."""

T = TypeVar("T")


def role_specs(d: Defender) -> list[str]:
    """Model specs a defender's options name for a role (``planner_model``, ``verifier_model``, ...)."""
    opts = d.options.model_dump()
    return [v for k, v in opts.items() if k.endswith("_model") and isinstance(v, str) and v]


def check_batchable(models: list[str], defenders: list[Defender], cache: str) -> None:
    """Refuse, in one line, what a batch run cannot do.

    Raises:
        RunSetupError: A model (or a role model a defender option names) whose provider has no
            batch API here; a defender declared neither ``single_call`` nor ``deterministic``
            (its requests could change between rounds, so an earlier round's answers would not
            fit the calls it makes next); or ``--cache replay`` (a batch run submits its
            requests; web tools still use the store in the other modes).
    """
    for spec in [*models, *(s for d in defenders for s in role_specs(d))]:
        try:
            provider, _ = parse_spec(spec)
        except ValueError as exc:
            raise RunSetupError(f"--model {spec}: {exc}") from None
        if provider not in BATCH_PROVIDERS:
            raise RunSetupError(f"--batch: {spec} has no batch API here (batch providers: "
                                f"{', '.join(p + '/' for p in BATCH_PROVIDERS)})")
    loose = [d.label for d in defenders if not (d.single_call or d.deterministic)]
    if loose:
        raise RunSetupError(f"--batch: defender(s) {', '.join(loose)} are not declared deterministic: their "
                            "requests could change between rounds, so batch rounds cannot answer them "
                            "(declare single_call or deterministic; `medmis defenders` tags the batchable)")
    if cache == "replay":
        raise RunSetupError("--batch submits its requests; it cannot answer them from the store (--cache replay)")


class BatchApiError(RunSetupError):
    """A batch API call failed (after the run's retries, for the calls that are safe to
    repeat); the stored jobs stay in ``batches.json`` for the next run."""


class BatchRoundsError(RunSetupError):
    """Cases still ask new requests after :data:`MAX_ROUNDS` rounds: a defender declared
    deterministic whose requests change from one round to the next."""


def _key(spec: str, d: Defender, case: Case) -> CaseKey:
    return (spec, d.label, case.protocol, case.item.key, case.target)


class RoundLoop(CaseLoop):
    """The harness's case loop for one round: a case that collected a request writes nothing
    (it waits for the round's job); ``asked`` keeps its requests by case key."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.asked: dict[CaseKey, list[tuple[str, BatchRequest]]] = {}

    async def _case(self, index: int) -> tuple[Any, str, str] | None:
        with collecting() as calls:
            done = await super()._case(index)
        if calls.asked:
            self.asked[_key(*self.jobs[index])] = calls.asked
            return None
        return done


class BatchHarness(Harness):
    """A :class:`Harness` whose model calls go through provider batch jobs, round by round.

    Args:
        config: The run's configuration (``batch=True``; ``batch_poll_s`` between polls).
        cancel: Cancel the folder's stored, unfinished jobs instead of running; a later run
            writes their cases as error records (``--retry-errors`` submits them anew).
        **kwargs: As for :class:`Harness`.
    """

    def __init__(self, config: Any, *, cancel: bool = False, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        if self.config.cache == "live" and any(d.uses_tools for d in self.defenders):
            # every round replays a case's tool calls: through the store they return what the
            # first round read (a live search could return other pages, hence other requests)
            self.config = self.config.model_copy(update={"cache": "record"})
        self._api_retry = self.retry  # kept: the rounds turn the run's retries off for their cases
        self.cancel = cancel
        self._interactive = self._pool  # the run's models; the rounds' cases see BatchChat ones
        self._drivers: dict[str, BatchDriver] = {}
        self._known: dict[str, dict[str, LineResult]] = {}  # spec -> custom_id -> result
        self._job_of: dict[tuple[str, str], str] = {}  # (spec, custom_id) -> the job that answered it
        self._read: set[str] = set()  # jobs whose results this invocation has read

    def output_paths(self) -> tuple[list[str | Path], list[str | Path]]:
        files, folders = super().output_paths()
        return [*files, BATCHES_FILE], folders

    def check_models(self) -> None:
        # first: a provider without a batch API is refused before its SDK is even imported
        check_batchable([self.config.spec_of(m) for m in self.config.models], self.defenders, self.config.cache)
        super().check_models()

    def _driver(self, spec: str) -> BatchDriver:
        if spec not in self._drivers:
            self._drivers[spec] = driver_for(self._interactive.raw(spec))
        return self._drivers[spec]

    def _batch_model(self, spec: str) -> BatchChat:
        return BatchChat(real=self._interactive.raw(spec), spec=spec, results=self._known.setdefault(spec, {}))

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
        """The ordinary case path; the record and trace also name the batch job that answered
        the case's last call."""
        record, trace = await super().run_case(spec, defender, case)
        calls = current_calls()
        if calls is not None and calls.answered and not calls.asked:
            job = self._job_of.get(calls.answered[-1])
            if job is not None:
                record = record.model_copy(update={"extra": {**record.extra, "batch_job": job}})
                trace["batch_job"] = job
        return record, trace

    def _say(self, text: str) -> None:
        if self.config.progress:
            print(f"medmis run --batch: {text}", file=sys.stderr, flush=True)

    # -- the run ---------------------------------------------------------------------------------
    async def _run_claimed(self, planned: list[tuple[int, ProtocolName, str | None]], dataset: Dataset,
                           claim: ClaimedFolder) -> RunResult:
        self.tools()  # fail before any case runs when the tools cannot be built
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
        self._retire(book, {_key(*j) for j in todo})
        book.save(self.out)
        if not todo:
            return await self._nothing_to_do(records_path, resumed.records, skipped)
        new = 0
        trace_handles: dict[str, Any] = {}
        try:
            with records_path.open("a", encoding="utf-8") as rec_fh:
                new = await self._rounds(book, todo, rec_fh, trace_handles, clean_state)
                rec_fh.flush()
                os.fsync(rec_fh.fileno())
        except (KeyboardInterrupt, asyncio.CancelledError):
            self.stats.stopped_reason = "interrupted"
            self._finish(records_path)
            if self.notice is not None and any(not j.ended for j in book.open_jobs()):
                self.notice("the batch jobs keep running at the provider (OUT/batches.json); re-run the "
                            "same command to collect their results, nothing is submitted twice")
            raise RunInterrupted(self.out) from None
        except (BatchApiError, BatchRoundsError) as exc:
            self.stats.stopped_reason = "batch API error" if isinstance(exc, BatchApiError) else "batch rounds exhausted"
            self._finish(records_path)
            raise
        finally:
            for fh in trace_handles.values():
                fh.close()
            self._pool = self._interactive
            await self.aclose()
        return RunResult(self.out, self._finish(records_path), new, self.stats, skipped_rows=skipped,
                         outcome=self.outcome)

    def _retire(self, book: BatchBook, pending: set[CaseKey]) -> None:
        """Mark collected the open jobs of this run's models and defenders that answer no
        pending case any more (their cases are recorded): they have nothing left to give."""
        pairs = {(spec, d.label) for spec in self.config.models for d in self.defenders}
        for job in book.open_jobs():
            keys = [k for cid in job.requests for k in job.keys(cid)]
            if any((k[0], k[1]) in pairs for k in keys) and not any(k in pending for k in keys):
                job.collected = True

    async def _rounds(self, book: BatchBook, todo: list[CaseJob], rec_fh: Any, trace_handles: dict[str, Any],
                      clean_state: dict[tuple[str, str, str], bool]) -> int:
        """Rounds until every case is written (or the run stops); the records written."""
        pending_keys = {_key(*j) for j in todo}
        for job in book.jobs:
            # a resumed run: what earlier rounds answered its cases (a job collected already
            # too: a case redone by --retry-errors replays its answered rounds, not resubmits them)
            if job.ended and any(k in pending_keys for cid in job.requests for k in job.keys(cid)):
                await self._read_results(job, forget_errors=self.config.retry_errors)
        # the harness's own case path with batch models and no retries (a batch answer is
        # what it is; asking again would give the same)
        self._pool = ModelPool(self._batch_model, ModelOptions(), cache_mode="live", cache_dir=self.out)
        self.retry = RetryPolicy.none()
        new, pending, rounds = 0, todo, 0
        while pending and not self.stats.stopped_reason:
            rounds += 1
            if rounds > MAX_ROUNDS:
                raise BatchRoundsError(f"--batch: {len(pending)} case(s) still ask new requests after {MAX_ROUNDS} "
                                    "rounds: a defender's requests change from one round to the next")
            progress = RunProgress(len(pending), enabled=self.config.progress)
            loop = RoundLoop(self, pending, rec_fh, clean_state, trace_handles=trace_handles)
            try:
                new += await loop.run(lambda: progress)  # noqa: B023 - called at once
            finally:
                progress.close()
            pending = [j for j in pending if _key(*j) in loop.asked]
            if loop.written or pending:
                self._say(f"{loop.written} record(s) written; {len(pending)} case(s) wait for a request")
            if not pending or self.stats.stopped_reason:
                break
            jobs = await self._submit(book, loop.asked)
            await self._wait(book, jobs)
        self._retire(book, {_key(*j) for j in pending})
        book.save(self.out)
        return new

    async def _submit(self, book: BatchBook, asked: dict[CaseKey, list[tuple[str, BatchRequest]]]) -> list[BatchJob]:
        """The round's jobs: the stored running jobs that hold a request already (its case keys
        added), and new jobs for the rest, one or more per model spec."""
        running = book.running()
        waiting: dict[str, BatchJob] = {}
        fresh: dict[str, dict[str, tuple[BatchRequest, list[CaseKey]]]] = {}
        for key, requests in asked.items():
            for spec, request in requests:
                job = running.get((spec, request.custom_id))
                if job is not None:
                    keys = job.requests[request.custom_id]
                    if list(key) not in keys:
                        keys.append(list(key))
                    waiting[job.job_id] = job
                else:  # identical requests (e.g. context_blind's protocols) are sent once
                    entry = fresh.setdefault(spec, {}).setdefault(request.custom_id, (request, []))
                    if key not in entry[1]:
                        entry[1].append(key)
        if waiting:
            self._say(f"waiting on {len(waiting)} stored batch job(s) (not resubmitted)")
        round_no = 1 + max((j.round for j in book.open_jobs() if j.ended), default=0)
        submitted: list[BatchJob] = list(waiting.values())
        for spec, grouped in fresh.items():
            driver = self._driver(spec)
            for chunk in driver.chunks([r for r, _ in grouped.values()]):
                job_id, state = await self._api(
                    f"submitting {len(chunk)} requests for {spec}",
                    partial(driver.submit, chunk, f"medmis {self.out.name} {spec} round {round_no}"), repeat=False)
                submitted.append(book.add(driver.provider, spec, job_id, state,
                                          {r.custom_id: grouped[r.custom_id][1] for r in chunk}, round=round_no))
                book.save(self.out)  # at once: a kill from here on never resubmits this job
                self._say(f"round {round_no}: submitted {job_id} ({len(chunk)} requests) for {spec}")
        book.save(self.out)
        return submitted

    async def _wait(self, book: BatchBook, jobs: list[BatchJob]) -> None:
        """Poll ``jobs`` until each has ended, then read its results."""
        while True:
            statuses: dict[str, JobStatus] = {}
            for job in jobs:
                if not job.ended:
                    driver = self._driver(job.model)
                    status = await self._api(f"polling {job.job_id}", partial(driver.status, job.job_id))
                    statuses[job.job_id] = status
                    job.state, job.ended = status.state, status.ended
                    book.save(self.out)
                if job.ended and job.job_id not in self._read:
                    await self._read_results(job)
                    self._say(f"{job.job_id} {job.state}: results read")
            still = [j for j in jobs if not j.ended]
            if not still:
                return
            line = "; ".join(f"{j.job_id} {statuses[j.job_id].describe() if j.job_id in statuses else j.state}"
                             for j in still)
            self._say(f"waiting on {len(still)} job(s): {line}; next poll in {self.config.batch_poll_s:g} s")
            await asyncio.sleep(self.config.batch_poll_s)

    async def _read_results(self, job: BatchJob, *, forget_errors: bool = False) -> None:
        """An ended job's results into the run's known answers (``forget_errors``: leave its
        failed lines out, so ``--retry-errors`` submits them anew)."""
        driver = self._driver(job.model)
        results = await self._api(f"reading the results of {job.job_id}",
                                  partial(driver.results, job.job_id, list(job.requests)))
        known = self._known.setdefault(job.model, {})
        for cid, line in results.items():
            if forget_errors and line.error is not None:
                continue
            known[cid] = line
            self._job_of[(job.model, cid)] = job.job_id
        self._read.add(job.job_id)

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
