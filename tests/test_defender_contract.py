"""One contract for every registered defender (built-ins, agentic ones and plug-ins).

Each defender answers clean / type1 / type2 cases with a scripted examinee that answers every
prompt sensibly, against working tools, tools that always fail, and no tools at all. It must
return a traced, costed Answer and never crash on tool failures; replay misses and provider
errors must stop the case instead of becoming answers.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from fakes import FakeExaminee, FakeToolset, available, toy_case

from medmis.agents import BlockedResponseError, ScriptedChatModel
from medmis.defenses import DefenderContext, create_defender, list_defenders
from medmis.experiments import Answer, Item
from medmis.tools import ReplayMissError, ToolError

SPECS = {spec.name: spec for spec in list_defenders()}
PROTOCOLS = ("clean", "type1", "type2")
TOOLSETS: dict[str, Callable[[], FakeToolset | None]] = {
    "tools": FakeToolset,
    "failing_tools": lambda: FakeToolset(fail=ToolError("upstream returned 503", kind="http")),
    "no_tools": lambda: None,
}
# these search on the (gullible examinee's) type1 case, so a replay miss must surface
SEARCH_ON_TYPE1 = {"search_agent", "claim_verify", "escalate"}
# defenders documented to cost exactly one model call on a case without context
ONE_CALL_WHEN_CLEAN = {
    "none",
    "warning",
    "context_blind",
    "spotlight",
    "search_agent",
    "claim_verify",
    "prior_reconcile",
    "isolate_vote",
    "escalate",
    "robustrag",
}


def test_the_agentic_defenders_are_registered() -> None:
    assert {
        "search_agent",
        "claim_verify",
        "prior_reconcile",
        "isolate_vote",
        "spotlight",
        "escalate",
    } <= set(SPECS)
    for name in ("search_agent", "claim_verify", "escalate"):
        assert SPECS[name].uses_tools


@pytest.mark.parametrize("name", available(sorted(SPECS)))
def test_options_have_defaults_and_reject_unknown_keys(name: str) -> None:
    spec = SPECS[name]
    assert spec.description
    spec.options()  # every option has a default
    json.dumps(spec.options().model_dump(mode="json"))
    with pytest.raises(ValueError):
        create_defender(name, {"no_such_option": 1})


@pytest.mark.parametrize("toolset", sorted(TOOLSETS))
@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("name", available(sorted(SPECS)))
async def test_defender_contract(name: str, protocol: str, toolset: str, toy_item: Item) -> None:
    tools = TOOLSETS[toolset]()
    model = ScriptedChatModel(outputs=FakeExaminee(toy_item, tool_turns=2))
    ctx = DefenderContext(model=model, model_spec="mock/fake", tools=tools)

    answer = await create_defender(name)(toy_case(toy_item, protocol), ctx)

    assert isinstance(answer, Answer)
    assert answer.error is None
    assert answer.choice in toy_item.options, answer.raw
    assert answer.llm_calls > 0 and answer.llm_calls == len(model.calls)
    assert answer.llm_calls == sum(1 for s in answer.trace if s.kind == "model")
    assert answer.tool_calls == sum(1 for s in answer.trace if s.kind == "tool")
    assert answer.usage.input_tokens > 0 and answer.usage.output_tokens > 0
    json.loads(answer.model_dump_json())  # the record writer can serialise it
    if toolset == "no_tools":
        assert answer.tool_calls == 0
    if toolset == "failing_tools":
        assert all(s.error for s in answer.trace if s.kind == "tool")
    if protocol == "clean" and name in ONE_CALL_WHEN_CLEAN:
        assert answer.llm_calls == 1


@pytest.mark.parametrize("name", available(sorted(SPECS)))
async def test_provider_errors_stop_the_case(name: str, toy_item: Item) -> None:
    def script(messages: list[Any], tools: list[Any]) -> Any:
        return BlockedResponseError("safety block")

    ctx = DefenderContext(
        model=ScriptedChatModel(outputs=script), model_spec="mock/fake", tools=FakeToolset()
    )
    with pytest.raises(BlockedResponseError):
        await create_defender(name)(toy_case(toy_item, "type1"), ctx)


@pytest.mark.parametrize("name", available(sorted(n for n, s in SPECS.items() if s.uses_tools)))
async def test_replay_misses_stop_the_case(name: str, toy_item: Item) -> None:
    tools = FakeToolset(fail=ReplayMissError("no recorded entry for search_web"))
    ctx = DefenderContext(
        model=ScriptedChatModel(outputs=FakeExaminee(toy_item)), model_spec="mock/fake", tools=tools
    )
    try:
        await create_defender(name)(toy_case(toy_item, "type1"), ctx)
    except ReplayMissError:
        return
    # a plug-in may legitimately decide not to search; it must not have swallowed a miss
    assert name not in SEARCH_ON_TYPE1, f"{name} swallowed a replay miss"
    assert ctx.tool_calls == 0
