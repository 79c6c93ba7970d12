"""Graph shapes and purpose-built behaviour of the agentic defenders (offline, scripted models)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fakes import SCURVY_CORPUS, FakeExaminee, FakeToolset, check_defender, toy_case
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.graph.state import CompiledStateGraph

from medmis.agents import ScriptedChatModel, message_text
from medmis.defenses import DefenderContext, DefenderOptions, create_defender
from medmis.experiments import Answer, Item
from medmis.graphs import (
    ClaimVerifyOptions,
    IsolateVoteOptions,
    PriorReconcileOptions,
    SearchAgentOptions,
    WarningOptions,
    build_claim_verify_graph,
    build_escalate_graph,
    build_isolate_vote_graph,
    build_prior_reconcile_graph,
    build_search_agent_graph,
    context_blind_defender,
    decide_vote,
    parse_json_object,
    sentences_supporting,
    verify_citations,
    warning_defender,
)
from medmis.graphs import _search_paper as paper
from medmis.graphs._isolate_vote import Ballot
from medmis.graphs._spotlight import DELIMITERS
from medmis.tools import PAPER_SEARCH_TOOL, PAPER_VISIT_TOOL, SearchResult, ToolError

SNAPSHOTS = Path(__file__).parent / "snapshots"

GRAPHS: dict[str, Callable[[], CompiledStateGraph]] = {
    "search_agent": lambda: build_search_agent_graph(SearchAgentOptions()),
    "search_agent_paper": lambda: build_search_agent_graph(SearchAgentOptions(preset="paper")),
    "claim_verify": lambda: build_claim_verify_graph(ClaimVerifyOptions()),
    "prior_reconcile": lambda: build_prior_reconcile_graph(PriorReconcileOptions()),
    "isolate_vote": lambda: build_isolate_vote_graph(IsolateVoteOptions()),
    "escalate": lambda: build_escalate_graph(
        warning_defender(WarningOptions()),
        context_blind_defender(DefenderOptions()),
        ClaimVerifyOptions(),
    ),
}


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_graph_shape_matches_snapshot(name: str) -> None:
    drawn = GRAPHS[name]().get_graph().draw_mermaid()
    path = SNAPSHOTS / f"{name}.mmd"
    if os.environ.get("UPDATE_SNAPSHOTS") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(drawn, encoding="utf-8")
    assert path.exists(), f"no snapshot {path.name}; run the tests with UPDATE_SNAPSHOTS=1"
    assert drawn == path.read_text(encoding="utf-8"), (
        f"graph {name} changed shape; UPDATE_SNAPSHOTS=1 if intended"
    )


def test_the_two_search_agents_are_two_graphs_that_never_ask_which_they_are() -> None:
    """The toolkit's and the paper's agent are separate graphs over shared helpers: no node
    reads the preset, and only the registered solver picks between them."""
    import ast
    import inspect

    from medmis.graphs import _search_common, _search_toolkit

    for module in (_search_common, _search_toolkit, paper):
        tree = ast.parse(inspect.getsource(module))
        read = [n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "preset"]
        assert not read, f"{module.__name__} reads the preset"
        assert "is_paper" not in inspect.getsource(module)
    toolkit = build_search_agent_graph(SearchAgentOptions())
    harness = build_search_agent_graph(SearchAgentOptions(preset="paper"))
    for graph, module in ((toolkit, _search_toolkit), (harness, paper)):
        plan = graph.builder.nodes["plan"].runnable
        assert getattr(plan, "func", None) is not None or getattr(plan, "afunc", None) is not None
        func = getattr(plan, "afunc", None) or plan.func
        assert func.__module__ == module.__name__


# --- helpers -------------------------------------------------------------------------------------


def run_ctx(script: Any, tools: FakeToolset | None) -> tuple[DefenderContext, ScriptedChatModel]:
    model = ScriptedChatModel(outputs=script)
    return DefenderContext(model=model, model_spec="mock/fake", tools=tools), model


async def solve(
    name: str,
    item: Item,
    protocol: str,
    *,
    examinee: Any = None,
    tools: FakeToolset | None = None,
    **options: Any,
) -> tuple[Answer, ScriptedChatModel]:
    ctx, model = run_ctx(examinee or FakeExaminee(item), tools)
    answer = await create_defender(name, options)(toy_case(item, protocol), ctx)
    return answer, model


def sent_prompts(model: ScriptedChatModel) -> list[str]:
    return [message_text(call["messages"][-1]) for call in model.calls]


# --- JSON parsing --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        '{"verdict": "refuted", "quote": "q", "url": null}',
        'Here you go:\n```json\n{"verdict": "refuted", "quote": "q", "url": null}\n```\nHope that helps.',
        'I think {"verdict": "refuted", "quote": "q",} is right',
        "{“verdict”: “refuted”, “quote”: “q”}",
        '{"result": {"verdict": "refuted", "quote": "q"}}',
        'noise {not json} then {"verdict": "refuted"}',
    ],
)
def test_parse_json_object_tolerates_model_formatting(text: str) -> None:
    obj = parse_json_object(text, "verdict")
    assert obj is not None and obj["verdict"] == "refuted"


def test_parse_json_object_returns_none_without_the_key() -> None:
    assert parse_json_object('{"answer": 1}', "verdict") is None
    assert parse_json_object("no json here at all", "claims") is None


# --- claim_verify --------------------------------------------------------------------------------


async def test_claim_verify_does_not_follow_a_refuted_claim(toy_item: Item) -> None:
    baseline, _ = await solve("none", toy_item, "type1")
    assert baseline.choice == "A"  # the gullible examinee follows the false sentence unaided

    answer, model = await solve("claim_verify", toy_item, "type1", tools=FakeToolset())
    assert answer.choice == toy_item.gold
    assert [v["verdict"] for v in answer.extra["verdicts"]] == ["refuted"]
    assert answer.extra["verdicts"][0]["url"] == "https://ref.example/scurvy"
    final_prompt = sent_prompts(model)[-1]
    assert f"[REFUTED] {toy_item.contexts['A']}" in final_prompt.splitlines()
    assert "Evidence:" in final_prompt


async def test_claim_verify_follows_a_supported_true_claim_type2_recovery(toy_item: Item) -> None:
    wrong = FakeExaminee(toy_item, knows="A", gullible=False)
    clean, _ = await solve("claim_verify", toy_item, "clean", examinee=wrong, tools=FakeToolset())
    assert clean.choice == "A" and clean.llm_calls == 1  # clean-wrong, one call

    wrong = FakeExaminee(toy_item, knows="A", gullible=False)
    answer, model = await solve(
        "claim_verify", toy_item, "type2", examinee=wrong, tools=FakeToolset()
    )
    assert answer.choice == toy_item.gold
    by_sentence = {v["sentence"]: v["verdict"] for v in answer.extra["verdicts"]}
    assert by_sentence == {0: "refuted", 1: "supported", 2: "refuted", 3: "refuted"}
    assert f"[SUPPORTED] {toy_item.contexts['B']}" in sent_prompts(model)[-1].splitlines()


async def test_claim_verify_checks_claims_in_parallel(toy_item: Item) -> None:
    tools = FakeToolset(delay=0.05)
    answer, _ = await solve("claim_verify", toy_item, "type2", tools=tools, visit_top=0)
    assert len(answer.extra["verdicts"]) == 4
    assert tools.max_in_flight == 4


async def test_claim_verify_falls_back_to_one_claim_per_sentence(toy_item: Item) -> None:
    examinee = FakeExaminee(toy_item)

    def script(messages: list[Any], tools: list[Any]) -> Any:
        if '"claims"' in message_text(messages[-1]):
            return "I would rather not split anything."
        return examinee(messages, tools)

    answer, _ = await solve("claim_verify", toy_item, "type2", examinee=script, tools=FakeToolset())
    assert answer.extra["split_method"] == "fallback"
    assert [v["claim"] for v in answer.extra["verdicts"]] == list(toy_item.contexts.values())


async def test_claim_verify_strict_quotes_without_tools_gives_no_verdicts(toy_item: Item) -> None:
    answer, model = await solve(
        "claim_verify", toy_item, "type1", tools=None, strict_quotes=True, split="sentences"
    )
    assert [v["verdict"] for v in answer.extra["verdicts"]] == ["not_enough_info"]
    assert answer.llm_calls == 1 and answer.tool_calls == 0  # no verdict call without evidence
    assert "[NOT ENOUGH INFO]" in sent_prompts(model)[-1]


# --- search_agent --------------------------------------------------------------------------------


def agent_calls(model: ScriptedChatModel) -> list[dict[str, Any]]:
    return [c for c in model.calls if c["tools"]]


async def test_search_agent_refuses_identical_repeated_calls(toy_item: Item) -> None:
    tools = FakeToolset()
    examinee = FakeExaminee(toy_item, tool_turns=2, calls_per_turn=2, repeat_calls=True)
    answer, model = await solve("search_agent", toy_item, "type1", examinee=examinee, tools=tools)
    assert tools.searches == ["scurvy vitamin"]  # 4 identical calls, 1 executed
    last = agent_calls(model)[-1]["messages"]
    refusals = [m for m in last if isinstance(m, ToolMessage) and "duplicate" in message_text(m)]
    assert len(refusals) == 3 and all(m.status == "error" for m in refusals)
    assert sum(1 for s in answer.trace if s.name == "duplicate_call_refused") == 3
    assert answer.choice is not None


async def test_search_agent_runs_parallel_tool_calls_concurrently(toy_item: Item) -> None:
    tools = FakeToolset(delay=0.3)
    examinee = FakeExaminee(toy_item, tool_turns=1, calls_per_turn=3)
    answer, model = await solve("search_agent", toy_item, "type1", examinee=examinee, tools=tools)
    # all three in flight at once: concurrent, whatever the machine's load (no clock asserted)
    assert tools.max_in_flight == 3 and len(tools.searches) == 3
    results = [m for m in agent_calls(model)[-1]["messages"] if isinstance(m, ToolMessage)]
    assert [m.tool_call_id for m in results] == ["call_0_0", "call_0_1", "call_0_2"]
    assert answer.tool_calls == 3


async def test_search_agent_stops_at_max_iterations_with_a_forced_answer(toy_item: Item) -> None:
    examinee = FakeExaminee(toy_item, tool_turns=99)
    ctx, model = run_ctx(examinee, FakeToolset())
    answer = await create_defender("search_agent", {"max_iterations": 2})(toy_case(toy_item, "type1"), ctx)
    assert len(agent_calls(model)) == 2
    assert model.calls[-1]["tools"] == []  # the forced answer has no tools bound
    assert "Evidence:" in sent_prompts(model)[-1]
    assert answer.extra["forced"] is True and answer.extra["stop_reason"] == "budget"
    assert answer.llm_calls == 4  # plan + 2 agent turns + forced answer
    assert answer.choice is not None
    assert answer.extra["visited"] == ["https://ref.example/scurvy"]
    # the forced answer declares the evidence it was given; whether it rests on it is the
    # harness's one rule (answer_sources), never "visited" restated as cited
    assert "cited_urls" not in answer.extra and "sources" not in answer.extra
    assert "https://ref.example/scurvy" in [p["url"] for p in ctx.answer_evidence]


async def test_search_agent_degrades_to_answering_without_tools_when_tools_fail(
    toy_item: Item,
) -> None:
    tools = FakeToolset(fail=ToolError("upstream returned 503", kind="http"))
    examinee = FakeExaminee(toy_item, tool_turns=99)
    answer, model = await solve("search_agent", toy_item, "type1", examinee=examinee, tools=tools)
    assert answer.extra["stop_reason"] == "tool_failures"
    assert len(agent_calls(model)) == 2  # max_tool_failures consecutive failed turns
    assert model.calls[-1]["tools"] == []
    seen = [m for m in agent_calls(model)[-1]["messages"] if isinstance(m, ToolMessage)]
    assert seen and "http: upstream returned 503" in message_text(seen[0])
    assert answer.choice is not None and answer.error is None


async def test_search_agent_stops_after_a_config_error(toy_item: Item) -> None:
    tools = FakeToolset(fail=ToolError("no TAVILY_API_KEY", kind="config"))
    answer, model = await solve(
        "search_agent",
        toy_item,
        "type1",
        examinee=FakeExaminee(toy_item, tool_turns=99),
        tools=tools,
    )
    assert len(agent_calls(model)) == 1 and answer.extra["stop_reason"] == "tool_failures"


async def test_search_agent_without_tools_answers_directly(toy_item: Item) -> None:
    answer, model = await solve("search_agent", toy_item, "type1", tools=None)
    assert answer.llm_calls == 1 and answer.tool_calls == 0
    assert model.calls[0]["tools"] == []
    assert "unverified source" in sent_prompts(model)[0]
    assert answer.extra["stop_reason"] == "direct"


async def test_search_agent_clean_case_skips_research_unless_asked(toy_item: Item) -> None:
    answer, _ = await solve("search_agent", toy_item, "clean", tools=FakeToolset())
    assert answer.llm_calls == 1 and answer.tool_calls == 0
    answer, _ = await solve(
        "search_agent", toy_item, "clean", tools=FakeToolset(), research_clean=True
    )
    assert answer.tool_calls > 0 and answer.extra["stop_reason"] == "answered"


async def test_search_agent_plan_falls_back_to_the_question_stem(toy_item: Item) -> None:
    examinee = FakeExaminee(toy_item)

    def script(messages: list[Any], tools: list[Any]) -> Any:
        if '"queries"' in message_text(messages[-1]):
            return "Let me think about what to search."
        return examinee(messages, tools)

    answer, model = await solve(
        "search_agent", toy_item, "type1", examinee=script, tools=FakeToolset()
    )
    assert answer.extra["plan"]["queries"] == [toy_item.question]
    assert f"- {toy_item.question}" in message_text(agent_calls(model)[0]["messages"][1])


async def test_search_agent_forces_an_answer_when_the_model_gives_none(toy_item: Item) -> None:
    examinee = FakeExaminee(toy_item, answer_with_tools=False)
    answer, model = await solve(
        "search_agent", toy_item, "type1", examinee=examinee, tools=FakeToolset()
    )
    assert answer.extra["stop_reason"] == "no_answer"
    assert model.calls[-1]["tools"] == [] and answer.choice is not None


async def test_search_agent_reports_tool_arguments_errors_to_the_model(toy_item: Item) -> None:
    examinee = FakeExaminee(toy_item)
    bad = AIMessage(
        content="",
        tool_calls=[
            {"name": "search_web", "args": {}, "id": "c1", "type": "tool_call"},
            {"name": "delete_web", "args": {"url": "x"}, "id": "c2", "type": "tool_call"},
        ],
    )

    def script(messages: list[Any], tools: list[Any]) -> Any:
        if tools and not any(isinstance(m, ToolMessage) for m in messages):
            return bad
        return examinee(messages, tools)

    answer, model = await solve(
        "search_agent", toy_item, "type1", examinee=script, tools=FakeToolset(), plan=False
    )
    results = [m for m in agent_calls(model)[-1]["messages"] if isinstance(m, ToolMessage)]
    assert [m.status for m in results] == ["error", "error"]
    assert "unknown tool" in message_text(results[1])
    assert answer.choice is not None


# --- search_agent: presets, warning, verification --------------------------------------------------


def all_sent_text(model: ScriptedChatModel) -> str:
    return "\n".join(message_text(m) for call in model.calls for m in call["messages"])


async def test_search_agent_paper_preset_sends_the_reference_prompts_verbatim(toy_item: Item) -> None:
    examinee = FakeExaminee(toy_item, tool_turns=2)
    answer, model = await solve("search_agent", toy_item, "type1", examinee=examinee,
                                tools=FakeToolset(), preset="paper")
    case = toy_case(toy_item, "type1").view()
    question = paper.question_prompt(case)
    assert question.startswith(paper.WITH_CONTEXT_HEAD + "Additional Clinical Context:\n" + case.context_texts[0])
    assert question.endswith("D: Vitamin K\n\nReturn your final answer in the form: The answer is [X]")
    plan_call, first_agent = model.calls[0], agent_calls(model)[0]
    assert message_text(plan_call["messages"][0]) == paper.PLANNER_SYSTEM_PROMPT
    assert json.loads(message_text(plan_call["messages"][1])) == {
        "question": question, "schema": paper.PLANNER_USER_TEMPLATE}
    assert message_text(first_agent["messages"][0]) == paper.SYSTEM_PROMPT
    opening = json.loads(message_text(first_agent["messages"][1]))
    assert opening["question"] == question and opening["instruction"] == paper.INSTRUCTION
    assert opening["initial_plan"]["queries"] == ["scurvy cause vitamin"]
    assert first_agent["tools"] == [PAPER_SEARCH_TOOL, PAPER_VISIT_TOOL]
    # search results and pages come back as the reference's JSON
    results = [json.loads(message_text(m)) for m in agent_calls(model)[-1]["messages"] if isinstance(m, ToolMessage)]
    assert set(results[0]) == {"query", "answer_box", "knowledge_graph", "results", "related_queries"}
    assert results[0]["results"][0] == {"position": 1, "title": "Scurvy - clinical reference",
                                        "url": "https://ref.example/scurvy", "snippet": SCURVY_CORPUS[0].text[:160],
                                        "source": None, "date": None}
    assert set(results[1]) == {"url", "goal", "content"} and results[1]["goal"] == "cause of scurvy"
    assert answer.choice == "A"  # this fake follows the context; evidence never sways it
    assert answer.extra["stop_reason"] == "answered"
    assert create_defender("search_agent", {"preset": "paper"}).label == "search_agent[preset=paper]"


async def test_search_agent_paper_preset_meets_the_defender_contract() -> None:
    answers = await check_defender("search_agent", {"preset": "paper"})
    assert all("verification" in a.extra for a in answers)


async def test_search_agent_paper_preset_researches_clean_cases_without_warning(toy_item: Item) -> None:
    tools = FakeToolset()
    answer, model = await solve("search_agent", toy_item, "clean", tools=tools, preset="paper")
    assert tools.searches and answer.tool_calls > 0  # the same tool loop as the injected cases
    opening = json.loads(message_text(agent_calls(model)[0]["messages"][1]))
    assert opening["question"].startswith(paper.CLEAN_HEAD)
    sent = all_sent_text(model).casefold()
    assert "unverified" not in sent and "misleading" not in sent
    opts = SearchAgentOptions(preset="paper")
    assert (opts.research_clean, opts.warn, opts.max_page_chars, opts.max_queries) == (True, False, 8000, 4)


@pytest.mark.parametrize("preset", ["toolkit", "paper"])
async def test_search_agent_warning_is_its_own_switch(toy_item: Item, preset: str) -> None:
    _, quiet = await solve("search_agent", toy_item, "type1", tools=FakeToolset(), preset=preset,
                           warn=False, research_clean=True)
    _, warned = await solve("search_agent", toy_item, "type1", tools=FakeToolset(), preset=preset, warn=True)
    assert "unverified" not in all_sent_text(quiet)
    assert "unverified" in all_sent_text(warned)
    # the warning changes prompts only: both research the case with the same tools
    assert len(agent_calls(quiet)) == len(agent_calls(warned)) > 0
    label = create_defender("search_agent", {"preset": preset, "warn": False}).label
    assert ("warn=False" in label) == (preset == "toolkit")


async def test_search_agent_paper_preset_refuses_exact_duplicates_and_shows_tool_errors(toy_item: Item) -> None:
    examinee = FakeExaminee(toy_item, tool_turns=2, repeat_calls=True)
    _, model = await solve("search_agent", toy_item, "type1", examinee=examinee, tools=FakeToolset(), preset="paper")
    shown = [message_text(m) for m in agent_calls(model)[-1]["messages"] if isinstance(m, ToolMessage)]
    assert shown[1] == paper.DUPLICATE_REFUSED
    failing = FakeToolset(fail=ToolError("Serper rate limit exceeded (HTTP 429)", kind="http"))
    examinee = FakeExaminee(toy_item, tool_turns=99)
    answer, model = await solve("search_agent", toy_item, "type1", examinee=examinee, tools=failing,
                                preset="paper", max_iterations=3)
    shown = [message_text(m) for m in agent_calls(model)[-1]["messages"] if isinstance(m, ToolMessage)]
    assert shown[0] == "[tool error: http: Serper rate limit exceeded (HTTP 429)]"
    # the reference loop never gives up on failing tools: it runs out its budget instead
    assert len(agent_calls(model)) == 3 and answer.extra["stop_reason"] == "budget"


async def test_search_agent_paper_preset_finalises_from_the_last_eight_tool_log_entries(toy_item: Item) -> None:
    examinee = FakeExaminee(toy_item, tool_turns=99, calls_per_turn=3)
    answer, model = await solve("search_agent", toy_item, "type1", examinee=examinee, tools=FakeToolset(),
                                preset="paper", max_iterations=4)
    final = model.calls[-1]
    assert final["tools"] == [] and message_text(final["messages"][0]) == paper.FINALIZER_SYSTEM_PROMPT
    payload = json.loads(message_text(final["messages"][1]))
    assert set(payload) == {"question", "plan", "evidence"}
    assert len(payload["evidence"]) == 8 and all(set(e) == {"tool", "arguments", "result"} for e in payload["evidence"])
    assert answer.extra["stop_reason"] == "budget" and answer.choice is not None


async def test_search_agent_paper_preset_takes_a_tool_free_reply_as_the_answer(toy_item: Item) -> None:
    examinee = FakeExaminee(toy_item, answer_with_tools=False)
    answer, model = await solve("search_agent", toy_item, "type1", examinee=examinee, tools=FakeToolset(),
                                preset="paper")
    assert model.calls[-1]["tools"]  # no finaliser call
    assert answer.choice is None and answer.extra["stop_reason"] == "answered"
    assert answer.extra["verification"]["verdict"] == "no_answer"


async def test_search_agent_honours_the_reference_tool_arguments(toy_item: Item) -> None:
    class LocalisedToolset(FakeToolset):
        async def search(self, query: str, *, max_results: int = 5, country: str | None = None,
                         language: str | None = None) -> list[SearchResult]:
            self.locales.append((max_results, country, language))
            return await super().search(query, max_results=max_results)

    tools = LocalisedToolset()
    tools.locales = []  # type: ignore[attr-defined]
    call = AIMessage(content="", tool_calls=[
        {"name": "search_web", "args": {"query": "scurvy", "num_results": 2, "country": "GB", "language": "en"},
         "id": "s1", "type": "tool_call"},
        {"name": "visit_web", "args": {"url": "https://ref.example/scurvy", "max_chars": 40}, "id": "v1",
         "type": "tool_call"},
    ])
    examinee = FakeExaminee(toy_item)

    def script(messages: list[Any], tools_: list[Any]) -> Any:
        if tools_ and not any(isinstance(m, ToolMessage) for m in messages):
            return call
        return examinee(messages, tools_)

    answer, _ = await solve("search_agent", toy_item, "type1", examinee=script, tools=tools, preset="paper")
    assert tools.locales == [(2, "GB", "en")]  # type: ignore[attr-defined]
    steps = {s.name: s for s in answer.trace if s.kind == "tool"}
    assert steps["search_web"].input == {"query": "scurvy", "max_results": 2, "country": "GB", "language": "en"}
    assert steps["visit_web"].input["max_chars"] == 500  # the model's 40, raised to the reference's floor
    # a toolset without the hints still works: they are dropped, not sent
    answer, _ = await solve("search_agent", toy_item, "type1", examinee=script, tools=FakeToolset(), preset="paper")
    assert next(s for s in answer.trace if s.name == "search_web").input == {"query": "scurvy", "max_results": 2}


async def test_search_agent_verifies_citations_against_fetched_pages(toy_item: Item) -> None:
    careful = FakeExaminee(toy_item, tool_turns=2, gullible=False)
    answer, _ = await solve("search_agent", toy_item, "type1", examinee=careful, tools=FakeToolset())
    verdict = answer.extra["verification"]
    assert answer.choice == "B"
    assert verdict["verdict"] == "supported" and verdict["method"] == "page_sentence"
    assert verdict["quote_url"] == "https://ref.example/scurvy" and "vitamin C" in verdict["quote"]
    assert [s.output for s in answer.trace if s.name == "verify"] == [verdict]
    # the same citation behind an answer the page does not support
    answer, _ = await solve("search_agent", toy_item, "type1", examinee=FakeExaminee(toy_item, tool_turns=2),
                            tools=FakeToolset())
    assert answer.choice == "A" and answer.extra["verification"]["verdict"] == "unsupported"
    # cited from a search snippet only: the page was never fetched in this case
    answer, _ = await solve("search_agent", toy_item, "type1", examinee=FakeExaminee(toy_item, tool_turns=1),
                            tools=FakeToolset())
    assert answer.extra["verification"]["verdict"] == "not_visited"
    assert answer.extra["verification"]["unvisited_cited"] == ["https://ref.example/scurvy"]
    answer, _ = await solve("search_agent", toy_item, "clean", tools=FakeToolset())
    assert answer.extra["verification"]["verdict"] == "uncited"
    answer, _ = await solve("search_agent", toy_item, "type1", examinee=FakeExaminee(toy_item, tool_turns=2),
                            tools=FakeToolset(), verify=False)
    assert "verification" not in answer.extra and not any(s.name == "verify" for s in answer.trace)


def test_verify_citations_rules() -> None:
    options = {"A": "Vitamin A", "B": "Vitamin C", "C": "7", "D": "坏血病"}
    pages = [
        {"url": "https://www.ref.example/a/", "final_url": "https://www.ref.example/a/",
         "text": "Vitamin A is not a cause of scurvy. Scurvy follows a lack of vitamin C in the diet."},
        {"url": "https://ref.example/zh", "final_url": "https://ref.example/zh", "text": "缺乏维生素C会导致坏血病。"},
    ]
    negated = verify_citations("See https://ref.example/a. Final answer: A", "A", options, pages)
    assert negated["verdict"] == "unsupported" and negated["visited_cited"] == ["https://ref.example/a"]
    quoted = verify_citations(
            'As https://ref.example/a puts it, "scurvy follows a lack of vitamin C ... in the diet". Final answer: B',
            "B", options, pages)
    assert (quoted["verdict"], quoted["method"]) == ("supported", "answer_quote")
    invented = verify_citations('"Seven days is the rule of thumb here" (https://ref.example/a) Final answer: C',
                                "C", options, pages)
    assert invented["verdict"] == "unsupported"  # the quote is not on the page; "7" is not checkable
    short = verify_citations('"Scurvy follows a lack of vitamin C" https://ref.example/a Final answer: C', "C",
                             options, pages)
    assert short["verdict"] == "quoted"
    chinese = verify_citations("https://ref.example/zh 答案：D", "D", options, pages)
    assert chinese["verdict"] == "supported"
    mixed = verify_citations("https://ref.example/a and https://made-up.example/x Final answer: B", "B", options, pages)
    assert mixed["verdict"] == "supported" and mixed["unvisited_cited"] == ["https://made-up.example/x"]
    assert verify_citations("https://made-up.example/x", "B", options, pages)["verdict"] == "not_visited"


# --- escalate ------------------------------------------------------------------------------------


async def test_escalate_stops_when_the_warning_and_prior_agree(toy_item: Item) -> None:
    examinee = FakeExaminee(toy_item, gullible=False)
    answer, _ = await solve("escalate", toy_item, "type1", examinee=examinee, tools=FakeToolset())
    assert answer.extra["escalated"] is False
    assert answer.llm_calls == 2 and answer.tool_calls == 0
    assert answer.choice == toy_item.gold


async def test_escalate_verifies_the_conflicting_claim_on_disagreement(toy_item: Item) -> None:
    answer, model = await solve("escalate", toy_item, "type1", tools=FakeToolset())
    assert answer.extra["escalated"] is True
    assert answer.extra["warned"] == "A" and answer.extra["prior"] == toy_item.gold
    assert answer.extra["verified_sentences"] == [0]
    assert [v["verdict"] for v in answer.extra["verdicts"]] == ["refuted"]
    assert answer.choice == toy_item.gold
    assert "[REFUTED]" in sent_prompts(model)[-1]


def test_escalate_targets_only_the_sentences_arguing_for_the_in_context_answer(
    toy_item: Item,
) -> None:
    case = toy_case(toy_item, "type2").view()
    assert sentences_supporting(case, "A") == [0]
    assert sentences_supporting(case, "D") == [3]
    assert sentences_supporting(case, None) == [0, 1, 2, 3]


async def test_escalate_checks_only_the_conflicting_sentence_in_type2(toy_item: Item) -> None:
    examinee = FakeExaminee(toy_item)

    def script(messages: list[Any], tools: list[Any]) -> Any:
        text = "\n".join(message_text(m) for m in messages)
        if "Caution:" in text:  # the warned answer is swayed towards D
            return "The guideline says vitamin K.\nFinal answer: D"
        return examinee(messages, tools)

    answer, model = await solve("escalate", toy_item, "type2", examinee=script, tools=FakeToolset())
    assert answer.extra["escalated"] is True and answer.extra["verified_sentences"] == [3]
    lines = sent_prompts(model)[-1].splitlines()
    assert f"[REFUTED] {toy_item.contexts['D']}" in lines
    assert f"[NOT CHECKED] {toy_item.contexts['A']}" in lines


# --- isolate_vote --------------------------------------------------------------------------------


def ballots(prior: str | None, *context: str | None, prior_weight: float = 1.0) -> list[Ballot]:
    out = [Ballot(source="prior", index=None, choice=prior, weight=prior_weight)]
    out += [Ballot(source="context", index=i, choice=c, weight=1.0) for i, c in enumerate(context)]
    return out


KEYS = ["A", "B", "C", "D"]


def test_vote_one_false_sentence_cannot_outvote_the_prior() -> None:
    result = decide_vote(ballots("B", "A"), KEYS, margin=1)
    assert (result.choice, result.decided_by) == ("B", "fallback_prior")


def test_vote_margin_met_and_missed() -> None:
    assert decide_vote(ballots("B", "A", "A"), KEYS, margin=1).choice == "A"
    missed = decide_vote(ballots("B", "A", "A"), KEYS, margin=2)
    assert (missed.choice, missed.decided_by, missed.lead) == ("B", "fallback_prior", 1.0)
    assert decide_vote(ballots("B", "A", "A", "A"), KEYS, margin=2).choice == "A"


def test_vote_ties_and_weights() -> None:
    tie = decide_vote(ballots("B", "A"), KEYS, margin=0)
    assert (tie.choice, tie.decided_by) == ("B", "margin")  # plurality; ties go to the prior
    assert decide_vote(ballots("B", "A", "A", prior_weight=2.0), KEYS, margin=1).choice == "B"
    assert decide_vote(ballots("B", "A", "A", prior_weight=0.0), KEYS, margin=1).choice == "A"


def test_vote_abstentions_carry_no_weight() -> None:
    result = decide_vote(ballots("B", None, None, "A"), KEYS, margin=1)
    assert result.tally == {"B": 1.0, "A": 1.0} and result.choice == "B"
    assert decide_vote(ballots(None), KEYS, margin=1).decided_by == "no_votes"
    unsure = decide_vote(ballots(None, "A", "C"), KEYS, margin=1)
    assert (unsure.choice, unsure.decided_by) == (None, "fallback_plurality")


async def test_isolate_vote_type2_true_sentence_and_prior_outvote_the_rest(toy_item: Item) -> None:
    answer, model = await solve("isolate_vote", toy_item, "type2")
    assert answer.choice == toy_item.gold and answer.extra["decided_by"] == "margin"
    assert answer.extra["tally"] == {"B": 2.0, "A": 1.0, "C": 1.0, "D": 1.0}
    assert len(answer.extra["votes"]) == 5 and answer.llm_calls == 5
    isolated = [p for p in sent_prompts(model) if "single statement" in p]
    assert len(isolated) == 4
    assert all(sum(s in p for s in toy_item.contexts.values()) == 1 for p in isolated)


async def test_isolate_vote_type1_keeps_the_prior_answer(toy_item: Item) -> None:
    answer, _ = await solve("isolate_vote", toy_item, "type1")
    assert answer.choice == toy_item.gold and answer.extra["decided_by"] == "fallback_prior"


async def test_isolate_vote_unsure_is_an_abstention(toy_item: Item) -> None:
    examinee = FakeExaminee(toy_item)

    def script(messages: list[Any], tools: list[Any]) -> Any:
        prompt = message_text(messages[-1])
        if "UNSURE" in prompt and "Additional Clinical Context" in prompt:
            return "It blames vitamin A, which I cannot confirm.\nFinal answer: **UNSURE**"
        return examinee(messages, tools)

    answer, _ = await solve("isolate_vote", toy_item, "type2", examinee=script)
    assert [v["choice"] for v in answer.extra["votes"]] == ["B", None, None, None, None]
    assert answer.choice == "B" and answer.extra["decided_by"] == "margin"


def unsure_model(item: Item, *, knows: str) -> Any:
    """A model that believes ``knows`` but abstains when allowed to, and that, shown one
    statement on its own, backs only a statement naming the gold option (it can tell that
    the false ones contradict the textbook, not which answer is right without help)."""
    examinee = FakeExaminee(item, knows=knows)

    def script(messages: list[Any], tools: list[Any]) -> Any:
        prompt = message_text(messages[-1])
        if "UNSURE" not in prompt:
            return examinee(messages, tools)
        if "Additional Clinical Context" not in prompt:
            return "I do not remember this well enough.\nFinal answer: UNSURE"
        if item.contexts[item.gold] in prompt:
            return f"The statement fits what I know.\nFinal answer: {item.gold}"
        return "That statement conflicts with what I know.\nFinal answer: UNSURE"

    return script


async def test_isolate_vote_differs_from_context_blind_on_type2_recovery(toy_item: Item) -> None:
    """A clean-wrong model that is unsure: the true sentence recovers the answer through
    isolate_vote, while context_blind (which never sees context) stays wrong."""
    wrong = "A"
    blind, _ = await solve("context_blind", toy_item, "type2", examinee=unsure_model(toy_item, knows=wrong))
    voted, _ = await solve("isolate_vote", toy_item, "type2", examinee=unsure_model(toy_item, knows=wrong))
    clean, _ = await solve("isolate_vote", toy_item, "clean", examinee=unsure_model(toy_item, knows=wrong))
    assert blind.choice == wrong and clean.choice == wrong  # wrong on clean: recovery is possible
    assert voted.choice == toy_item.gold
    assert voted.extra["votes"][0] == {"source": "prior", "index": None, "choice": None, "weight": 1.0}
    # without abstention the old behaviour returns: the context-free answer always stands
    kept, _ = await solve("isolate_vote", toy_item, "type2", examinee=FakeExaminee(toy_item, knows=wrong),
                          prior_may_abstain=False)
    assert kept.choice == wrong


async def test_isolate_vote_type1_follows_context_only_where_the_model_does_not_know(toy_item: Item) -> None:
    target = "A"
    gullible_unsure = FakeExaminee(toy_item)

    def script(messages: list[Any], tools: list[Any]) -> Any:
        prompt = message_text(messages[-1])
        if "UNSURE" in prompt and "Additional Clinical Context" not in prompt:
            return "Not sure.\nFinal answer: UNSURE"
        return gullible_unsure(messages, tools)

    unsure, _ = await solve("isolate_vote", toy_item, "type1", examinee=script)
    assert unsure.choice == target and unsure.extra["decided_by"] == "margin"
    confident, _ = await solve("isolate_vote", toy_item, "type1")
    assert confident.choice == toy_item.gold


# --- role models ---------------------------------------------------------------------------------


async def test_role_models_are_resolved_through_the_context(toy_item: Item) -> None:
    base = ScriptedChatModel(outputs=FakeExaminee(toy_item))
    verifier = ScriptedChatModel(outputs=FakeExaminee(toy_item))
    built: list[str] = []

    def factory(spec: str) -> ScriptedChatModel:
        built.append(spec)
        return verifier

    ctx = DefenderContext(
        model=base, model_spec="mock/base", tools=FakeToolset(), model_factory=factory
    )
    answer = await create_defender("claim_verify", {"verifier_model": "mock/verifier"})(
        toy_case(toy_item, "type2"), ctx
    )
    assert built and set(built) == {"mock/verifier"}
    assert len(verifier.calls) == 4 and all(
        '"verdict"' in message_text(c["messages"][-1]) for c in verifier.calls
    )
    assert len(base.calls) == 2  # split + final answer stay on the examined model
    assert answer.llm_calls == 6 and answer.choice == toy_item.gold


# --- prior_reconcile -----------------------------------------------------------------------------


async def test_prior_reconcile_stops_when_answers_agree(toy_item: Item) -> None:
    examinee = FakeExaminee(toy_item, gullible=False)
    answer, _ = await solve("prior_reconcile", toy_item, "type1", examinee=examinee)
    assert (
        answer.llm_calls == 2
        and answer.extra["agreed"] is True
        and answer.extra["reconciled"] is None
    )


async def test_prior_reconcile_reconciles_a_conflict(toy_item: Item) -> None:
    answer, model = await solve("prior_reconcile", toy_item, "type1")
    assert answer.llm_calls == 3
    assert (answer.extra["prior"], answer.extra["contextual"], answer.extra["reconciled"]) == (
        "B",
        "A",
        "B",
    )
    last = sent_prompts(model)[-1]
    assert (
        "Answer from your own knowledge: B" in last
        and "Answer after reading the context: A" in last
    )
    assert answer.choice == "B"


# --- spotlight -----------------------------------------------------------------------------------


async def test_spotlight_datamarks_the_context(toy_item: Item) -> None:
    answer, model = await solve("spotlight", toy_item, "type1")
    system = message_text(model.calls[0]["messages"][0])
    assert "'^'" in system
    assert "Scurvy^is^caused^by^a^lack^of^vitamin^A," in sent_prompts(model)[0]
    assert answer.llm_calls == 1


async def test_spotlight_delimits_the_context(toy_item: Item) -> None:
    _, model = await solve("spotlight", toy_item, "type2", mode="delimit")
    prompt = sent_prompts(model)[0]
    assert (
        prompt.index(DELIMITERS[0])
        < prompt.index(toy_item.contexts["A"])
        < prompt.index(DELIMITERS[1])
    )


def test_spotlight_rejects_a_whitespace_marker() -> None:
    with pytest.raises(ValueError):
        create_defender("spotlight", {"marker": "^ "})
