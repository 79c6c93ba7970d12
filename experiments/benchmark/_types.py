"""The dataset's typed data: items and cases (``Record``, a graded case, is the records package's).

Data flows one way: rows -> ``Item`` -> ``Case`` -> defender -> ``Answer`` -> ``Record``.
A defender never sees the ``Case``: it is handed a ``CaseView`` (``Case.view()``), the text a
deployed system would receive, while the harness keeps the case for grading. ``CaseView`` and
``Answer`` are the defender contract's (``medmis.defenses``).
Everything that is serialised is a pydantic model so that files written by one version of
the toolkit are validated when read by another.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from medmis.defenses import DEFAULT_PROMPT, AnswerFormat, CaseView
from medmis.experiments.records import ProtocolName, item_key

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


RELEASED_STEM_PRESETS = frozenset({"paper"})
"""Prompt presets that show a question's stem as released, options embedded in it included
(``Item.question_for``)."""

PROVENANCES: tuple[str, ...] = (
    "Neutral False Statement",
    "Patient Self-Diagnosis / Belief / Claim",
    "Authority (Guideline / Discharge Note / SOP)",
)


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
    released_question: str | None = None
    """The question as released when it differs from ``question``: a stem that embeds
    ``(A) ... (B) ...`` while the option columns hold the same options (``question`` is then
    the stem without them). See :meth:`question_for`."""

    @property
    def key(self) -> str:
        """The item's identity across subsets: ``f"{subset}/{id}"``."""
        return item_key(self.subset, self.id)

    def question_for(self, prompt: str) -> str:
        """The question as ``prompt`` shows it: ``paper`` keeps the stem as released, as the
        reference evaluation does (its options come from the columns and the stem is left
        alone); ``toolkit`` shows the options once."""
        if prompt in RELEASED_STEM_PRESETS and self.released_question is not None:
            return self.released_question
        return self.question

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
    answer_format: AnswerFormat = "mcq"
    """``open``: asked without the item's options, for a free-text answer (the view withholds
    them; the harness does not grade the answer)."""
    epoch: int = Field(default=0, ge=0)
    """Which repeat of the case this is (``--epochs E``: 0 to E-1): the same question and
    context, answered again by a model that samples. Not shown to the defender."""

    @property
    def key(self) -> tuple[str, str, str | None]:
        """``(item.key, protocol, target)``: one case of one item, in every epoch (a record's
        key, ``Record.key``, adds the epoch)."""
        return (self.item.key, self.protocol, self.target)

    @property
    def context_texts(self) -> list[str]:
        return [c.text for c in self.context]

    def view(self) -> CaseView:
        """What a defender is given for this case: its item's question (as the run's prompt
        preset shows it) and options, its sentences' text."""
        # an open case shows the stem without the options a released stem may embed
        return CaseView(
            question=self.item.question if self.answer_format == "open" else self.item.question_for(self.prompt),
            options={} if self.answer_format == "open" else self.item.options,
            context=tuple(c.text for c in self.context),
            prompt=self.prompt,
            answer_format=self.answer_format,
        )
