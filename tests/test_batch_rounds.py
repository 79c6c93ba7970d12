"""``medmis run --batch`` for multi-call defenders, round by round, over all three providers.

``search_agent`` (planner, tool-calling turns, answer) and ``claim_verify`` (split, parallel
verdicts, answer) run against mocked batch endpoints (the shapes of ``test_batch_over_http``)
whose model is ``FakeExaminee``: it answers each request from the request's own content (the
messages and tools the SDK sent, turned back into LangChain messages), never from a gold key.
The same fake answers the direct path, so a batch run must give the direct run's records and
send exactly the direct run's request bodies, however many rounds it takes; a run killed
between rounds resumes at the next round without submitting any request twice.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import respx
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from test_batch_over_http import (
    DATA,
    MOUNTS,
    SPECS,
    SUBSET,
    FakeBatches,
    Json,
    fake_env,
    skip_reports,
)
from test_defenders_over_http import (
    ai_turn,
    function_tool,
    gemini_body,
    gemini_messages,
    gemini_tools,
    openai_body,
    openai_messages,
    openai_tools,
)

from medmis.agents import message_text
from medmis.defenses.testing import FakeExaminee
from medmis.experiments import Item, load_dataset
from medmis.experiments.cli import main
from medmis.experiments.records import read_records

__all__ = ["fake_env", "skip_reports"]  # the autouse fixtures of the batch tests, used here too

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "corpus"
N_ITEMS = 1
DEFENDERS = ("search_agent", "claim_verify")


def anthropic_messages(body: Json) -> list[BaseMessage]:
    system = body.get("system")
    out: list[BaseMessage] = []
    if system:
        out.append(SystemMessage(system if isinstance(system, str) else "".join(b.get("text", "") for b in system)))
    for m in body["messages"]:
        blocks = [{"type": "text", "text": m["content"]}] if isinstance(m["content"], str) else m["content"]
        text = "".join(b.get("text", "") for b in blocks if b["type"] == "text")
        if m["role"] == "assistant":
            out.append(ai_turn(text, [(b["id"], b["name"], b["input"]) for b in blocks if b["type"] == "tool_use"]))
            continue
        for b in blocks:
            if b["type"] == "tool_result":
                content = b.get("content")
                result = content if isinstance(content, str) else "".join(c.get("text", "") for c in content or [])
                out.append(ToolMessage(result, tool_call_id=b["tool_use_id"]))
        if text:
            out.append(HumanMessage(text))
    return out


def anthropic_tools(body: Json) -> list[Json]:
    return [function_tool(t["name"], t.get("description", ""), t.get("input_schema")) for t in body.get("tools") or []]


def anthropic_body(reply: AIMessage, n_in: int, n_out: int) -> Json:
    text = message_text(reply)
    content: list[Json] = [{"type": "text", "text": text}] if text else []
    content += [{"type": "tool_use", "id": c["id"], "name": c["name"], "input": c["args"]} for c in reply.tool_calls]
    return {"id": f"msg_{n_in}", "type": "message", "role": "assistant", "model": "claude-test-20260101",
            "content": content, "stop_reason": "tool_use" if reply.tool_calls else "end_turn",
            "stop_sequence": None, "usage": {"input_tokens": n_in, "output_tokens": n_out}}


WIRES = {
    "openai": (openai_messages, openai_tools, openai_body),
    "google": (gemini_messages, gemini_tools, gemini_body),
    "anthropic": (anthropic_messages, anthropic_tools, anthropic_body),
}


def examinee_reply(provider: str, items: list[Item]) -> Any:
    """The provider's response to a request, decided by ``FakeExaminee`` from the request alone
    (the item is the one whose question the request shows; usage from the request's size)."""
    to_messages, to_tools, to_body = WIRES[provider]

    def reply(body: Json) -> Json:
        messages = to_messages(body)
        shown = "\n".join(message_text(m) for m in messages)
        item = next((i for i in items if i.question in shown), items[0])
        out = FakeExaminee(item=item, knowledge={})(messages, to_tools(body))
        answer = out if isinstance(out, AIMessage) else AIMessage(content=out)
        return to_body(answer, len(json.dumps(body, sort_keys=True)) // 4, len(message_text(answer)) // 4 + 1)

    return reply


@pytest.fixture(scope="module")
def items() -> list[Item]:
    return load_dataset(DATA, subset=SUBSET, limit=N_ITEMS).items


@pytest.fixture(params=sorted(SPECS))
def fake(request: pytest.FixtureRequest, items: list[Item], respx_mock: respx.MockRouter) -> FakeBatches:
    fake = FakeBatches(request.param, items)
    fake.reply = examinee_reply(request.param, items)
    MOUNTS[request.param](fake, respx_mock)
    return fake


def run(fake: FakeBatches, out: Path, *, batch: bool, extra: tuple[str, ...] = ()) -> int:
    spec, flags = SPECS[fake.provider]
    argv = ["run", "--data", str(DATA), "--subset", SUBSET, "--limit", str(N_ITEMS), "--model", spec, *flags,
            *(x for d in DEFENDERS for x in ("--defender", d)), "--search", "local", "--corpus-dir", str(CORPUS),
            "--out", str(out), "--max-retries", "0", "--no-progress", *extra]  # fmt: skip
    return main([*argv, "--batch", "--batch-poll", "0.001"] if batch else argv)


def answers(out: Path) -> dict[tuple[str, str, str | None], tuple[Any, ...]]:
    return {(r.defender, r.protocol, r.target): (r.choice, r.correct, r.error, r.usage, r.llm_calls, r.tool_calls)
            for r in read_records(out / "records.jsonl")}


def canonical(body: Json) -> str:
    return json.dumps(body, sort_keys=True)


def test_rounds_match_the_direct_path_and_resume_between_rounds(fake: FakeBatches, tmp_path: Path) -> None:
    assert run(fake, tmp_path / "live", batch=False) == 0
    direct = sorted(canonical(b) for b in fake.interactive)
    expected = answers(tmp_path / "live")
    assert len(expected) == 2 * 3 * N_ITEMS and all(v[2] is None for v in expected.values())
    assert max(v[4] for v in expected.values()) >= 3  # multi-call cases, so several rounds

    # killed at the first poll of round 2's job: round 1 is answered, round 2 submitted
    out = tmp_path / "batch"
    fake.interrupt_poll_of = 2
    assert run(fake, out, batch=True) == 3
    book = json.loads((out / "batches.json").read_text())["jobs"]
    assert [j["round"] for j in book] == [1, 2] and book[0]["ended"] and not book[1]["ended"]
    assert run(fake, out, batch=True) == 0

    # the direct run's answers, usage summed over every call (hence over the rounds) included
    assert answers(out) == expected
    # the direct run's requests: each sent once, in one job, whatever the round
    submitted = [cid for lines in fake.jobs.values() for cid, _ in lines]
    assert len(submitted) == len(set(submitted))
    assert sorted(canonical(b) for b in fake.bodies()) == sorted(set(direct))
    book = json.loads((out / "batches.json").read_text())["jobs"]
    rounds = [j["round"] for j in book]
    assert rounds == list(range(1, len(book) + 1)) and len(book) >= 3 and all(j["collected"] for j in book)
    assert len(fake.jobs) == len(book)  # nothing submitted that the book does not hold
    # a record names the job that answered its last call
    last = {r.extra["batch_job"] for r in read_records(out / "records.jsonl")}
    assert last <= {j["job_id"] for j in book}
    # web tool calls went through the run's store, so every round read the same results
    assert json.loads((out / "manifest.json").read_text())["config"]["cache"] == "record"
    assert run(fake, out, batch=True) == 0 and len(fake.jobs) == len(book)  # complete: nothing to do


def test_role_model_without_a_batch_api_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    argv = ["run", "--data", str(DATA), "--subset", SUBSET, "--limit", "1", "--model", "openai/gpt-test",
            "--defender", "search_agent", "--defender-option", "search_agent.planner_model=mock/examinee",
            "--out", str(out), "--batch"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "mock/examinee has no batch API" in err[0]
    assert not out.exists()


@pytest.fixture
def drifting_defender() -> Any:
    """Plug-ins whose every call asks something new (a counter): one declared deterministic
    (falsely), one that declares nothing."""
    from medmis.defenses import answer_from_reply, defender
    from medmis.defenses._base import _REGISTRY
    from medmis.experiments.benchmark import Answer, render_prompt

    asked = iter(range(10**6))

    def drift(opts: Any) -> Any:
        async def solve(case: Any, ctx: Any) -> Answer:
            prompt = render_prompt(case, preface=f"attempt {next(asked)}")
            return answer_from_reply(await ctx.generate(prompt), case, ctx)
        return solve

    defender("batch_test_drift", deterministic=True)(drift)
    defender("batch_test_undeclared")(drift)
    yield
    for name in ("batch_test_drift", "batch_test_undeclared"):
        _REGISTRY.pop(name, None)


def test_undeclared_defender_is_refused(drifting_defender: Any, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    argv = ["run", "--data", str(DATA), "--subset", SUBSET, "--limit", "1", "--model", "anthropic/claude-test",
            "--defender", "batch_test_undeclared", "--out", str(out), "--batch"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "batch_test_undeclared are not declared deterministic" in err[0]
    assert not out.exists()


def test_requests_that_change_every_round_stop_the_run(
    drifting_defender: Any, items: list[Item], respx_mock: respx.MockRouter, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    from medmis.experiments.harness import _batch

    monkeypatch.setattr(_batch, "MAX_ROUNDS", 3)
    fake = FakeBatches("openai", items)
    MOUNTS["openai"](fake, respx_mock)
    argv = ["run", "--data", str(DATA), "--subset", SUBSET, "--limit", "1", "--model", "openai/gpt-test",
            "--protocol", "clean", "--defender", "batch_test_drift", "--out", str(tmp_path / "run"),
            "--batch", "--batch-poll", "0.001", "--no-progress"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "still ask new requests after 3 rounds" in err[-1]
    assert len(fake.jobs) == 3
    assert json.loads((tmp_path / "run" / "manifest.json").read_text())["stopped"] == "batch rounds exhausted"


def test_contract_kit_catches_a_false_deterministic_declaration(drifting_defender: Any) -> None:
    import asyncio

    from medmis.defenses.testing import check_defender

    with pytest.raises(AssertionError, match="declared deterministic"):
        asyncio.run(check_defender("batch_test_drift", protocols=("clean",)))
    asyncio.run(check_defender("claim_verify", protocols=("type1",)))  # a true declaration holds


def test_retry_errors_resubmits_only_the_failed_requests(items: list[Item], respx_mock: respx.MockRouter,
                                                         tmp_path: Path) -> None:
    fake = FakeBatches("openai", items)
    fake.reply = examinee_reply("openai", items)
    MOUNTS["openai"](fake, respx_mock)
    assert run(fake, tmp_path / "live", batch=False) == 0
    expected = answers(tmp_path / "live")

    def after_a_tool(body: Json) -> bool:  # a later round's request: it carries a tool result
        return any(m["role"] == "tool" for m in body["messages"])

    out = tmp_path / "batch"
    fake.fail = after_a_tool
    assert run(fake, out, batch=True) == 1
    failed = {cid for lines in fake.jobs.values() for cid, body in lines if after_a_tool(body)}
    before = {cid for lines in fake.jobs.values() for cid, _ in lines}
    errors = [r for r in read_records(out / "records.jsonl") if r.error]
    assert failed and errors and all("batch line failed" in r.error for r in errors)

    fake.fail = lambda body: False
    n_jobs = len(fake.jobs)
    assert run(fake, out, batch=True, extra=("--retry-errors",)) == 0
    again = {cid for lines in list(fake.jobs.values())[n_jobs:] for cid, _ in lines}
    assert again & before == failed  # the answered rounds are replayed from their jobs' results
    assert answers(out) == expected
