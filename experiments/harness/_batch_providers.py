"""Batch jobs through the providers' own SDK clients: the OpenAI Batch API, Gemini batches and
Anthropic Message Batches.

Each driver takes the interactive chat model of the run (``OpenAIChat`` / ``GeminiChat``) and
use the SDK client it already holds, with its key, base URL and httpx transport:

* **OpenAI**: the requests are uploaded as a JSONL file (``files.create(purpose="batch")``,
  one ``{custom_id, method, url, body}`` per line), the job is ``batches.create`` on
  ``/v1/chat/completions`` with a 24 h window, polled with ``batches.retrieve``; results are
  read from ``files.content`` of ``output_file_id`` and ``error_file_id``.
* **Gemini**: the requests travel inline (``aio.batches.create(model, src=[InlinedRequest])``,
  each carrying its ``custom_id`` in ``metadata``), the job is polled with
  ``aio.batches.get`` and its results read from ``dest.inlined_responses``.
* **Anthropic**: ``messages.batches.create(requests=[{custom_id, params}])`` where ``params``
  is the Messages body the interactive call sends, polled with ``messages.batches.retrieve``
  (``processing_status`` ``ended`` is final) and its results streamed by
  ``messages.batches.results`` (JSONL, one ``{custom_id, result}`` per line: ``succeeded``
  with the ``message``, ``errored``, ``canceled`` or ``expired``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from ._batch_model import BatchRequest, LineResult

OPENAI_ENDPOINT = "/v1/chat/completions"
OPENAI_MAX_REQUESTS = 50_000  # the Batch API's limit per input file
GEMINI_MAX_INLINE_BYTES = 15_000_000  # inline requests must stay under 20 MB per job
ANTHROPIC_MAX_REQUESTS = 100_000  # Message Batches' limit per batch
ANTHROPIC_MAX_BYTES = 200_000_000  # a batch must stay under 256 MB

OPENAI_ENDED = frozenset({"completed", "failed", "expired", "cancelled"})


@dataclass(frozen=True)
class JobStatus:
    """A job's state as the provider names it, whether it is final, and progress counts."""

    state: str
    ended: bool
    done: int | None = None
    total: int | None = None

    def describe(self) -> str:
        counts = f" {self.done}/{self.total}" if self.total else ""
        return f"{self.state}{counts}"


class BatchDriver(Protocol):
    provider: str

    def chunks(self, requests: list[BatchRequest]) -> list[list[BatchRequest]]: ...
    async def submit(self, requests: list[BatchRequest], label: str) -> tuple[str, str]: ...
    async def status(self, job_id: str) -> JobStatus: ...
    async def results(self, job_id: str, order: list[str]) -> dict[str, LineResult]: ...
    async def cancel(self, job_id: str) -> None: ...


def _short(text: str) -> str:
    return " ".join(str(text).split())[:300]


class OpenAIBatches:
    """The OpenAI Batch API through the chat model's ``root_async_client``."""

    provider = "openai"

    def __init__(self, chat: Any) -> None:
        self._client = chat.root_async_client
        self._ended: dict[str, Any] = {}  # the final batch object a poll saw, read for results

    def chunks(self, requests: list[BatchRequest]) -> list[list[BatchRequest]]:
        return [requests[i:i + OPENAI_MAX_REQUESTS] for i in range(0, len(requests), OPENAI_MAX_REQUESTS)]

    async def submit(self, requests: list[BatchRequest], label: str) -> tuple[str, str]:
        lines = "".join(
            json.dumps({"custom_id": r.custom_id, "method": "POST", "url": OPENAI_ENDPOINT, "body": r.body},
                       ensure_ascii=False) + "\n"
            for r in requests
        )
        upload = await self._client.files.create(
            file=("medmis-batch.jsonl", lines.encode("utf-8"), "application/jsonl"), purpose="batch"
        )
        job = await self._client.batches.create(
            input_file_id=upload.id, endpoint=OPENAI_ENDPOINT, completion_window="24h",
            metadata={"medmis": label[:512]},
        )
        return job.id, job.status

    async def status(self, job_id: str) -> JobStatus:
        job = await self._client.batches.retrieve(job_id)
        if job.status in OPENAI_ENDED:
            self._ended[job_id] = job
        counts = job.request_counts
        return JobStatus(job.status, job.status in OPENAI_ENDED,
                         counts.completed + counts.failed if counts else None,
                         counts.total if counts else None)

    async def results(self, job_id: str, order: list[str]) -> dict[str, LineResult]:
        job = self._ended.pop(job_id, None) or await self._client.batches.retrieve(job_id)
        out: dict[str, LineResult] = {}
        for file_id in (job.output_file_id, job.error_file_id):
            if not file_id:
                continue
            content = await self._client.files.content(file_id)
            for line in content.text.splitlines():
                if line.strip():
                    custom_id, result = _openai_line(json.loads(line))
                    out[custom_id] = result
        reason = "; ".join(_short(f"{e.code}: {e.message}") for e in (job.errors.data or [])) if job.errors else ""
        for custom_id in order:
            if custom_id not in out:
                out[custom_id] = LineResult(error=f"batch job {job.status} without a result for this "
                                                  f"request{': ' + reason if reason else ''}")
        return out

    async def cancel(self, job_id: str) -> None:
        await self._client.batches.cancel(job_id)


def _openai_line(line: dict[str, Any]) -> tuple[str, LineResult]:
    custom_id = str(line["custom_id"])
    response = line.get("response") or {}
    error = line.get("error")
    status = response.get("status_code")
    body = response.get("body")
    if error is None and status == 200 and isinstance(body, dict):
        return custom_id, LineResult(response=body)
    if isinstance(error, dict):
        text = f"{error.get('code')}: {error.get('message')}"
    else:
        detail = (body or {}).get("error") if isinstance(body, dict) else None
        text = (f"HTTP {status}: {detail.get('message')}" if isinstance(detail, dict)
                else f"HTTP {status}")
    return custom_id, LineResult(error=f"batch line failed: {_short(text)}")


def _by_size(requests: list[BatchRequest], max_bytes: int, max_count: int) -> list[list[BatchRequest]]:
    """``requests`` in submission chunks under a byte size (of their bodies as JSON) and a count."""
    out: list[list[BatchRequest]] = [[]]
    size = 0
    for r in requests:
        n = len(json.dumps(r.body, ensure_ascii=False).encode("utf-8"))
        if out[-1] and (size + n > max_bytes or len(out[-1]) >= max_count):
            out.append([])
            size = 0
        out[-1].append(r)
        size += n
    return out


class GeminiBatches:
    """Gemini batch jobs through the chat model's google-genai client (``client.aio.batches``)."""

    provider = "google"

    def __init__(self, chat: Any) -> None:
        self._chat = chat
        self._ended: dict[str, Any] = {}  # the final job a poll saw (its inline results included)

    def chunks(self, requests: list[BatchRequest]) -> list[list[BatchRequest]]:
        return _by_size(requests, GEMINI_MAX_INLINE_BYTES, len(requests) or 1)

    async def submit(self, requests: list[BatchRequest], label: str) -> tuple[str, str]:
        from google.genai import types

        inlined = [
            types.InlinedRequest(contents=r.body["contents"], config=r.body["config"],
                                 metadata={"custom_id": r.custom_id})
            for r in requests
        ]
        job = await self._chat.client().aio.batches.create(
            model=self._chat.model, src=inlined, config=types.CreateBatchJobConfig(display_name=label[:128])
        )
        if not job.name:
            raise RuntimeError("gemini created a batch job without a name")
        return job.name, job.state.name if job.state else "JOB_STATE_UNSPECIFIED"

    async def status(self, job_id: str) -> JobStatus:
        job = await self._chat.client().aio.batches.get(name=job_id)
        state = job.state.name if job.state else "JOB_STATE_UNSPECIFIED"
        if job.done:
            self._ended[job_id] = job
        return JobStatus(state, job.done)

    async def results(self, job_id: str, order: list[str]) -> dict[str, LineResult]:
        job = self._ended.pop(job_id, None) or await self._chat.client().aio.batches.get(name=job_id)
        state = job.state.name if job.state else "JOB_STATE_UNSPECIFIED"
        inline = (job.dest.inlined_responses if job.dest else None) or []
        if job.dest is not None and job.dest.file_name and not inline:
            raise RuntimeError(f"gemini batch {job_id} wrote its results to a file "
                               f"({job.dest.file_name}); this toolkit submits inline jobs only")
        out: dict[str, LineResult] = {}
        for index, line in enumerate(inline):
            custom_id = (line.metadata or {}).get("custom_id") or (order[index] if index < len(order) else None)
            if custom_id is None:
                continue
            if line.error is not None or line.response is None:
                err = line.error
                text = f"{err.code}: {err.message}" if err is not None else "no response"
                out[custom_id] = LineResult(error=f"batch line failed: {_short(text)}")
            else:
                out[custom_id] = LineResult(response=line.response)
        reason = _short(f"{job.error.code}: {job.error.message}") if job.error else ""
        for custom_id in order:
            if custom_id not in out:
                out[custom_id] = LineResult(error=f"batch job {state} without a result for this "
                                                  f"request{': ' + reason if reason else ''}")
        return out

    async def cancel(self, job_id: str) -> None:
        await self._chat.client().aio.batches.cancel(name=job_id)


class AnthropicBatches:
    """Anthropic Message Batches through the chat model's SDK client (``messages.batches``)."""

    provider = "anthropic"

    def __init__(self, chat: Any) -> None:
        self._client = chat.sdk_async_client

    def chunks(self, requests: list[BatchRequest]) -> list[list[BatchRequest]]:
        return _by_size(requests, ANTHROPIC_MAX_BYTES, ANTHROPIC_MAX_REQUESTS)

    async def submit(self, requests: list[BatchRequest], label: str) -> tuple[str, str]:
        # Message Batches take no label; the job id is what batches.json keeps
        batch = await self._client.messages.batches.create(
            requests=[{"custom_id": r.custom_id, "params": r.body} for r in requests]
        )
        return batch.id, batch.processing_status

    async def status(self, job_id: str) -> JobStatus:
        batch = await self._client.messages.batches.retrieve(job_id)
        c = batch.request_counts
        done = c.succeeded + c.errored + c.canceled + c.expired
        return JobStatus(batch.processing_status, batch.processing_status == "ended", done, done + c.processing)

    async def results(self, job_id: str, order: list[str]) -> dict[str, LineResult]:
        out: dict[str, LineResult] = {}
        async for line in await self._client.messages.batches.results(job_id):
            result = line.result
            if result.type == "succeeded":
                out[line.custom_id] = LineResult(response=result.message)
            elif result.type == "errored":
                err = result.error.error
                out[line.custom_id] = LineResult(error=f"batch line failed: {_short(f'{err.type}: {err.message}')}")
            else:  # canceled, expired
                out[line.custom_id] = LineResult(error=f"batch line {result.type} without a result for this request")
        for custom_id in order:
            if custom_id not in out:
                out[custom_id] = LineResult(error="batch job ended without a result for this request")
        return out

    async def cancel(self, job_id: str) -> None:
        await self._client.messages.batches.cancel(job_id)


def driver_for(chat: Any) -> BatchDriver:
    """The batch driver for a run's chat model (``OpenAIChat``, ``GeminiChat`` or ``AnthropicChat``)."""
    family = getattr(chat, "provider_family", None)
    if family == "openai":
        return OpenAIBatches(chat)
    if family == "google":
        return GeminiBatches(chat)
    if family == "anthropic":
        return AnthropicBatches(chat)
    raise ValueError(f"no batch API for provider family {family!r}")
