"""What a defender is given and what it returns: :class:`CaseView` in, :class:`Answer` out.

A defender never sees the harness's ``Case`` (gold key, target, sentence labels, protocol):
it is handed a ``CaseView``, the text a deployed system would receive. The dataset types
that build views (``Item``, ``Case``) live in ``medmis.experiments.benchmark`` above this
layer; a case reaches the contract through its ``view()`` method (see :func:`as_view`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal, NoReturn, Protocol

from pydantic import BaseModel, Field

from medmis.agents import Usage

DEFAULT_PROMPT = "paper"
"""The prompt preset a case is put in unless a run says otherwise (see ``_prompts``)."""

AnswerFormat = Literal["mcq", "open"]
"""How a case is asked: ``mcq`` shows the options and asks for one; ``open`` shows the question
without its options and asks for a free-text answer with its explanation (graded afterwards,
by ``medmis grade``, never by the harness)."""
ANSWER_FORMATS: tuple[AnswerFormat, ...] = ("mcq", "open")


# Names a defender written against the full case may still reach for; the view answers them
# with an explanation instead of a bare AttributeError.
_WITHHELD = {
    "item": "use .question and .options",
    "gold": "a deployed system does not know the answer",
    "target": "a deployed system does not know which option the context argues for",
    "protocol": "a deployed system does not know how the context was made",
    "seed": "the run's seed is the harness's business",
    "key": "item ids are withheld (some encode the answer)",
}


@dataclass(frozen=True, slots=True)
class CaseView:
    """What a defender receives for one case: the question as a deployed system would see it.

    ``question``, ``options`` (key -> text, display order), ``context`` (the added sentences
    as plain text, in delivery order; empty on clean cases), ``prompt`` (the run's prompt
    preset name, so ``render_prompt(view)`` words it as the run does) and ``answer_format``
    (``mcq``, or ``open``: the options are withheld, ``options`` is empty, and the answer is
    free text). Nothing else: no gold
    key, no type1 target, no per-sentence option or truth label, no protocol name and no item
    id. The view is built from copies into immutable containers and keeps no reference to the
    :class:`Case` or :class:`Item` it came from, so no attribute path leads back to them.
    """

    question: str
    options: Mapping[str, str]
    context: tuple[str, ...] = ()
    prompt: str = DEFAULT_PROMPT
    answer_format: AnswerFormat = "mcq"

    def __post_init__(self) -> None:
        # copy, then freeze: a caller's dict or list must neither be shared nor mutable here
        options = {str(k): str(v) for k, v in dict(self.options).items()}
        if self.answer_format not in ANSWER_FORMATS:
            raise ValueError(f"unknown answer format {self.answer_format!r} (known: {', '.join(ANSWER_FORMATS)})")
        if self.answer_format == "open" and options:
            raise ValueError("an open-ended case view shows no options")
        if self.answer_format == "mcq" and not options:
            raise ValueError("a case view needs at least one option")
        if isinstance(self.context, str):
            raise ValueError("context must be a sequence of sentences, not one string")
        object.__setattr__(self, "question", str(self.question))
        object.__setattr__(self, "options", MappingProxyType(options))
        object.__setattr__(self, "context", tuple(str(s) for s in self.context))
        object.__setattr__(self, "prompt", str(self.prompt))

    @property
    def is_open(self) -> bool:
        """Whether the case is asked without options, for a free-text answer."""
        return self.answer_format == "open"

    @property
    def keys(self) -> list[str]:
        """The option keys in display order."""
        return list(self.options)

    @property
    def context_texts(self) -> list[str]:
        """The context sentences as a list (the name :class:`Case` uses)."""
        return list(self.context)

    def __getattr__(self, name: str) -> NoReturn:
        hint = _WITHHELD.get(name)
        if hint is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        raise AttributeError(
            f"a defender is given a CaseView, which has no {name!r}: {hint} "
            "(fields: question, options, context, prompt, answer_format)"
        )


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
    """What a defender returns for a case. ``choice`` is None when nothing could be parsed
    (and always on an open-ended case, whose answer is ``raw``, the free text);
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


class Viewable(Protocol):
    """Anything that can show a defender its view (the harness's ``Case``)."""

    def view(self) -> CaseView: ...


def as_view(case: CaseView | Viewable) -> CaseView:
    """``case`` as a :class:`CaseView` (a view is returned as it is).

    Lets harness-side helpers (prompt rendering, answer extraction) take a full case too; a
    defender only ever holds the view.
    """
    return case if isinstance(case, CaseView) else case.view()
