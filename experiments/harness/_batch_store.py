"""``OUT/batches.json``: the batch jobs a run submitted, so a resumed run polls them again.

Each job keeps its provider, model spec, provider job id (OpenAI ``batch_...``, Gemini
``batches/...``, Anthropic ``msgbatch_...``), the round it was submitted in, when, its last
known state, and which case keys each request (``custom_id``, the hash of the request body)
answers. Results are not copied here: a resumed run reads an ended job's results back from
the provider (each is kept there for weeks), so the file stays small however long the answers. The file is rewritten
atomically (a temporary file, then ``os.replace``) and only by the process that holds the run
folder's lock, so a kill at any moment leaves either the old or the new list.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

BATCHES_FILE = "batches.json"

CaseKey = tuple[str, str, str, str, str | None]
"""(model, defender, protocol, item key, target): a record's key."""


class BatchJob(BaseModel):
    """One submitted batch job."""

    model_config = ConfigDict(extra="forbid")

    provider: str
    model: str
    job_id: str
    submitted_at: str
    state: str
    round: int = 1
    """The round the job was submitted in: round r holds the requests cases made once their
    first r-1 calls were answered (a single-call case needs round 1 only)."""
    ended: bool = False
    """The provider reports a final state (completed, failed, expired, cancelled)."""
    collected: bool = False
    """Every case the job answers has a record (or no longer asks for this request)."""
    requests: dict[str, list[list[str | None]]] = Field(default_factory=dict)
    """custom_id -> the case keys it answers, in submission order."""

    def keys(self, custom_id: str) -> list[CaseKey]:
        return [tuple(k) for k in self.requests.get(custom_id, [])]  # type: ignore[misc]


class BatchBook(BaseModel):
    """Every batch job of a run folder (``OUT/batches.json``)."""

    model_config = ConfigDict(extra="forbid")

    jobs: list[BatchJob] = Field(default_factory=list)

    @classmethod
    def load(cls, out: Path) -> BatchBook:
        path = out / BATCHES_FILE
        if not path.exists():
            return cls()
        return cls.model_validate_json(path.read_text(encoding="utf-8"))

    def save(self, out: Path) -> None:
        path = out / BATCHES_FILE
        tmp = path.with_name(path.name + ".tmp")
        with tmp.open("w", encoding="utf-8") as fh:
            fh.write(self.model_dump_json(indent=2) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)

    def add(self, provider: str, model: str, job_id: str, state: str,
            requests: dict[str, list[CaseKey]], round: int = 1) -> BatchJob:
        job = BatchJob(
            provider=provider, model=model, job_id=job_id, state=state, round=round,
            submitted_at=datetime.now(UTC).isoformat(timespec="seconds"),
            requests={cid: [list(k) for k in keys] for cid, keys in requests.items()},
        )
        self.jobs.append(job)
        return job

    def open_jobs(self) -> list[BatchJob]:
        return [j for j in self.jobs if not j.collected]

    def running(self) -> dict[tuple[str, str], BatchJob]:
        """The jobs still running at the provider, by (model spec, custom_id) of each request
        they hold: a request found here is waited for, never submitted again."""
        return {(job.model, cid): job for job in self.open_jobs() if not job.ended for cid in job.requests}
