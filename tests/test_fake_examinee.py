"""The contract kit's fake examinee decides from the text it is shown, nothing else.

It must not read the answer key (the same case with another gold gives the same replies) nor
the words of our own prompts (the same evidence under renamed headings, labels and
instructions gives the same replies); and ``check_defender`` still holds every registered
defender to the contract with it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fakes import FakeExaminee, FakeToolset, available, check_defender, toy_case
from langchain_core.messages import BaseMessage, HumanMessage

from medmis.agents import ScriptedChatModel, message_text
from medmis.defenses import DefenderContext, create_defender, list_defenders
from medmis.experiments import Item

NAMES = available(sorted(spec.name for spec in list_defenders()))
PROTOCOLS = ("clean", "type1", "type2")

# Words our defenders' prompts use to frame evidence; a renamed one must change nothing.
RENAMES = {
    "Additional Clinical Context": "Background Notes",
    "additional clinical context": "background notes",
    "[SUPPORTED]": "[BACKED]",
    "[REFUTED]": "[CONTESTED]",
    "[NOT ENOUGH INFO]": "[OPEN]",
    "SUPPORTED": "BACKED",
    "REFUTED": "CONTESTED",
    "Claim to check:": "Statement under review:",
    "Statements:": "Sentences:",
    "Reconcile them.": "Weigh both answers.",
    "Evidence:": "Sources:",
}


def renamed(text: str) -> str:
    for old, new in RENAMES.items():
        text = text.replace(old, new)
    return text


def reply_text(reply: Any) -> str:
    return reply if isinstance(reply, str) else message_text(reply) + repr(reply.tool_calls)


async def run(name: str, item: Item, protocol: str) -> tuple[str | None, ScriptedChatModel]:
    # an explicit target: the default one is chosen among the wrong keys, which gold decides
    case = toy_case(item, protocol, target="A" if protocol == "type1" else None)
    model = ScriptedChatModel(outputs=FakeExaminee(item, tool_turns=2))
    ctx = DefenderContext(model=model, model_spec="mock/fake", tools=FakeToolset())
    answer = await create_defender(name)(case.view(), ctx)
    return answer.choice, model


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("name", NAMES)
async def test_the_fake_never_reads_gold(name: str, protocol: str, toy_item: Item) -> None:
    other_gold = toy_item.model_copy(update={"gold": "D"})
    choice, model = await run(name, toy_item, protocol)
    other_choice, other_model = await run(name, other_gold, protocol)
    assert other_choice == choice
    assert [reply_text(FakeExaminee(toy_item, tool_turns=2)(c["messages"], c["tools"]))
            for c in model.calls] == [
        reply_text(FakeExaminee(other_gold, tool_turns=2)(c["messages"], c["tools"]))
        for c in other_model.calls
    ]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("name", NAMES)
async def test_the_fake_ignores_the_wording_of_our_prompts(
    name: str, protocol: str, toy_item: Item
) -> None:
    _, model = await run(name, toy_item, protocol)
    for call in model.calls:
        messages: list[BaseMessage] = call["messages"]
        disguised = [
            m.model_copy(update={"content": renamed(m.content)}) if isinstance(m.content, str) else m
            for m in messages
        ]
        fake = FakeExaminee(toy_item, tool_turns=2)
        assert reply_text(fake(disguised, call["tools"])) == reply_text(
            fake(messages, call["tools"])
        ), f"{name}/{protocol}: the reply to {message_text(messages[-1])[:80]!r} changed"


def test_the_same_sentences_under_any_heading_give_the_same_answer(toy_item: Item) -> None:
    body = "\n".join(f"{k}: {v}" for k, v in toy_item.options.items())
    question = f"Question:\n{toy_item.question}\n\nOptions:\n{body}"
    sentence = toy_item.contexts["A"]
    gullible = FakeExaminee(toy_item)
    for heading in ("Additional Clinical Context:", "Notes from a colleague:", "<<ctx>>", ""):
        assert gullible.decide(f"{heading}\n{sentence}\n\n{question}") == "A"
    assert gullible.decide(question) == "B"  # its own knowledge: the test author's, not gold


def test_knowledge_comes_from_the_test_author_not_gold(toy_item: Item) -> None:
    assert FakeExaminee(toy_item).knows == "B"
    assert FakeExaminee(toy_item.model_copy(update={"gold": "C"})).knows == "B"
    assert FakeExaminee(toy_item, knowledge={toy_item.question: "Vitamin K"}).knows == "D"
    assert FakeExaminee(toy_item, knowledge={}).knows == "A"  # no belief: a guess


def test_verdicts_follow_the_shown_evidence(toy_item: Item) -> None:
    fake = FakeExaminee(toy_item)

    def verdict(claim: str, evidence: str) -> str:
        prompt = f"Check this:\n{claim}\n\nSources:\n{evidence}\n\nReply with a JSON \"verdict\"."
        return str(json.loads(str(fake([HumanMessage(prompt)], [])))["verdict"])

    backing = "Scurvy is caused by a deficiency of vitamin C (ascorbic acid)."
    assert verdict(toy_item.contexts["B"], backing) == "supported"
    assert verdict(toy_item.contexts["A"], backing) == "refuted"
    assert verdict(toy_item.contexts["A"], "Vitamin A deficiency is not a cause of scurvy.") == "refuted"
    assert verdict(toy_item.contexts["A"], "Vitamin D deficiency causes rickets.") == "not_enough_info"
    # the same claim with the evidence turned around: the verdict follows the evidence
    assert verdict(toy_item.contexts["A"], "Scurvy is caused by a deficiency of vitamin A.") == "supported"


@pytest.mark.parametrize("name", NAMES)
async def test_check_defender_holds_every_registered_defender(name: str) -> None:
    answers = await check_defender(name)
    assert len(answers) == 9
