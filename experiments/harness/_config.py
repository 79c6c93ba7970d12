"""What determines a run and what it reports back.

A run is a :class:`RunSpec` (the science, fingerprinted) carried out with :class:`RunOptions`
(operational); :class:`RunConfig` is the two in one flat model. ``RunStats`` are its live
figures, ``RunResult`` what it returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from medmis.agents import ModelOptions
from medmis.defenses import AnswerFormat
from medmis.experiments.benchmark import PROTOCOLS, PromptName, ProtocolName, Record, Type1Targets
from medmis.experiments.records import Shard
from medmis.tools import ConfigError, PoisonSettings

if TYPE_CHECKING:
    from ._outcome import Outcome

DEFAULT_CASE_TIMEOUT_S = 1800.0
"""A case's deadline unless ``--case-timeout`` says otherwise: 30 minutes, far above what an
agentic defender's calls take (each model call has its own timeout and retry deadline)."""

CacheMode = Literal["live", "record", "replay", "refresh"]
SearchBackendName = Literal["tavily", "serper", "local"]
VisitBackendName = Literal["direct", "jina"]

BATCH_DISCOUNT = 0.5
"""The OpenAI Batch API, Gemini batch mode and Anthropic Message Batches bill 50% of the
interactive list price."""

INVALID_ROWS_FILE = "invalid_rows.txt"
"""Written into the run folder under ``on_invalid="skip"``: one line per problem in the data."""


class RunSetupError(ConfigError):
    """The run cannot start (e.g. web tools misconfigured); printed as one line by the CLI."""


class DefenderConfig(BaseModel):
    """A defender to run: registry name, options, and an optional display label."""

    model_config = ConfigDict(extra="forbid")

    name: str
    options: dict[str, Any] = Field(default_factory=dict)
    label: str | None = None


class ModelVariant(BaseModel):
    """A model of a run under a name of its own (``RunConfig.models``) with options of its own:
    an ablation config's ``[[models]]`` entry with ``label`` or ``options``."""

    model_config = ConfigDict(extra="forbid")

    spec: str
    options: dict[str, Any] = Field(default_factory=dict)
    """Overrides of the run's ``model_options`` (a key given here replaces the run's)."""


def merge_options(base: ModelOptions, overrides: dict[str, Any]) -> ModelOptions:
    """``base`` with ``overrides`` applied key by key (validated); a ``base_url`` or
    ``base_urls`` given here replaces both of the base's.

    Raises:
        ValueError: The result is not valid model options.
    """
    if not overrides:
        return base
    # only what was set: a field the base left to the decoding preset stays the preset's
    data = base.model_dump(exclude_unset=True)
    if "base_url" in overrides or "base_urls" in overrides:
        data.pop("base_url", None), data.pop("base_urls", None)
    return ModelOptions.model_validate({**data, **overrides})


class RunSpec(BaseModel):
    """What a run *is*: the science its records depend on (data, models, defenders, protocols,
    prompt, seed, decoding, the web tools and their conditions).

    Every field here is part of the run folder's fingerprint (``._fingerprint``), directly or
    through what it resolves to (the data's sha256, the defenders' code, the servers the
    models talk to): a resume into a folder must match it. How the run is *carried out* is
    :class:`RunOptions`.
    """

    model_config = ConfigDict(extra="forbid")

    data: str
    subset: str | None = None
    limit: int | None = Field(default=None, ge=1)
    hub_repo: str | None = None
    on_invalid: Literal["fail", "skip"] = "fail"
    models: list[str]
    model_options: ModelOptions = Field(default_factory=ModelOptions)
    model_variants: dict[str, ModelVariant] = Field(default_factory=dict)
    """Models in ``models`` that are not (only) their spec: name -> spec and option overrides,
    so one run can hold a model twice with different settings (records name the model)."""
    defenders: list[DefenderConfig]
    plugins: list[str] = Field(default_factory=list)
    """Local plug-in files (``--plugin``) whose ``@defender``s register for this run."""
    protocols: list[ProtocolName] = Field(default_factory=lambda: list(PROTOCOLS))
    type1_targets: Type1Targets = "sampled"
    shuffle_type2: bool = False
    prompt: PromptName = "paper"
    answer_format: AnswerFormat = "mcq"
    """``open``: every case is asked without its options, for a free-text answer that the run
    records (``Record.raw``) and does not grade (``medmis grade`` does); defenders that need the
    options are refused (``DefenderSpec.answer_formats``)."""
    seed: int = 0
    epochs: int = Field(default=1, ge=1)
    """``--epochs E``: every case is answered E times (epochs 0 to E-1) by a model that
    samples at its temperature, as Inspect AI's epochs; metrics pool the epochs' cases and
    their intervals and tests cluster on items (``medmis.experiments.analysis``)."""
    search: SearchBackendName = "local"
    visit: VisitBackendName = "direct"
    corpus_dir: str | None = None
    search_ambient: str | None = None
    """Ambient misinformation (``--search-ambient FILE``): passages searched with the local corpus
    by every case, clean ones included. A named condition, in the fingerprint (the file's sha256)
    and on every surface that shows the run's results; None: the clean web."""
    poison: PoisonSettings | None = None
    """A poisoned web (``--poison``): a share of every Type 1 case's search results are that
    case's poisoned pages (``medmis.tools._poisoned_web``)."""

    @model_validator(mode="after")
    def _variants_are_models(self) -> Self:
        stray = sorted(set(self.model_variants) - set(self.models))
        if stray:
            raise ValueError(f"model_variants names models the run does not have: {', '.join(stray)}")
        return self

    def spec_of(self, model: str) -> str:
        """The spec behind a model name of ``models``."""
        variant = self.model_variants.get(model)
        return variant.spec if variant is not None else model

    def options_of(self, model: str) -> ModelOptions:
        """The options a model of ``models`` is built with (the run's, with its overrides)."""
        variant = self.model_variants.get(model)
        opts = merge_options(self.model_options, variant.options) if variant is not None else self.model_options
        return self.seeded(opts)

    def seeded(self, opts: ModelOptions) -> ModelOptions:
        """``opts`` with the run seed as ``run_seed`` when none is set: the simulated examinee
        draws with it, no provider is sent it. Read when models are built, not stored at
        validation, so a copy of the config with another ``seed`` reseeds the examinee."""
        return opts if opts.run_seed is not None else opts.model_copy(update={"run_seed": self.seed})


class RunOptions(BaseModel):
    """How a run is carried out: where it writes, how hard it pushes the providers, when it
    gives up, what it shows. None of it is part of the fingerprint: a resume may change any."""

    model_config = ConfigDict(extra="forbid")

    out: str
    max_connections: int = Field(default=8, ge=1)
    max_retries: int = Field(default=4, ge=0)
    retry_base_delay: float = 1.0
    retry_deadline_s: float = 300.0
    tool_timeout_s: float = 30.0
    case_timeout_s: float = Field(default=DEFAULT_CASE_TIMEOUT_S, gt=0)
    """Seconds a defender has to answer one case (``--case-timeout``): past it the case is an
    error and the run goes on (``._solve``)."""
    cache: CacheMode = "live"
    cache_dir: str | None = None
    allow_hosts: list[str] = Field(default_factory=list)
    blocklist: str | None = None
    retry_errors: bool = False
    progress: bool = True
    write_report: bool = True
    prices: dict[str, tuple[float, float]] = Field(default_factory=dict)
    """USD per million input and output tokens by model spec (recorded in manifest.json)."""
    batch: bool = False
    """Submit the cases' model calls as provider batch jobs, round by round (OpenAI Batch API,
    Gemini batches, Anthropic Message Batches)."""
    batch_poll_s: float = Field(default=30.0, gt=0)
    """Seconds between two polls of the run's pending batch jobs."""
    batch_discount: float = Field(default=BATCH_DISCOUNT, ge=0, lt=1)
    """Share taken off the ``prices`` for a batch run: they are list prices and the batch APIs
    bill half (0 when the prices given are batch prices already)."""
    accept_changes: list[str] = Field(default_factory=list)
    """Fingerprint fields allowed to differ from the run already in ``out`` (see
    ``_fingerprint.ACCEPTABLE_CHANGES``); each accepted change is recorded in the manifest."""
    max_rps: float | None = Field(default=None, gt=0)
    """Total model requests per second for the whole run (``--max-rps``): a shard of N paces
    itself at ``max_rps / N`` (:meth:`rate_budget`)."""
    max_tpm: float | None = Field(default=None, gt=0)
    """Total model tokens (input + output) per minute for the whole run (``--max-tpm``): a shard
    of N takes ``max_tpm / N``."""
    shard: Shard | None = None
    """Run only the items of this shard (``--shard K/N``): a partition by item, named in the
    manifest (``"shard"``) and not in the fingerprint (the shards of a run share it); a folder
    holds one shard, and ``medmis merge`` joins them."""


    def rate_budget(self) -> dict[str, Any] | None:
        """The rate budget as the manifest states it: the totals, this folder's share of them
        (1/N for a shard of N) and the values it paces itself at (None without a budget)."""
        if self.max_rps is None and self.max_tpm is None:
            return None
        share = 1.0 / self.shard.count if self.shard is not None else 1.0
        return {
            "total": {"max_rps": self.max_rps, "max_tpm": self.max_tpm},
            "share": share,
            "per_shard": {"max_rps": None if self.max_rps is None else self.max_rps * share,
                          "max_tpm": None if self.max_tpm is None else self.max_tpm * share},
        }


class RunConfig(RunOptions, RunSpec):
    """A run's :class:`RunSpec` and :class:`RunOptions` in one flat model (what the harness
    takes, and ``manifest.json``'s ``config``). Build one with keyword fields as before, or
    from the two parts with :meth:`of`; :attr:`spec` and :attr:`options` split it again."""

    model_config = ConfigDict(extra="forbid")

    @classmethod
    def of(cls, spec: RunSpec, options: RunOptions) -> RunConfig:
        """The run of ``spec`` carried out with ``options``."""
        return cls.model_validate({**dict(spec), **dict(options)})

    @property
    def spec(self) -> RunSpec:
        """The fingerprinted part."""
        return RunSpec.model_validate({k: getattr(self, k) for k in RunSpec.model_fields})

    @property
    def options(self) -> RunOptions:
        """The operational part."""
        return RunOptions.model_validate({k: getattr(self, k) for k in RunOptions.model_fields})


def clean_key(item_key: str, epoch: int) -> str:
    """The key a clean answer is kept under for the live flip rate: the item, and the epoch
    when it is a later one (an attacked case pairs with the clean case of its own epoch)."""
    return item_key if not epoch else f"{item_key}#{epoch}"


@dataclass
class RunStats:
    """Live figures for the progress line and for budget checks."""

    done: int = 0
    errors: int = 0
    answered: int = 0  # open-ended answers (ungraded)
    graded: dict[str, list[int]] = field(default_factory=lambda: {p: [0, 0] for p in PROTOCOLS})
    flips: list[int] = field(default_factory=lambda: [0, 0])  # [type1 flips, type1 paired]
    input_tokens: int = 0
    output_tokens: int = 0
    by_model_tokens: dict[str, list[int]] = field(default_factory=dict)
    llm_calls: int = 0  # model calls of the records counted (``--max-calls``)
    stopped_reason: str | None = None
    # Type 1 outcomes (correct or not) recorded before their item's clean answer, by key
    waiting: dict[tuple[str, str, str], list[bool]] = field(default_factory=dict, repr=False)

    def add(self, record: Record, clean: dict[tuple[str, str, str], bool]) -> None:
        """Count one record; ``clean`` maps (model, defender, item) to clean correctness.

        A Type 1 record that arrives before its item's clean record (cases are queued clean
        first, but the last clean calls may still be in flight) is paired when that arrives.
        """
        self.done += 1
        self.llm_calls += record.llm_calls
        self.input_tokens += record.usage.input_tokens
        self.output_tokens += record.usage.output_tokens
        tok = self.by_model_tokens.setdefault(record.model, [0, 0])
        tok[0] += record.usage.input_tokens
        tok[1] += record.usage.output_tokens
        if record.error:
            self.errors += 1
            return
        if record.is_open:  # free text, graded by `medmis grade`: neither right nor wrong here
            self.answered += 1
            return
        g = self.graded[record.protocol]
        g[0] += int(bool(record.correct))
        g[1] += 1
        key = (record.model, record.defender, clean_key(record.item_key, record.epoch))
        if record.protocol == "clean":
            clean[key] = bool(record.correct)
            for correct in self.waiting.pop(key, ()):
                self._pair(clean[key], correct)
        elif record.protocol == "type1":
            if key in clean:
                self._pair(clean[key], bool(record.correct))
            else:
                self.waiting.setdefault(key, []).append(bool(record.correct))

    def _pair(self, clean_correct: bool, type1_correct: bool) -> None:
        if clean_correct:
            self.flips[0] += int(not type1_correct)
            self.flips[1] += 1

    def describe(self) -> str:
        parts = []
        for proto in PROTOCOLS:
            k, n = self.graded[proto]
            if n:
                parts.append(f"{proto} acc {100 * k / n:.0f}%")
        if self.answered:
            parts.append(f"{self.answered} open answers (ungraded)")
        if self.flips[1]:
            parts.append(f"T1 ASR {100 * self.flips[0] / self.flips[1]:.0f}%")
        if self.errors:
            parts.append(f"errors {self.errors}")
        return " | ".join(parts)


@dataclass
class RunResult:
    out: Path
    records: int
    new_records: int
    stats: RunStats
    report: dict[str, Path] = field(default_factory=dict)
    skipped_rows: int = 0
    """Invalid data rows left out under ``on_invalid="skip"`` (listed in ``INVALID_ROWS_FILE``)."""
    nothing_to_do: bool = False
    """Every case key was already recorded: nothing ran."""
    outcome: Outcome | None = None
    """The exit status and summary line of the run folder (set by every run that returns)."""
