"""One line of ``records.jsonl``: a graded (model, defender, protocol, item, target).

Kept free of LangChain and of the defender layers so that every reader of a run folder
(report, view, export, review) loads it without the model stack.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, model_serializer

from medmis.agents import Usage
from medmis.tools import PoisonExposure

ProtocolName = Literal["clean", "type1", "type2"]
PROTOCOLS: tuple[ProtocolName, ...] = ("clean", "type1", "type2")


def item_key(subset: str, item_id: str) -> str:
    """The namespaced identity of an item (the released id is unique only within a subset)."""
    return f"{subset}/{item_id}"


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
    poison: PoisonExposure | None = None
    """What the case saw of a poisoned web (``--poison``); None, and left out of the line,
    for a run without one (its records read as before the field existed)."""
    answer_format: Literal["mcq", "open"] = "mcq"
    """``open``: asked without options (``medmis run --answer-format open``); ``choice`` and
    ``correct`` are then None and ``raw`` holds the answer. Left out of the line for ``mcq``."""
    raw: str | None = None
    """The free-text answer of an open-ended case (None otherwise, and left out of the line):
    what ``medmis grade`` grades."""
    epoch: int = Field(default=0, ge=0)
    """Which repeat of the case this is (``--epochs E``: 0 to E-1). Left out of the line for
    epoch 0, so a run of one epoch writes, and an older folder reads, as before epochs existed."""

    @model_serializer(mode="wrap")
    def _without_defaults(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # fields that only some runs have stay out of the others' lines, which therefore read
        # as before those fields existed
        data: dict[str, Any] = handler(self)
        if data.get("poison", 0) is None:
            del data["poison"]
        if data.get("answer_format") == "mcq":
            del data["answer_format"]
        if data.get("raw", 0) is None:
            del data["raw"]
        if data.get("epoch") == 0:
            del data["epoch"]
        return data

    @property
    def is_open(self) -> bool:
        """Whether the record is an open-ended answer (ungraded by the harness)."""
        return self.answer_format == "open"

    @property
    def item_key(self) -> str:
        """``"SUBSET/item_id"``, the same identity as ``Item.key``."""
        return item_key(self.subset, self.item_id)

    @property
    def key(self) -> tuple[str, str, str, str, str | None, int]:
        """The resume key: ``(model, defender, protocol, item_key, target, epoch)``."""
        return (self.model, self.defender, self.protocol, self.item_key, self.target, self.epoch)

    @property
    def case_key(self) -> tuple[str, str, str, str, str | None]:
        """``(model, defender, protocol, item_key, target)``: the case answered, in any epoch."""
        return (self.model, self.defender, self.protocol, self.item_key, self.target)
