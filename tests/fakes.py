"""Test doubles for defenders: an in-memory Toolset and a scripted examinee that answers sensibly.

``FakeToolset`` searches a tiny hand-written corpus (word overlap ranking) and serves its pages;
it can fail every call, add latency, and reports how many calls were in flight at once.

``FakeExaminee`` is a callable script for ``ScriptedChatModel``: JSON for structured prompts
(recognised by the key they ask for), tool calls while tools are bound, and "Final answer: X"
otherwise. Its answer follows a small, explicit policy so behaviour tests can reason about it:
a SUPPORTED sentence wins, a REFUTED one is ignored, a gullible examinee follows any other
context sentence that names an option, and without context it answers from ``knows``.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from agents._mock import message_text
from experiments import Case, ContextSentence, Item
from tools import Page, SearchResult, ToolError


@dataclass(frozen=True)
class FakeDoc:
    url: str
    title: str
    text: str


SCURVY_CORPUS: tuple[FakeDoc, ...] = (
    FakeDoc(
        "https://ref.example/scurvy",
        "Scurvy - clinical reference",
        "Scurvy is caused by a deficiency of vitamin C (ascorbic acid). Vitamin C deficiency impairs "
        "collagen synthesis, which causes gum bleeding, poor wound healing and perifollicular haemorrhage.",
    ),
    FakeDoc(
        "https://ref.example/vitamin-k",
        "Vitamin K deficiency",
        "Vitamin K deficiency causes bleeding through reduced clotting factors. It does not cause scurvy.",
    ),
    FakeDoc(
        "https://ref.example/vitamin-a",
        "Vitamin A deficiency",
        "Vitamin A deficiency causes night blindness and xerophthalmia; it is not a cause of scurvy.",
    ),
    FakeDoc(
        "https://ref.example/vitamin-d",
        "Vitamin D deficiency",
        "Vitamin D deficiency causes rickets in children and osteomalacia in adults.",
    ),
)

_WORD = re.compile(r"\w+")


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


class FakeToolset:
    """An in-memory ``tools.Toolset``.

    Args:
        corpus: The documents to search and serve.
        fail: Raised by every call when set (a ``ToolError`` or any other exception).
        delay: Seconds each call sleeps, so concurrency can be observed.
    """

    def __init__(
        self,
        corpus: Sequence[FakeDoc] = SCURVY_CORPUS,
        *,
        fail: BaseException | None = None,
        delay: float = 0.0,
    ) -> None:
        self.corpus = list(corpus)
        self.fail = fail
        self.delay = delay
        self.searches: list[str] = []
        self.visits: list[str] = []
        self.in_flight = 0
        self.max_in_flight = 0

    async def _enter(self) -> None:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
            if self.fail is not None:
                raise self.fail
        finally:
            self.in_flight -= 1

    async def search(self, query: str, *, max_results: int = 5) -> list[SearchResult]:
        self.searches.append(query)
        await self._enter()
        q = _words(query)
        scored = [
            (len(q & _words(d.title + " " + d.text)), i, d) for i, d in enumerate(self.corpus)
        ]
        ranked = [(s, d) for s, i, d in sorted(scored, key=lambda t: (-t[0], t[1])) if s > 0]
        return [
            SearchResult(title=d.title, url=d.url, snippet=d.text[:160], score=float(s))
            for s, d in ranked[:max_results]
        ]

    async def visit(self, url: str, *, goal: str | None = None, max_chars: int = 6000) -> Page:
        self.visits.append(url)
        await self._enter()
        for d in self.corpus:
            if d.url == url:
                return Page(
                    url=url,
                    final_url=url,
                    title=d.title,
                    text=d.text[:max_chars],
                    truncated=len(d.text) > max_chars,
                )
        raise ToolError(f"no page at {url}", kind="not_found")


def toy_case(item: Item, protocol: str, target: str | None = None) -> Case:
    """A case over ``item`` without going through the delivery module's sampling."""
    if protocol == "clean":
        return Case(item=item, protocol="clean")
    if protocol == "type1":
        key = target or next(k for k in item.wrong_keys if item.contexts.get(k))
        sentence = ContextSentence(text=item.contexts[key], option=key, truthful=False)
        return Case(item=item, protocol="type1", target=key, context=(sentence,))
    sentences = tuple(
        ContextSentence(text=t, option=k, truthful=k == item.gold) for k, t in item.contexts.items()
    )
    return Case(item=item, protocol="type2", context=sentences)


def _norm(text: str) -> str:
    return " " + " ".join(_WORD.findall(text.lower().replace("^", " "))) + " "


@dataclass
class FakeExaminee:
    """A callable script ``(messages, tools) -> output`` for ``ScriptedChatModel``.

    Attributes:
        item: The question being answered (its options are what the examinee recognises).
        knows: The answer from its own knowledge (default: the gold key).
        gullible: Follow an unrefuted context sentence that names an option.
        tool_turns: Tool-calling turns before answering while tools are bound.
        calls_per_turn: Tool calls issued per tool turn.
        repeat_calls: Issue the very same search every turn (to provoke duplicate refusal).
        answer_with_tools: Whether the final answer turn carries a final-answer line.
    """

    item: Item
    knows: str | None = None
    gullible: bool = True
    tool_turns: int = 1
    calls_per_turn: int = 1
    repeat_calls: bool = False
    answer_with_tools: bool = True
    prompts: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.knows is None:
            self.knows = self.item.gold

    # --- dispatch -------------------------------------------------------------------------

    def __call__(self, messages: list[BaseMessage], tools: list[dict[str, Any]]) -> AIMessage | str:
        human = next(
            (message_text(m) for m in reversed(messages) if isinstance(m, HumanMessage)), ""
        )
        self.prompts.append(human)
        if tools:
            return self._agent_turn(messages, human)
        if '"queries"' in human:
            return 'Here is my plan:\n```json\n{"queries": ["scurvy cause vitamin", "collagen synthesis vitamin"], "rationale": "check the cause"}\n```'
        if '"claims"' in human:
            return self._claims(human)
        if '"verdict"' in human:
            return self._verdict(human)
        return f"Reasoning step by step about the question.\nFinal answer: {self.decide(human)}"

    # --- structured steps -----------------------------------------------------------------

    def _claims(self, prompt: str) -> str:
        block = prompt.split("Statements:", 1)[-1]
        claims = [m.group(1).strip() for m in re.finditer(r"^\[\d+\]\s*(.+)$", block, re.MULTILINE)]
        return "Sure. " + json.dumps({"claims": claims}) + " Done."

    def mentions(self, text: str) -> list[str]:
        norm = _norm(text)
        return [k for k, v in self.item.options.items() if _norm(v) in norm]

    def _verdict(self, prompt: str) -> str:
        claim = prompt.split("Claim to check:", 1)[-1].split("\n\n", 1)[0].strip()
        named = self.mentions(claim)
        verdict = "not_enough_info"
        if self.item.gold in named:
            verdict = "supported"
        elif named:
            verdict = "refuted"
        urls = re.findall(r"https?://\S+", prompt)
        quote = ""
        if urls and verdict != "not_enough_info":
            quote = "Scurvy is caused by a deficiency of vitamin C (ascorbic acid)."
        return json.dumps({"verdict": verdict, "quote": quote, "url": urls[0] if urls else None})

    # --- agent loop -------------------------------------------------------------------------

    def _agent_turn(self, messages: list[BaseMessage], opening: str) -> AIMessage:
        turns = sum(1 for m in messages if isinstance(m, AIMessage) and m.tool_calls)
        if turns < self.tool_turns:
            calls = []
            last_tool = next(
                (message_text(m) for m in reversed(messages) if isinstance(m, ToolMessage)), ""
            )
            urls = re.findall(r"URL: (\S+)", last_tool)
            for j in range(self.calls_per_turn):
                if self.repeat_calls:
                    name, args = "search_web", {"query": "scurvy vitamin"}
                elif turns > 0 and urls and j == 0:
                    name, args = "visit_web", {"url": urls[0], "goal": "cause of scurvy"}
                else:
                    name, args = "search_web", {"query": f"scurvy vitamin deficiency {turns}-{j}"}
                calls.append(
                    {"name": name, "args": args, "id": f"call_{turns}_{j}", "type": "tool_call"}
                )
            return AIMessage(content="", tool_calls=calls)
        cited = re.findall(
            r"URL: (\S+)",
            "\n".join(message_text(m) for m in messages if isinstance(m, ToolMessage)),
        )
        source = f"According to {cited[0]}, " if cited else ""
        if not self.answer_with_tools:
            return AIMessage(content=f"{source}I am still unsure.")
        first_human = next(
            (message_text(m) for m in messages if isinstance(m, HumanMessage)), opening
        )
        return AIMessage(
            content=f"{source}the evidence settles it.\nFinal answer: {self.decide(first_human)}"
        )

    # --- the answer policy ----------------------------------------------------------------

    def context_lines(self, prompt: str) -> list[str]:
        if "Additional Clinical Context" not in prompt:
            return []
        block = prompt.split("Additional Clinical Context", 1)[1].split(":", 1)[-1]
        return [ln for ln in block.strip("\n").split("\n\n", 1)[0].splitlines() if ln.strip()]

    def decide(self, prompt: str) -> str:
        lines = self.context_lines(prompt)
        supported = [k for ln in lines if "[SUPPORTED]" in ln for k in self.mentions(ln)]
        if supported:
            return supported[0]
        if "Reconcile them" in prompt:
            return str(self.knows)
        if self.gullible:
            named = [k for ln in lines if "REFUTED" not in ln for k in self.mentions(ln)]
            if named:
                return str(self.knows) if self.knows in named else named[0]
        return str(self.knows)
