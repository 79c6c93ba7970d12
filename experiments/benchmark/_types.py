"""Typed data that crosses every boundary: items, cases, answers, traces and records.

Data flows one way: rows -> ``Item`` -> ``Case`` -> defender -> ``Answer`` -> ``Record``.
Everything that is serialised is a pydantic model so that files written by one version of
the toolkit are validated when read by another.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

ProtocolName = Literal["clean", "type1", "type2"]
PROTOCOLS: tuple[ProtocolName, ...] = ("clean", "type1", "type2")

SUBSETS: tuple[str, ...] = (
    "MEDMISQA",
    "MEDMISMCQA",
    "MEDMISXPERTQA",
    "MEDMISJOURNEY",
    "MEDMISHLE",
)

CONTENT_TYPES: tuple[str, ...] = (
    "Relationship / Sequence Inversion",
    "Threshold / Reference Corruption",
    "Cue Remapping",
    "Spurious Anchoring",
    "Exception Poisoning",
)

DEFAULT_PROMPT = "paper"
"""The prompt preset a case is put in unless a run says otherwise (see ``_prompts``)."""

PROVENANCES: tuple[str, ...] = (
    "Neutral False Statement",
    "Patient Self-Diagnosis / Belief / Claim",
    "Authority (Guideline / Discharge Note / SOP)",
)


def item_key(subset: str, item_id: str) -> str:
    """The namespaced identity of an item (the released id is unique only within a subset)."""
    return f"{subset}/{item_id}"


class Item(BaseModel):
    """One benchmark question with its option-aligned context sentences.

    ``options`` keeps display order (dicts are ordered). ``contexts`` maps an option key to
    the sentence written for it: the gold key's sentence is a truthful affirmation, every
    other one is a false sentence that argues for that option.

    ``id`` is the id as released; ids are unique only within a subset, so ``key``
    (``"SUBSET/id"``) is what identifies an item everywhere in a run: resume keys, seeded
    draws, pairing in metrics.
    """

    model_config = ConfigDict(frozen=True)

    id: str
    subset: str
    question: str
    options: dict[str, str]
    gold: str
    contexts: dict[str, str] = Field(default_factory=dict)
    content_type: str | None = None
    provenance: str | None = None
    language: Literal["en", "zh"] = "en"

    @property
    def key(self) -> str:
        """The item's identity across subsets: ``f"{subset}/{id}"``."""
        return item_key(self.subset, self.id)

    @property
    def keys(self) -> list[str]:
        return list(self.options)

    @property
    def wrong_keys(self) -> list[str]:
        return [k for k in self.options if k != self.gold]


class ContextSentence(BaseModel):
    """A sentence delivered as added context. ``option`` and ``truthful`` are never shown to
    the model: they exist so that defenders' traces and metrics can be analysed afterwards."""

    model_config = ConfigDict(frozen=True)

    text: str
    option: str
    truthful: bool


class Case(BaseModel):
    """An item under one delivery protocol: what a defender is asked to answer.

    ``prompt`` names the run's prompt preset (``paper`` or ``toolkit``), so that
    ``render_prompt(case)`` puts the case to the model in the run's wording.
    """

    model_config = ConfigDict(frozen=True)

    item: Item
    protocol: ProtocolName
    target: str | None = None
    seed: int = 0
    context: tuple[ContextSentence, ...] = ()
    prompt: str = DEFAULT_PROMPT

    @property
    def key(self) -> tuple[str, str, str | None]:
        """``(item.key, protocol, target)``: one case of one item."""
        return (self.item.key, self.protocol, self.target)

    @property
    def context_texts(self) -> list[str]:
        return [c.text for c in self.context]


class Usage(BaseModel):
    input_tokens: int = 0
    output_tokens: int = 0

    def add(self, other: Usage) -> None:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens


TraceKind = Literal["model", "tool", "extract", "node", "note"]


class TraceStep(BaseModel):
    """One step of a defender's work, kept so that a case can be audited afterwards.

    For ``model`` steps ``input`` holds the exact messages sent and ``output`` the raw reply;
    for ``tool`` steps the arguments and the result (or the model-visible error).
    ``cache_hit`` is None when no record/replay store was consulted.
    """

    kind: TraceKind
    name: str
    input: Any = None
    output: Any = None
    error: str | None = None
    cache_hit: bool | None = None
    usage: Usage | None = None
    latency_s: float = 0.0


class Answer(BaseModel):
    """What a defender returns for a case. ``choice`` is None when nothing could be parsed;
    ``error`` is set when the case could not be completed (it is then never graded)."""

    choice: str | None = None
    raw: str = ""
    method: str = "none"
    error: str | None = None
    usage: Usage = Field(default_factory=Usage)
    llm_calls: int = 0
    tool_calls: int = 0
    trace: list[TraceStep] = Field(default_factory=list)
    extra: dict[str, Any] = Field(default_factory=dict)


class Record(BaseModel):
    """One line of ``records.jsonl``: a graded (model, defender, protocol, item, target)."""

    model: str
    defender: str
    protocol: ProtocolName
    item_id: str
    subset: str
    target: str | None = None
    gold: str
    choice: str | None = None
    correct: bool | None = None
    content_type: str | None = None
    provenance: str | None = None
    error: str | None = None
    usage: Usage = Field(default_factory=Usage)
    llm_calls: int = 0
    tool_calls: int = 0
    latency_s: float = 0.0
    seed: int = 0
    method: str = "none"
    prompt: str | None = None
    prompt_version: str | None = None
    defender_options: dict[str, Any] = Field(default_factory=dict)
    extra: dict[str, Any] = Field(default_factory=dict)
    trace_file: str | None = None

    @property
    def item_key(self) -> str:
        """``"SUBSET/item_id"``, the same identity as ``Item.key``."""
        return item_key(self.subset, self.item_id)

    @property
    def key(self) -> tuple[str, str, str, str, str | None]:
        """The resume key: ``(model, defender, protocol, item_key, target)``."""
        return (self.model, self.defender, self.protocol, self.item_key, self.target)
