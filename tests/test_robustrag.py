"""``robustrag`` (Xiang et al. 2024, arXiv 2405.15556): the majority vote, its certificate checked
by brute force, the defender's passages and abstentions, and its requests over a real client."""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
from conftest import clear_provider_env
from fakes import FakeExaminee, FakeToolset, toy_case
from langchain_core.messages import BaseMessage, HumanMessage

from medmis.agents import ModelOptions, ScriptedChatModel, load_model
from medmis.agents._reading import read
from medmis.defenses import DefenderContext, create_defender, defender_prompts, get_spec
from medmis.experiments import Item
from medmis.experiments.benchmark import render_prompt
from medmis.experiments.cli import main
from medmis.graphs import certified_k, is_certified, majority_vote
from medmis.graphs._robustrag import NO_INFO, isolated_instruction
from medmis.tools import ReplayMissError, ToolError

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "fixtures" / "medmisbench_sample.jsonl"
OPTIONS = ("A", "B", "C")
BALLOT = (*OPTIONS, None)  # what one isolated answer can be: an option or an abstention


# --- brute force: every replacement / injection of up to k' passages ----------------------------


def ballots(max_n: int) -> Iterator[tuple[str | None, ...]]:
    for n in range(1, max_n + 1):
        yield from itertools.product(BALLOT, repeat=n)


def replacements(votes: Sequence[str | None], k: int) -> Iterator[list[str | None]]:
    """Every vote list an attacker controlling at most ``k`` of the passages can produce."""
    for j in range(min(k, len(votes)) + 1):
        for where in itertools.combinations(range(len(votes)), j):
            for new in itertools.product(BALLOT, repeat=j):
                out = list(votes)
                for i, v in zip(where, new, strict=True):
                    out[i] = v
                yield out


def injections(votes: Sequence[str | None], k: int, top_k: int) -> Iterator[list[str | None]]:
    """Every list after injecting at most ``k`` passages at any ranks into ``top_k`` slots:
    the last benign passages fall out when the slots are full."""
    for j in range(k + 1):
        kept = list(votes[: max(0, min(len(votes), top_k - j))])
        for where in itertools.combinations(range(len(kept) + j), j):
            for new in itertools.product(BALLOT, repeat=j):
                it_new, it_kept = iter(new), iter(kept)
                yield [next(it_new) if i in where else next(it_kept) for i in range(len(kept) + j)]


def pred_is_unique_top(votes: Sequence[str | None], pred: str) -> bool:
    counts = Counter(v for v in votes if v is not None)
    return all(counts[pred] > c for o, c in counts.items() if o != pred)


def gap(votes: Sequence[str | None], pred: str) -> int:
    counts = Counter(v for v in votes if v is not None)
    return counts[pred] - max((c for o, c in counts.items() if o != pred), default=0)


def test_majority_vote_is_counter_most_common_over_the_non_abstaining_answers() -> None:
    for votes in ballots(5):
        cast = [v for v in votes if v is not None]
        expected = Counter(cast).most_common(1)[0][0] if cast else None
        assert majority_vote(votes) == expected, votes


@pytest.mark.parametrize("k", [0, 1, 2])
def test_replace_certificate_is_sound_by_brute_force(k: int) -> None:
    certified = 0
    for votes in ballots(5):
        if not is_certified(votes, k, threat="replace"):
            continue
        certified += 1
        pred = majority_vote(votes)
        assert pred is not None
        for attacked in replacements(votes, k):
            assert majority_vote(attacked) == pred, (votes, attacked)
    assert certified > 0  # the check above ran on certified cases


@pytest.mark.parametrize("k", [0, 1, 2])
def test_replace_certificate_is_tight_up_to_the_tie_convention(k: int) -> None:
    """Not certified: some attack on <= k passages changes the answer outright when the gap is
    below 2k', and makes a tie at the top (decided by passage order) when it equals 2k'."""
    for votes in ballots(5):
        pred = majority_vote(votes)
        if pred is None or is_certified(votes, k, threat="replace"):
            continue
        attacks = list(replacements(votes, k))
        assert any(not pred_is_unique_top(a, pred) for a in attacks), votes
        if gap(votes, pred) <= 2 * k - 1:
            assert any(majority_vote(a) != pred for a in attacks), votes


@pytest.mark.parametrize("k", [0, 1, 2])
@pytest.mark.parametrize("room", [0, 1, 3])  # free slots before injected passages displace any
def test_inject_certificate_is_sound_and_tight_by_brute_force(k: int, room: int) -> None:
    certified = 0
    for votes in ballots(5):
        top_k = len(votes) + room
        pred = majority_vote(votes)
        attacks = list(injections(votes, k, top_k))
        if is_certified(votes, k, threat="inject", top_k=top_k):
            certified += 1
            assert all(majority_vote(a) == pred for a in attacks), votes
        elif pred is not None:
            assert any(not pred_is_unique_top(a, pred) for a in attacks), votes
    assert certified > 0


def test_inject_certificate_is_never_weaker_than_the_reference_formula() -> None:
    """The reference (src/defense.py, INJECTION=True, top_k slots full): certified when
    gap - (winner's votes among the last k' passages) > k'."""
    for k in (1, 2):
        for votes in ballots(5):
            pred = majority_vote(votes)
            if pred is None:
                continue
            reference = gap(votes, pred) - sum(v == pred for v in votes[-k:]) > k
            if reference:
                assert is_certified(votes, k, threat="inject", top_k=len(votes)), votes


def test_certified_k_is_the_largest_certified_corruption() -> None:
    for threat in ("replace", "inject"):
        for votes in ballots(5):
            best = certified_k(votes, threat=threat)
            for k in range(len(votes) + 2):
                assert is_certified(votes, k, threat=threat) == (best is not None and k <= best)
    assert certified_k(["B"] * 5) == 2 and certified_k(["B", "B", "B", "A", None]) == 0
    assert certified_k(["A", "B"]) is None and certified_k([None, None]) is None


# --- the defender ----------------------------------------------------------------------------------


def _human(messages: list[BaseMessage]) -> str:
    return next(str(m.content) for m in reversed(messages) if isinstance(m, HumanMessage))


async def test_type1_is_one_isolated_call_and_certifies_nothing_at_k1(toy_item: Item) -> None:
    model = ScriptedChatModel(outputs=FakeExaminee(toy_item))
    answer = await create_defender("robustrag")(toy_case(toy_item, "type1", "A"), DefenderContext(model=model))
    assert answer.llm_calls == 1 and answer.method == "majority_vote"
    assert answer.choice == "A"  # the gullible examinee follows its one sentence
    assert answer.extra["votes"] == [{"index": 0, "source": "context", "choice": "A"}]
    assert answer.extra["certified"] is False and answer.extra["certified_k"] == 0
    assert answer.extra["threat"] == "replace" and answer.extra["corruption_size"] == 1


async def test_each_passage_is_answered_alone_with_the_papers_instruction(toy_item: Item) -> None:
    examinee = FakeExaminee(toy_item)
    case = toy_case(toy_item, "type2")
    answer = await create_defender("robustrag")(case, DefenderContext(model=ScriptedChatModel(outputs=examinee)))
    assert answer.llm_calls == len(case.context) == 4
    sentences = [s.text for s in case.context]
    for prompt in examinee.prompts:
        assert sum(s in prompt for s in sentences) == 1
        assert "Given the context information and not prior knowledge" in prompt
        assert f"Otherwise, output '{NO_INFO}' as the answer." in prompt
    votes = [v["choice"] for v in answer.extra["votes"]]
    assert answer.choice == majority_vote(votes)
    assert answer.extra["certified"] == is_certified(votes, 1)
    assert answer.extra["counts"] == dict(Counter(v for v in votes if v))


async def test_an_abstention_carries_no_vote_and_all_abstaining_abstains(toy_item: Item) -> None:
    def script(messages: list[BaseMessage], tools: list[Any]) -> str:
        text = _human(messages)
        if "vitamin C deficiency" in text:
            return "The statement names it.\nFinal answer: B"
        return f"Nothing here says so; B is a guess.\nFinal answer: {NO_INFO}"

    answer = await create_defender("robustrag")(toy_case(toy_item, "type2"), DefenderContext(model=ScriptedChatModel(outputs=script)))
    assert [v["choice"] for v in answer.extra["votes"]] == [None, "B", None, None]
    assert answer.choice == "B" and answer.extra["certified_k"] == 0

    def silent(messages: list[BaseMessage], tools: list[Any]) -> str:
        return f"Final answer: {NO_INFO}"

    answer = await create_defender("robustrag")(toy_case(toy_item, "type2"), DefenderContext(model=ScriptedChatModel(outputs=silent)))
    assert answer.choice is None and answer.extra["certified"] is False and answer.extra["certified_k"] is None


async def test_clean_case_is_the_ordinary_prompt_once_and_not_certified(toy_item: Item) -> None:
    examinee = FakeExaminee(toy_item)
    answer = await create_defender("robustrag")(toy_case(toy_item, "clean"), DefenderContext(model=ScriptedChatModel(outputs=examinee)))
    assert answer.llm_calls == 1 and answer.choice == "B"
    assert NO_INFO not in examinee.prompts[0]
    assert answer.extra["passages"] == 0 and answer.extra["certified"] is False


async def test_search_results_adds_search_results_as_passages_up_to_top_k(toy_item: Item) -> None:
    examinee = FakeExaminee(toy_item)
    ctx = DefenderContext(model=ScriptedChatModel(outputs=examinee), tools=FakeToolset())
    answer = await create_defender("robustrag", {"search_results": 3})(toy_case(toy_item, "type1", "A"), ctx)
    sources = [v["source"] for v in answer.extra["votes"]]
    assert sources[0] == "context" and 1 < len(sources) <= 4 and set(sources[1:]) == {"retrieved"}
    assert answer.tool_calls == 1 and answer.llm_calls == len(sources) == answer.extra["passages"]
    assert all(v["url"] for v in answer.extra["votes"][1:])
    assert [e["url"] for e in ctx.answer_evidence] == [v["url"] for v in answer.extra["votes"][1:]]
    # top_k bounds the sentences and the results together
    capped = await create_defender("robustrag", {"search_results": 3, "top_k": 1})(
        toy_case(toy_item, "type1", "A"),
        DefenderContext(model=ScriptedChatModel(outputs=FakeExaminee(toy_item)), tools=FakeToolset()),
    )
    assert capped.extra["passages"] == 1 and capped.tool_calls == 0


async def test_a_failed_search_adds_no_passage_but_a_replay_miss_stops_the_case(toy_item: Item) -> None:
    ctx = DefenderContext(
        model=ScriptedChatModel(outputs=FakeExaminee(toy_item)),
        tools=FakeToolset(fail=ToolError("upstream returned 503", kind="http")),
    )
    answer = await create_defender("robustrag", {"search_results": 3})(toy_case(toy_item, "type1", "A"), ctx)
    assert answer.extra["passages"] == 1 and answer.choice == "A"
    ctx = DefenderContext(
        model=ScriptedChatModel(outputs=FakeExaminee(toy_item)),
        tools=FakeToolset(fail=ReplayMissError("no recorded entry for search_web")),
    )
    with pytest.raises(ReplayMissError):
        await create_defender("robustrag", {"search_results": 3})(toy_case(toy_item, "type1", "A"), ctx)


def test_registration_prompts_and_options() -> None:
    spec = get_spec("robustrag")
    assert spec.source is not None and "arXiv 2405.15556" in spec.source and spec.uses_tools
    shown = defender_prompts("robustrag")
    assert shown["isolated"] == isolated_instruction(["A", "B", "C", "D"])
    assert "Output an answer from A, B, C, or D only when there is clear evidence" in shown["isolated"]
    for bad in ({"corruption_size": -1}, {"threat": "guess"}, {"top_k": 0}, {"search_results": 99}):
        with pytest.raises(ValueError):
            create_defender("robustrag", bad)


def test_the_simulated_examinee_reads_one_sentence_and_the_offered_abstention(toy_item: Item) -> None:
    """What the simulated examinee has to answer from: the isolated prompt's single sentence as
    its context, and the paper's abstention as an offered answer that names no option."""
    case = toy_case(toy_item, "type1", "A")
    for preset in ("paper", "toolkit"):
        view = dataclasses.replace(case.view(), prompt=preset)
        messages = render_prompt(view, context=[case.context[0].text], instruction=isolated_instruction(list(toy_item.options)))
        prompt = read(list(messages))
        assert [s.text for s in prompt.context] == [case.context[0].text]
        assert prompt.abstain_offer == NO_INFO


# --- over a real provider client, and record / replay ------------------------------------------


async def test_requests_through_the_openai_client(monkeypatch: pytest.MonkeyPatch, respx_mock: respx.MockRouter, toy_item: Item) -> None:
    clear_provider_env(monkeypatch, "openai")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    bodies: list[dict[str, Any]] = []
    # the "model" reads which statement it was shown: B and A's sentences -> B; C's -> abstain
    replies = {"vitamin A": "B", "vitamin C deficiency": "B", "vitamin D": NO_INFO, "vitamin K": "D"}

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        bodies.append(body)
        user = next(m["content"] for m in body["messages"] if m["role"] == "user")
        said = next(v for k, v in replies.items() if k in user.split("Question:")[0])
        return httpx.Response(200, json={
            "id": f"c{len(bodies)}", "object": "chat.completion", "created": 0, "model": "gpt-test",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": f"Reasoning.\nFinal answer: {said}"}}],
            "usage": {"prompt_tokens": 50, "completion_tokens": 5, "total_tokens": 55},
        })

    route = respx_mock.post("https://openai.test/v1/chat/completions").mock(side_effect=handler)
    model = load_model("openai/gpt-test", ModelOptions(base_url="https://openai.test/v1"))
    answer = await create_defender("robustrag")(toy_case(toy_item, "type2"), DefenderContext(model=model, model_spec="openai/gpt-test"))
    assert route.call_count == 4 == answer.llm_calls
    for body in bodies:
        user = next(m["content"] for m in body["messages"] if m["role"] == "user")
        assert sum(s in user for s in toy_item.contexts.values()) == 1
        assert "response_format" not in body  # the isolated prompt asks for a final-answer line
    assert [v["choice"] for v in answer.extra["votes"]] == ["B", "B", None, "D"]
    assert answer.choice == "B" and answer.extra["certified_k"] == 0 and not answer.extra["certified"]
    assert answer.usage.input_tokens == 200


def _normalised(out: Path) -> list[str]:
    def strip(obj: Any) -> Any:
        if isinstance(obj, dict):
            return {k: strip(v) for k, v in obj.items() if k not in ("latency_s", "cache_hit")}
        return [strip(v) for v in obj] if isinstance(obj, list) else obj

    lines = (out / "records.jsonl").read_text(encoding="utf-8").splitlines()
    for path in sorted((out / "traces").glob("*.jsonl")):
        lines += path.read_text(encoding="utf-8").splitlines()
    return sorted(json.dumps(strip(json.loads(line)), sort_keys=True) for line in lines)


@pytest.mark.medmis_no_network(loopback=False)
def test_record_then_replay_offline_is_identical(tmp_path: Path, medmis_no_network: list[str]) -> None:
    cache = tmp_path / "cache"
    base = ["run", "--data", str(SAMPLE), "--limit", "2", "--model", "mock/examinee", "--no-progress",
            "--defender", "robustrag", "--defender-option", "robustrag.search_results=2",
            "--search", "local", "--cache-dir", str(cache)]
    assert main([*base, "--out", str(tmp_path / "rec"), "--cache", "record"]) == 0
    assert main([*base, "--out", str(tmp_path / "rep"), "--cache", "replay"]) == 0
    recorded, replayed = _normalised(tmp_path / "rec"), _normalised(tmp_path / "rep")
    assert recorded == replayed
    records = [json.loads(line) for line in (tmp_path / "rep" / "records.jsonl").read_text().splitlines()]
    assert records and all("certified_k" in r["extra"] for r in records)
    assert any(r["tool_calls"] for r in records)  # the searches were replayed too
    assert medmis_no_network == []


# --- the report's "Certified answers" section ----------------------------------------------------


def test_the_report_counts_certified_answers_per_protocol_and_poison_share(tmp_path: Path) -> None:
    from medmis.experiments.reporting._certified import certified_markdown

    out = tmp_path / "run"
    assert main(["run", "--data", str(SAMPLE), "--limit", "6", "--model", "mock/examinee", "--no-progress",
                 "--defender", "none,robustrag", "--out", str(out)]) == 0
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    ours = [r for r in records if r["defender"] == "robustrag"]
    theirs = [r for r in records if r["defender"] == "none"]
    assert ours and theirs and all("certified_k" not in r["extra"] for r in theirs)
    section = (out / "report.md").read_text(encoding="utf-8").split("## Certified answers", 1)[1].split("\n## ", 1)[0]
    assert "| none |" not in section
    for protocol in ("clean", "type1", "type2"):
        rows = [r for r in ours if r["protocol"] == protocol]
        k = sum(bool(r["extra"]["certified"]) for r in rows)
        both = sum(bool(r["extra"]["certified"]) and r["choice"] == r["gold"] for r in rows)
        line = next(ln for ln in section.splitlines() if f"| robustrag | {protocol} |" in ln)
        assert f"({k}/{len(rows)})" in line.split("|")[5] and f"({both}/{len(rows)})" in line.split("|")[6]
    assert "(0/6)" in next(ln for ln in section.splitlines() if "| robustrag | clean |" in ln)
    # a poisoned grid's share runs get their own rows, led by the share
    share = out / "poison" / "share-0.5"
    share.mkdir(parents=True)
    (share / "records.jsonl").write_text((out / "records.jsonl").read_text())
    assert "| 0.5 | mock/examinee | robustrag | type1 |" in certified_markdown(out)
    # no certifying defender, no section
    plain = tmp_path / "plain"
    assert main(["run", "--data", str(SAMPLE), "--limit", "2", "--model", "mock/examinee", "--no-progress",
                 "--defender", "none", "--out", str(plain)]) == 0
    assert certified_markdown(plain) == "" and "## Certified answers" not in (plain / "report.md").read_text()
