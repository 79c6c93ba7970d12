"""Rubric files: one JSON object per item, each a list of criteria in HealthBench's shape.

A line reads ``{"item_id", "rubric_version", "criteria": [{"id", "text", "points", "kind",
"target"}]}``: ``points`` is an integer (negative for undesirable behaviour, as HealthBench's
rubrics); ``kind`` one of :data:`CRITERION_KINDS`; ``target`` the option key the injection argues
for (set on ``endorses_injection`` criteria, one per Type 1 target; else null). The file is read
through the toolkit's one user-file loader (nesting limit, duplicate keys refused), so every
problem is one line ``file:line: cause`` (exit 2 at the CLI).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from medmis.tools import UserFileError, json_lines, validation_line

CriterionKind = Literal["correct_concept", "reasoning", "endorses_injection", "unsafe_action"]
CRITERION_KINDS: tuple[str, ...] = ("correct_concept", "reasoning", "endorses_injection", "unsafe_action")


class Criterion(BaseModel):
    """One rubric criterion (HealthBench's ``criterion`` + ``points``, with our ``kind``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1)
    text: str = Field(min_length=1)
    points: int
    kind: CriterionKind
    target: str | None = None

    @model_validator(mode="after")
    def _target_fits_kind(self) -> Criterion:
        if self.kind == "endorses_injection" and not self.target:
            raise ValueError("an endorses_injection criterion names its target option")
        if self.kind == "endorses_injection" and self.points >= 0:
            raise ValueError("an endorses_injection criterion has negative points")
        if self.points == 0:
            raise ValueError("a criterion with 0 points changes no score")
        return self


class ItemRubric(BaseModel):
    """Every criterion of one item."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    item_id: str = Field(min_length=1)
    rubric_version: str = Field(min_length=1)
    question: str | None = None
    """The question as asked without options (optional; shown to the judges when present)."""
    criteria: tuple[Criterion, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_ids(self) -> ItemRubric:
        ids = [c.id for c in self.criteria]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise ValueError(f"criterion id {dup[0]!r} appears twice")
        if not any(c.points > 0 for c in self.criteria):
            raise ValueError("no criterion has positive points (the score would be undefined)")
        return self

    def for_case(self, protocol: str, target: str | None) -> tuple[Criterion, ...]:
        """The criteria an answer is graded on: those that apply to what it was shown. Every
        ``correct_concept``, ``reasoning`` and ``unsafe_action`` criterion; and the
        ``endorses_injection`` criterion of each false claim the answer saw (Type 1: its target's;
        Type 2: every one; clean: none; a claim never shown cannot be taken up, and a judge's
        false alarm on it would lower the clean side of every pair)."""
        return tuple(c for c in self.criteria if c.kind != "endorses_injection"
                     or protocol == "type2" or (protocol == "type1" and c.target == target))


class RubricSet(BaseModel):
    """A whole rubric file: the rubrics by item and the file's sha256."""

    model_config = ConfigDict(frozen=True)

    path: str
    sha256: str
    items: Mapping[str, ItemRubric]


def parse_rubrics(data: bytes, file: str | Path) -> RubricSet:
    """Validate rubric JSON Lines.

    Raises:
        UserFileError: A line that is not JSON, nests too deep, names a key twice, does not fit
            the schema, or repeats an item id (``file:line: cause``).
    """
    items: dict[str, ItemRubric] = {}
    for line, value in json_lines(data, file):
        try:
            rubric = ItemRubric.model_validate(value)
        except ValidationError as exc:
            raise UserFileError(file, line, validation_line(exc)) from None
        if rubric.item_id in items:
            raise UserFileError(file, line, f"item {rubric.item_id!r} has a rubric on an earlier line")
        items[rubric.item_id] = rubric
    if not items:
        raise UserFileError(file, None, "no rubric in the file")
    return RubricSet(path=str(file), sha256=hashlib.sha256(data).hexdigest(), items=items)


def load_rubrics(path: str | Path) -> RubricSet:
    """Read a rubric file (see :func:`parse_rubrics`).

    Raises:
        UserFileError: The file is unreadable or invalid (one line).
    """
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise UserFileError(path, None, f"cannot read the rubric file ({exc.strerror or exc})") from None
    return parse_rubrics(data, path)


def dump_rubrics(rubrics: Iterable[ItemRubric]) -> str:
    """Rubrics as JSON Lines text (one item per line, keys in schema order)."""
    return "".join(r.model_dump_json() + "\n" for r in rubrics)
