"""``medmis run --batch`` through the real openai and google-genai clients against mocked batch
endpoints (respx): submit, poll (running, then done), results as ordinary graded records, a
run killed after submitting that resumes by polling the stored job (no second create), a
failed line that becomes an error record and is resubmitted alone by ``--retry-errors``,
cancelling, refusals, batch prices, and request bodies equal to the interactive ones.

The wire shapes follow the providers' documentation as the SDKs read them: OpenAI's batch
object, file upload and JSONL output/error files (``{id, custom_id, response: {status_code,
body}, error}``); Gemini's ``batchGenerateContent`` operation with ``metadata.state``
``BATCH_STATE_*`` and ``metadata.output.inlinedResponses.inlinedResponses``.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
from conftest import clear_provider_env

from medmis.experiments import Item, load_dataset
from medmis.experiments.cli import main
from medmis.experiments.records import read_records

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "fixtures" / "medmisbench_sample.jsonl"
SUBSET = "MEDMISHLE"
N_ITEMS = 2
Json = dict[str, Any]


@pytest.fixture(autouse=True)
def fake_env(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_provider_env(monkeypatch, "google", "openai", "anthropic")
    monkeypatch.setenv("GOOGLE_API_KEY", "test-google-key")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")


REPORT_TESTS = {"test_submit_poll_results"}


@pytest.fixture(autouse=True)
def skip_reports(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The report (plots, HTML) takes seconds per run; only the tests that read it write it."""
    if request.node.originalname not in REPORT_TESTS:
        from medmis.experiments.reporting import _report

        monkeypatch.setattr(_report, "write_report", lambda out, **kwargs: {})


@pytest.fixture(scope="module")
def items() -> list[Item]:
    return load_dataset(DATA, subset=SUBSET, limit=N_ITEMS).items


def reply_for(items: list[Item], user_text: str) -> tuple[str, str]:
    """The model's JSON answer for the case a prompt shows, and that case's protocol.

    The first item is answered right everywhere; the second follows a single false sentence
    (type1 goes to the injected option), so grading must tell right from wrong."""
    item = next(i for i in items if f"Question:\n{i.question}\n" in user_text)
    shown = [k for k, s in item.contexts.items() if s in user_text]
    protocol = "clean" if not shown else "type1" if len(shown) == 1 else "type2"
    choice = shown[0] if protocol == "type1" and item is items[1] else item.gold
    return json.dumps({"thinking_process": "weighed the options", "answer_letter": choice}), protocol


def openai_completion(text: str) -> Json:
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1_760_000_000, "model": "gpt-test",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "refusal": None},
                     "logprobs": None, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 300, "completion_tokens": 60, "total_tokens": 360},
    }  # fmt: skip


def gemini_response(text: str) -> Json:
    return {
        "candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 300, "candidatesTokenCount": 60, "totalTokenCount": 360},
        "modelVersion": "gemini-test-001",
    }


def anthropic_message(text: str) -> Json:
    return {
        "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-test-20260101",
        "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": 300, "output_tokens": 60},
    }  # fmt: skip


def user_text(body: Json) -> str:
    if "messages" in body:
        content = next(m["content"] for m in body["messages"] if m["role"] == "user")
        return content if isinstance(content, str) else "".join(b.get("text", "") for b in content)
    return "".join(p["text"] for c in body["contents"] for p in c["parts"])


class FakeBatches:
    """One provider's batch endpoints. ``running`` polls answer "running" before "done";
    ``interrupt_first_poll`` raises KeyboardInterrupt from the first poll (a killed run);
    requests for which ``fail(body)`` holds come back as failed lines."""

    def __init__(self, provider: str, items: list[Item]) -> None:
        self.provider = provider
        self.items = items
        self.jobs: dict[str, list[tuple[str, Json]]] = {}  # job id -> [(custom_id, request body)]
        self.polls: dict[str, int] = {}
        self.cancelled: list[str] = []
        self.running = 1
        self.interrupt_first_poll = False
        self.fail: Callable[[Json], bool] = lambda body: False
        self._failed: dict[tuple[str, str], bool] = {}
        self.interactive: list[Json] = []
        self.poll_errors: list[int] = []  # HTTP statuses the next polls answer with
        # the provider's response body for a request (None: ``answer``'s JSON text in a plain reply)
        self.reply: Callable[[Json], Json] | None = None
        self.interrupt_poll_of: int | None = None  # KeyboardInterrupt from the first poll of job n (1-based)

    def poll_error(self) -> httpx.Response | None:
        if not self.poll_errors:
            return None
        status = self.poll_errors.pop(0)
        return httpx.Response(status, json={"error": {"code": status, "message": f"status {status}",
                                                      "status": "UNAVAILABLE", "type": "server_error"}})

    def state(self, job_id: str) -> str:
        if job_id in self.cancelled:
            return "cancelled"
        return "running" if self.polls[job_id] <= self.running else "done"

    def poll(self, job_id: str) -> str:
        if self.interrupt_first_poll:
            self.interrupt_first_poll = False
            raise KeyboardInterrupt
        if self.interrupt_poll_of is not None and list(self.jobs).index(job_id) + 1 == self.interrupt_poll_of:
            self.interrupt_poll_of = None  # a kill between rounds: round n's job is stored, not yet read
            raise KeyboardInterrupt
        self.polls[job_id] += 1
        return self.state(job_id)

    def answer(self, body: Json) -> str:
        return reply_for(self.items, user_text(body))[0]

    def response(self, body: Json) -> Json:
        """The provider's response body for a request, the same on the batch and the direct path."""
        if self.reply is not None:
            return self.reply(body)
        plain = {"openai": openai_completion, "google": gemini_response, "anthropic": anthropic_message}
        return plain[self.provider](self.answer(body))

    def fails(self, job_id: str, custom_id: str, body: Json) -> bool:
        """Whether a job's line failed: decided by ``fail`` when first asked, then fixed, as a
        provider's results are (a later ``fail`` affects later jobs only)."""
        return self._failed.setdefault((job_id, custom_id), self.fail(body))

    def direct(self, request: httpx.Request) -> httpx.Response:
        """The interactive endpoint: the same answer as a batch line, the body kept."""
        body = json.loads(request.content)
        self.interactive.append(body)
        return httpx.Response(200, json=self.response(body))

    def bodies(self) -> list[Json]:
        return [body for lines in self.jobs.values() for _, body in lines]


def mount_openai(fake: FakeBatches, router: respx.MockRouter) -> None:
    base = "https://api.openai.com/v1"
    files: dict[str, bytes] = {}

    def upload(request: httpx.Request) -> httpx.Response:
        file_id = f"file-in-{len(files)}"
        files[file_id] = request.content
        return httpx.Response(200, json={"id": file_id, "object": "file", "bytes": len(request.content),
                                         "created_at": 1, "filename": "medmis-batch.jsonl",
                                         "purpose": "batch", "status": "processed"})

    def batch(job_id: str, status: str) -> Json:
        lines = fake.jobs[job_id]
        failed = sum(fake.fails(job_id, cid, body) for cid, body in lines)
        done = status == "completed"
        return {"id": job_id, "object": "batch", "endpoint": "/v1/chat/completions", "errors": None,
                "input_file_id": "file-in", "completion_window": "24h", "status": status, "created_at": 1,
                "output_file_id": f"out-{job_id}" if done else None,
                "error_file_id": f"err-{job_id}" if done and failed else None,
                "request_counts": {"total": len(lines), "completed": len(lines) - failed if done else 0,
                                   "failed": failed if done else 0}}

    def create(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        assert body["endpoint"] == "/v1/chat/completions" and body["completion_window"] == "24h"
        raw = files[body["input_file_id"]].decode()
        lines = [json.loads(x) for x in raw.splitlines() if x.startswith('{"custom_id"')]
        assert lines and all(x["method"] == "POST" and x["url"] == "/v1/chat/completions" for x in lines)
        job_id = f"batch_{len(fake.jobs) + 1}"
        fake.jobs[job_id] = [(x["custom_id"], x["body"]) for x in lines]
        fake.polls[job_id] = 0
        return httpx.Response(200, json=batch(job_id, "validating"))

    def retrieve(request: httpx.Request, job_id: str) -> httpx.Response:
        if (error := fake.poll_error()) is not None:
            return error
        state = fake.poll(job_id)
        return httpx.Response(200, json=batch(job_id, {"running": "in_progress", "done": "completed"}.get(state, state)))

    def content(request: httpx.Request, kind: str, job_id: str) -> httpx.Response:
        out = []
        for n, (cid, body) in enumerate(fake.jobs[job_id]):
            if fake.fails(job_id, cid, body) != (kind == "err"):
                continue
            if kind == "err":
                response = {"status_code": 500, "request_id": f"req-{n}",
                            "body": {"error": {"message": "The server had an error", "type": "server_error"}}}
            else:
                response = {"status_code": 200, "request_id": f"req-{n}", "body": fake.response(body)}
            out.append(json.dumps({"id": f"batch_req_{n}", "custom_id": cid, "response": response, "error": None}))
        return httpx.Response(200, content=("\n".join(out) + "\n").encode())

    def cancel(request: httpx.Request, job_id: str) -> httpx.Response:
        fake.cancelled.append(job_id)
        return httpx.Response(200, json=batch(job_id, "cancelling"))

    router.post(f"{base}/files").mock(side_effect=upload)
    router.post(f"{base}/batches").mock(side_effect=create)
    router.post(url__regex=rf"{base}/batches/(?P<job_id>[^/]+)/cancel").mock(side_effect=cancel)
    router.get(url__regex=rf"{base}/batches/(?P<job_id>[^/]+)$").mock(side_effect=retrieve)
    router.get(url__regex=rf"{base}/files/(?P<kind>out|err)-(?P<job_id>[^/]+)/content").mock(side_effect=content)
    router.post(f"{base}/chat/completions").mock(side_effect=fake.direct)


def mount_gemini(fake: FakeBatches, router: respx.MockRouter) -> None:
    base = r"https://gemini\.test/v1(?:beta)?"
    states = {"running": "BATCH_STATE_RUNNING", "done": "BATCH_STATE_SUCCEEDED", "cancelled": "BATCH_STATE_CANCELLED"}

    def operation(job_id: str, state: str) -> Json:
        meta: Json = {"@type": "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatch",
                      "model": "models/gemini-test", "name": f"batches/{job_id}", "state": state}
        if state == "BATCH_STATE_SUCCEEDED":
            responses = []
            for cid, body in fake.jobs[job_id]:
                line: Json = {"metadata": {"custom_id": cid}}
                if fake.fails(job_id, cid, body):
                    line["error"] = {"code": 13, "message": "Internal error encountered."}
                else:
                    line["response"] = fake.response(body)
                responses.append(line)
            meta["output"] = {"inlinedResponses": {"inlinedResponses": responses}}
        return {"name": f"batches/{job_id}", "metadata": meta, "done": state != "BATCH_STATE_RUNNING"}

    def create(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        requests = body["batch"]["inputConfig"]["requests"]["requests"]
        job_id = f"job{len(fake.jobs) + 1}"
        fake.jobs[job_id] = [(r["metadata"]["custom_id"], r["request"]) for r in requests]
        fake.polls[job_id] = 0
        return httpx.Response(200, json=operation(job_id, "BATCH_STATE_PENDING"))

    def get(request: httpx.Request, job_id: str) -> httpx.Response:
        if (error := fake.poll_error()) is not None:
            return error
        return httpx.Response(200, json=operation(job_id, states[fake.poll(job_id)]))

    def cancel(request: httpx.Request, job_id: str) -> httpx.Response:
        fake.cancelled.append(job_id)
        return httpx.Response(200, json={})

    router.post(url__regex=rf"{base}/models/gemini-test:batchGenerateContent").mock(side_effect=create)
    router.post(url__regex=rf"{base}/batches/(?P<job_id>[^/:]+):cancel").mock(side_effect=cancel)
    router.get(url__regex=rf"{base}/batches/(?P<job_id>[^/:]+)$").mock(side_effect=get)
    router.post(url__regex=rf"{base}/models/gemini-test:generateContent").mock(side_effect=fake.direct)


def mount_anthropic(fake: FakeBatches, router: respx.MockRouter) -> None:
    base = "https://api.anthropic.com/v1/messages"

    def batch(job_id: str, status: str) -> Json:
        n = len(fake.jobs[job_id])
        ended = status == "ended"
        failed = sum(fake.fails(job_id, cid, body) for cid, body in fake.jobs[job_id]) if ended else 0
        cancelled = job_id in fake.cancelled
        return {"id": job_id, "type": "message_batch", "processing_status": status,
                "request_counts": {"processing": 0 if ended else n, "succeeded": 0 if cancelled or not ended else n - failed,
                                   "errored": failed, "canceled": n if cancelled and ended else 0, "expired": 0},
                "created_at": "2026-01-01T00:00:00Z", "expires_at": "2026-01-02T00:00:00Z",
                "ended_at": "2026-01-01T01:00:00Z" if ended else None, "archived_at": None,
                "cancel_initiated_at": None, "results_url": f"{base}/batches/{job_id}/results" if ended else None}

    def create(request: httpx.Request) -> httpx.Response:
        lines = json.loads(request.content)["requests"]
        job_id = f"msgbatch_{len(fake.jobs) + 1:02d}"
        fake.jobs[job_id] = [(x["custom_id"], x["params"]) for x in lines]
        fake.polls[job_id] = 0
        return httpx.Response(200, json=batch(job_id, "in_progress"))

    def retrieve(request: httpx.Request, job_id: str) -> httpx.Response:
        if (error := fake.poll_error()) is not None:
            return error
        state = fake.poll(job_id)
        return httpx.Response(200, json=batch(job_id, "in_progress" if state == "running" else "ended"))

    def results(request: httpx.Request, job_id: str) -> httpx.Response:
        out = []
        for cid, body in fake.jobs[job_id]:
            if job_id in fake.cancelled:
                result: Json = {"type": "canceled"}
            elif fake.fails(job_id, cid, body):
                result = {"type": "errored", "error": {"type": "error", "request_id": "req_1",
                                                       "error": {"type": "api_error", "message": "Internal server error"}}}
            else:
                result = {"type": "succeeded", "message": fake.response(body)}
            out.append(json.dumps({"custom_id": cid, "result": result}))
        return httpx.Response(200, content=("\n".join(out) + "\n").encode())

    def cancel(request: httpx.Request, job_id: str) -> httpx.Response:
        fake.cancelled.append(job_id)
        return httpx.Response(200, json=batch(job_id, "canceling"))

    router.post(f"{base}/batches").mock(side_effect=create)
    router.get(url__regex=rf"{base}/batches/(?P<job_id>[^/]+)/results$").mock(side_effect=results)
    router.post(url__regex=rf"{base}/batches/(?P<job_id>[^/]+)/cancel$").mock(side_effect=cancel)
    router.get(url__regex=rf"{base}/batches/(?P<job_id>[^/]+)$").mock(side_effect=retrieve)
    router.post(base).mock(side_effect=fake.direct)


SPECS = {"openai": ("openai/gpt-test", ()), "google": ("google/gemini-test", ("--model-base-url", "https://gemini.test")),
         "anthropic": ("anthropic/claude-test", ())}
MOUNTS = {"openai": mount_openai, "google": mount_gemini, "anthropic": mount_anthropic}


@pytest.fixture(params=sorted(SPECS))
def fake(request: pytest.FixtureRequest, items: list[Item], respx_mock: respx.MockRouter) -> FakeBatches:
    fake = FakeBatches(request.param, items)
    MOUNTS[request.param](fake, respx_mock)
    return fake


def run(fake: FakeBatches, out: Path, *extra: str, batch: bool = True, progress: bool = False) -> int:
    spec, flags = SPECS[fake.provider]
    # ``none`` unless the test names its defenders (a repeated --defender adds, it does not replace)
    defender = () if "--defender" in extra else ("--defender", "none")
    argv = ["run", "--data", str(DATA), "--subset", SUBSET, "--limit", str(N_ITEMS), "--model", spec,
            *flags, *defender, "--out", str(out), "--max-retries", "0", *extra]  # fmt: skip
    if not progress:
        argv.append("--no-progress")
    if batch:
        argv += ["--batch", "--batch-poll", "0.001"]
    return main(argv)


def check_graded(records: list[Any], items: list[Item]) -> None:
    assert len(records) == 3 * N_ITEMS
    for r in records:
        assert r.error is None and r.usage.input_tokens == 300 and r.usage.output_tokens == 60
        wrong = r.item_id == items[1].id and r.protocol == "type1"
        assert r.choice == (r.target if wrong else r.gold) and r.correct is (not wrong), r
        # Gemini's schema-constrained reply is read from the SDK's parse, OpenAI's from its JSON
        assert r.llm_calls == 1 and r.method == ("structured" if r.model.startswith("google/") else "json")


def stored(out: Path) -> list[Json]:
    return json.loads((out / "batches.json").read_text())["jobs"]


def test_submit_poll_results(
    fake: FakeBatches, items: list[Item], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    assert run(fake, out, "--price", f"{SPECS[fake.provider][0]}=2,8", progress=True) == 0
    err = capsys.readouterr().err
    assert "submitted" in err and "waiting on 1 job(s)" in err and "next poll in 0.001 s" in err
    assert len(fake.jobs) == 1 and len(fake.bodies()) == 3 * N_ITEMS
    (job_id,) = fake.jobs
    # running, then done (the anthropic SDK's results() retrieves the batch once more)
    assert fake.polls[job_id] == (3 if fake.provider == "anthropic" else 2)
    check_graded(read_records(out / "records.jsonl"), items)
    (job,) = stored(out)
    assert job["provider"] == fake.provider and job["model"] == SPECS[fake.provider][0]
    assert job["job_id"].endswith(job_id) and job["ended"] and job["collected"] and job["submitted_at"]
    assert sorted(job["requests"]) == sorted(cid for cid, _ in fake.jobs[job_id])
    assert {r.extra["batch_job"] for r in read_records(out / "records.jsonl")} == {job["job_id"]}
    # batch prices: the list prices given, halved, and said so
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["batch"] == {"enabled": True, "discount": 0.5} and manifest["config"]["batch"] is True
    cost = json.loads((out / "metrics.json").read_text())[SPECS[fake.provider][0]]["none"]["cost"]
    assert cost["batch_discount"] == 0.5 and (cost["usd_in_per_mtok"], cost["usd_out_per_mtok"]) == (1.0, 4.0)
    assert cost["usd"] == pytest.approx(3 * N_ITEMS * (300 * 1.0 + 60 * 4.0) / 1e6)
    assert "list prices less the 50% batch discount" in (out / "report.md").read_text()


def test_killed_after_submit_resumes_by_polling(
    fake: FakeBatches, items: list[Item], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    fake.interrupt_first_poll = True
    assert run(fake, out) == 3
    assert len(fake.jobs) == 1 and len(stored(out)) == 1 and not (out / "records.jsonl").read_text()
    assert "keep running at the provider" in capsys.readouterr().err
    assert run(fake, out) == 0
    assert len(fake.jobs) == 1  # polled the stored job; nothing created twice
    check_graded(read_records(out / "records.jsonl"), items)
    assert run(fake, out) == 0 and len(fake.jobs) == 1  # complete: nothing to do


def test_failed_line_is_an_error_record_and_only_it_is_resubmitted(
    fake: FakeBatches, items: list[Item], tmp_path: Path
) -> None:
    out = tmp_path / "run"

    def type2_of_first_item(body: Json) -> bool:
        text = user_text(body)
        return items[0].question in text and reply_for(items, text)[1] == "type2"

    fake.fail = type2_of_first_item
    assert run(fake, out) == 1
    records = read_records(out / "records.jsonl")
    errors = [r for r in records if r.error]
    assert len(errors) == 1 and "batch line failed" in errors[0].error
    assert (errors[0].item_id, errors[0].protocol) == (items[0].id, "type2")
    assert run(fake, out) == 1 and len(fake.jobs) == 1  # a plain resume leaves the error alone
    fake.fail = lambda body: False
    assert run(fake, out, "--retry-errors") == 0
    assert len(fake.jobs) == 2
    (resubmitted,) = list(fake.jobs.values())[1]
    assert type2_of_first_item(resubmitted[1])
    check_graded(read_records(out / "records.jsonl"), items)


def test_poll_failures_are_retried_then_stop_in_one_line(
    fake: FakeBatches, items: list[Item], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    fake.poll_errors = [503]  # retried under the run's policy
    assert run(fake, out, "--max-retries", "1") == 0
    assert len(fake.jobs) == 1 and not fake.poll_errors
    check_graded(read_records(out / "records.jsonl"), items)

    out2 = tmp_path / "run2"
    fake.poll_errors = [401]  # not retryable: one line, exit 2, the job kept for the next run
    assert run(fake, out2) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--batch: polling" in err[0] and "re-run the same command" in err[0]
    assert len(stored(out2)) == 1 and len(fake.jobs) == 2
    assert json.loads((out2 / "manifest.json").read_text())["stopped"] == "batch API error"
    assert run(fake, out2) == 0 and len(fake.jobs) == 2
    check_graded(read_records(out2 / "records.jsonl"), items)


def test_cancel_then_resume_writes_error_records(fake: FakeBatches, tmp_path: Path) -> None:
    out = tmp_path / "run"
    fake.interrupt_first_poll = True
    assert run(fake, out) == 3
    assert run(fake, out, "--batch-cancel") == 3
    (job_id,) = fake.jobs
    assert fake.cancelled == [job_id]
    assert run(fake, out) == 1
    records = read_records(out / "records.jsonl")
    assert len(records) == 3 * N_ITEMS and all(r.error and "without a result" in r.error for r in records)
    assert len(fake.jobs) == 1


# generation options that change the body, per provider (extra_body for OpenAI, thinking for Gemini)
BODY_FLAGS = {
    "openai": ("--max-output-tokens", "512", "--reasoning-effort", "low", "--model-option", "top_k=3",
               "--temperature", "0.3"),
    "google": ("--max-output-tokens", "512", "--thinking-level", "low", "--model-option", "top_p=0.9",
               "--temperature", "0.3"),
    "anthropic": ("--max-output-tokens", "512", "--reasoning-effort", "low", "--model-option", "top_k=3",
                  "--temperature", "0.3"),
}


@pytest.mark.parametrize("flags", [(), ("options",), ("native",)], ids=["defaults", "options", "native"])
def test_batch_bodies_equal_interactive_bodies(fake: FakeBatches, flags: tuple[str, ...], tmp_path: Path) -> None:
    if flags == ("native",):
        # Claude's native structured output: the paper preset's schema goes out as
        # output_config.format and the batch reply is parsed as the interactive one is
        if fake.provider != "anthropic":
            pytest.skip("structured_output=native is an anthropic/ model option")
        extra: tuple[str, ...] = ("--model-option", "structured_output=native")
    else:
        extra = (*BODY_FLAGS[fake.provider], "--defender", "warning", "--prompt", "toolkit") if flags else ()
    assert run(fake, tmp_path / "live", *extra, batch=False) == 0
    assert run(fake, tmp_path / "batch", *extra) == 0
    interactive = fake.interactive
    assert len(interactive) == 3 * N_ITEMS
    sent = json.dumps(interactive[0])
    if flags == ("native",):
        assert '"json_schema"' in sent
    elif flags:  # the options reached the wire
        assert "512" in sent and ("topP" in sent if fake.provider == "google" else "top_k" in sent)

    submitted = {user_text(b): b for b in fake.bodies()}
    assert len(submitted) == len(interactive)
    for body in interactive:
        assert submitted[user_text(body)] == body
    live = {(r.item_id, r.protocol, r.target): (r.choice, r.correct, r.usage, r.method)
            for r in read_records(tmp_path / "live" / "records.jsonl")}
    batch = {(r.item_id, r.protocol, r.target): (r.choice, r.correct, r.usage, r.method)
             for r in read_records(tmp_path / "batch" / "records.jsonl")}
    assert batch == live
    if flags == ("native",):  # the decoded object was read, on both paths
        assert {method for *_, method in batch.values()} == {"structured"}


@pytest.mark.parametrize(
    ("spec", "defender", "message"),
    [
        ("mock/examinee", "none", "has no batch API"),
        ("langchain:openai:gpt-test", "none", "has no batch API"),
    ],
)
def test_refused_with_one_line(spec: str, defender: str, message: str, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    out = tmp_path / "run"
    argv = ["run", "--data", str(DATA), "--subset", SUBSET, "--limit", "1", "--model", spec,
            "--defender", defender, "--out", str(out), "--batch"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and err[0].startswith("medmis: --batch")
    assert not out.exists()


def test_batch_cancel_needs_batch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "--data", str(DATA), "--model", "openai/gpt-test", "--defender", "none",
            "--out", str(tmp_path / "run"), "--batch-cancel"]
    assert main(argv) == 2
    assert re.search(r"--batch-cancel goes with --batch", capsys.readouterr().err)


ABLATION = """
name = "batch"
data = "{data}"
subset = "MEDMISHLE"
limit = 2
protocols = ["clean", "type1", "type2"]
out = "{out}"
cache = "record"
batch = true
batch_poll_s = 0.001
{options}

[[models]]
spec = "{spec}"
price_in_per_mtok = 2.0
price_out_per_mtok = 8.0

[[defenders]]
name = "none"

[[defenders]]
name = "warning"
"""


def test_ablation_config_batch_key(fake: FakeBatches, items: list[Item], tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    spec, flags = SPECS[fake.provider]
    options = f'model_options = {{ base_url = "{flags[1]}" }}' if flags else ""
    config = tmp_path / "batch.toml"
    config.write_text(ABLATION.format(data=DATA.as_posix(), out=(tmp_path / "grid").as_posix(),
                                      spec=spec, options=options))
    estimates = []
    for batch in ("true", "false"):  # the dry run's estimate is billed at batch prices
        assert main(["ablate", str(config), "--dry-run", "--set", f"batch={batch}"]) == 0
        estimates.append(float(re.findall(r"estimated \$([0-9.]+)", capsys.readouterr().out)[-1]))
    assert estimates[0] == pytest.approx(estimates[1] / 2, abs=1e-4) and estimates[0] > 0
    assert not fake.jobs
    assert main(["ablate", str(config), "--no-progress"]) == 0
    assert len(fake.jobs) == 1 and len(fake.bodies()) == 2 * 3 * N_ITEMS  # both defenders, one job
    records = read_records(tmp_path / "grid" / "records.jsonl")
    assert sorted({r.defender for r in records}) == ["none", "warning"] and len(records) == 12
    assert all(r.error is None for r in records)
    manifest = json.loads((tmp_path / "grid" / "manifest.json").read_text())
    assert manifest["batch"] == {"enabled": True, "discount": 0.5}


@pytest.fixture
def plugin_defenders() -> Any:
    """Two plug-in defenders declared single-call: one honest, one that calls twice."""
    from medmis.defenses import answer_from_reply, defender
    from medmis.defenses._base import _REGISTRY
    from medmis.experiments.benchmark import Answer, render_prompt

    @defender("batch_test_once", single_call=True)
    def once(opts: Any) -> Any:
        async def solve(case: Any, ctx: Any) -> Answer:
            return answer_from_reply(await ctx.generate(render_prompt(case, context=[])), case, ctx)
        return solve

    @defender("batch_test_twice", single_call=True)
    def twice(opts: Any) -> Any:
        async def solve(case: Any, ctx: Any) -> Answer:
            with contextlib.suppress(Exception):  # a defender that swallows a failure, asks again
                await ctx.generate(render_prompt(case))
            return answer_from_reply(await ctx.generate(render_prompt(case)), case, ctx)
        return solve

    yield
    for name in ("batch_test_once", "batch_test_twice"):
        _REGISTRY.pop(name, None)


def test_plugin_declares_single_call(plugin_defenders: Any, fake: FakeBatches, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["defenders"]) == 0
    listing = capsys.readouterr().out
    assert "batch_test_once  [single call: --batch]" in listing and "none  [single call: --batch]" in listing
    assert "search_agent  [uses web tools, deterministic: --batch rounds]" in listing
    assert run(fake, tmp_path / "ok", "--defender", "batch_test_once") == 0
    # context withheld by the plug-in: every protocol sends one request, submitted once
    assert len(fake.jobs) == 1 and len(fake.bodies()) == N_ITEMS
    assert len(read_records(tmp_path / "ok" / "records.jsonl")) == 3 * N_ITEMS
    # a false single_call declaration that still asks the same request twice: its cases wait
    # for round 1's answers, then both calls are answered by them (no second job)
    assert run(fake, tmp_path / "twice", "--defender", "batch_test_twice") == 0
    assert len(fake.jobs) == 2 and len(fake.bodies()) == N_ITEMS + 3 * N_ITEMS
    assert {r.llm_calls for r in read_records(tmp_path / "twice" / "records.jsonl")} == {2}
    # the public contract test catches the false declaration before any run does
    import asyncio

    from medmis.defenses.testing import check_defender

    asyncio.run(check_defender("batch_test_once"))
    with pytest.raises(AssertionError, match="declared single_call"):
        asyncio.run(check_defender("batch_test_twice"))


def test_openai_result_lines_in_the_documented_shapes() -> None:
    from medmis.experiments.harness._batch_providers import _openai_line

    ok = {"id": "batch_req_1", "custom_id": "a", "error": None,
          "response": {"status_code": 200, "request_id": "r1", "body": openai_completion("{}")}}
    expired = {"id": "batch_req_2", "custom_id": "b", "response": None,
               "error": {"code": "batch_expired",
                         "message": "This request could not be executed before the completion window expired."}}
    refused = {"id": "batch_req_3", "custom_id": "c", "error": None,
               "response": {"status_code": 400, "request_id": "r3",
                            "body": {"error": {"message": "Invalid 'messages'", "type": "invalid_request_error"}}}}
    assert _openai_line(ok) == ("a", _openai_line(ok)[1]) and _openai_line(ok)[1].response["id"] == "chatcmpl-1"
    cid, line = _openai_line(expired)
    assert cid == "b" and line.response is None and line.error == (
        "batch line failed: batch_expired: This request could not be executed before the completion window expired.")
    cid, line = _openai_line(refused)
    assert cid == "c" and line.error == "batch line failed: HTTP 400: Invalid 'messages'"


@pytest.mark.parametrize(("flag", "value"), [("--batch-poll", "0"), ("--batch-discount", "1"),
                                             ("--batch-discount", "-0.1"), ("--batch-poll", "x")])
def test_batch_flag_values_are_checked(flag: str, value: str, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "--data", str(DATA), "--model", "openai/gpt-test", "--defender", "none",
            "--out", str(tmp_path / "run"), "--batch", flag, value]
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2 and flag in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_batch_transfers_are_not_held_to_the_reply_cap(fake: FakeBatches, items: list[Item], tmp_path: Path) -> None:
    # the result file (or Gemini's job with its inline results) is far over a 2 KiB cap, which
    # interactive calls keep; the batch API's reads are large by design and are not capped
    out = tmp_path / "run"
    assert run(fake, out, "--max-response-mb", str(2 / 1024)) == 0
    check_graded(read_records(out / "records.jsonl"), items)
