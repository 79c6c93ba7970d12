"""The ablation config (a TOML file, validated), with command-line overrides.

``load_config(path, overrides=["model_options.temperature=0.2", ...])`` reads the TOML, applies
``KEY=VALUE`` overrides (dotted keys into the TOML; list entries by index, e.g.
``defenders.0.options.max_iterations=3``; values read as TOML, else JSON, else taken as a
string) and validates the result. Every problem is one line (a :class:`CliError`).
"""

from __future__ import annotations

import difflib
import itertools
import json
import tomllib
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from medmis.agents._registry import ModelOptions
from medmis.experiments._errors import CliError
from medmis.experiments.benchmark._hub import is_hub_address
from medmis.experiments.benchmark._prompts import PromptName
from medmis.experiments.benchmark._protocols import Type1Targets
from medmis.experiments.benchmark._types import PROTOCOLS, ProtocolName
from medmis.experiments.harness._config import CacheMode, DefenderConfig

ROOT = Path(__file__).resolve().parents[2]


class ModelEntry(BaseModel):
    """A model in the grid with its price per million tokens (USD) for estimates and caps."""

    model_config = ConfigDict(extra="forbid")

    spec: str
    price_in_per_mtok: float = 0.0
    price_out_per_mtok: float = 0.0
    options: dict[str, Any] = Field(default_factory=dict)


class DefenderEntry(BaseModel):
    """A defender with fixed options and an optional sweep (each list is one axis)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    options: dict[str, Any] = Field(default_factory=dict)
    sweep: dict[str, list[Any]] = Field(default_factory=dict)

    def expand(self) -> list[DefenderConfig]:
        if not self.sweep:
            return [DefenderConfig(name=self.name, options=dict(self.options))]
        keys = sorted(self.sweep)
        out = []
        for values in itertools.product(*(self.sweep[k] for k in keys)):
            opts = dict(self.options)
            opts.update(dict(zip(keys, values, strict=True)))
            out.append(DefenderConfig(name=self.name, options=opts))
        return out


class Delivery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type2_shuffled: bool = False


class Simulation(BaseModel):
    """Settings that apply to the simulated examinee (``mock/`` models) only."""

    model_config = ConfigDict(extra="forbid")

    stability_seeds: int = Field(default=0, ge=0, le=20)
    """Judge the ranking over this many examinee seeds: the run seed's and ``N - 1`` re-runs of
    the same cases with the examinee reseeded (``OUT/stability/seed-<s>``); 0 or 1: none."""


class AblationConfig(BaseModel):
    """The whole ablation (the TOML file, validated)."""

    model_config = ConfigDict(extra="forbid")

    name: str = "ablation"
    description: str = ""
    data: str
    subset: str | None = None
    limit: int | None = Field(default=None, ge=1)
    hub_repo: str | None = None
    """Hub repository for ``hub:`` data (default AI4HealthResearch/MedMisBench)."""
    protocols: list[ProtocolName] = Field(default_factory=lambda: list(PROTOCOLS))
    type1_targets: Type1Targets = "sampled"
    prompt: PromptName = "paper"
    decoding: Literal["paper", "reference"] = "paper"
    """Decoding preset of every model (``medmis run --decoding``); ``model_options`` override it."""
    seed: int = 0
    out: str = "runs/ablation"
    max_connections: int = Field(default=8, ge=1)
    processes: Annotated[int, Field(ge=1)] | Literal["auto"] = "auto"
    """Processes sharing each run's calls, as ``medmis run --processes``."""
    max_retries: int = Field(default=4, ge=0)
    cache: CacheMode = "record"
    cache_dir: str | None = None
    search: Literal["tavily", "serper", "local"] = "local"
    visit: Literal["direct", "jina"] = "direct"
    corpus_dir: str | None = None
    allow_hosts: list[str] = Field(default_factory=list)
    blocklist: str | None = None
    budget_usd: float | None = None
    batch: bool = False
    """Run through provider batch jobs (``medmis run --batch``): openai/ and google/ models,
    single-call defenders; prices are list prices, less ``batch_discount``."""
    batch_poll_s: float = Field(default=30.0, gt=0)
    batch_discount: float = Field(default=0.5, ge=0, lt=1)
    model_options: dict[str, Any] = Field(default_factory=dict)
    models: list[ModelEntry]
    defenders: list[DefenderEntry]
    delivery: Delivery = Field(default_factory=Delivery)
    simulation: Simulation = Field(default_factory=Simulation)
    baseline: str = "none"

    @model_validator(mode="after")
    def _check(self) -> AblationConfig:
        if not self.models:
            raise ValueError("an ablation needs at least one model")
        if not self.defenders:
            raise ValueError("an ablation needs at least one defender")
        real = [m.spec for m in self.models if not m.spec.startswith("mock/")]
        if self.simulation.stability_seeds > 1 and real:
            raise ValueError("simulation.stability_seeds re-runs the simulated examinee only; "
                             f"not for {', '.join(real)}")
        return self

    def examinee_seeds(self) -> list[int]:
        """The examinee seeds of the stability re-runs (the main run's seed not included)."""
        options = self.model_options
        base = int((options.get("extra") or {}).get("seed", options.get("seed", self.seed)))
        return [base + i for i in range(1, self.simulation.stability_seeds)]

    @property
    def data_hub_repo(self) -> str | None:
        """``hub_repo`` when the data is a hub address; a local copy (``--data``) ignores it."""
        return self.hub_repo if is_hub_address(self.data) else None

    def defender_configs(self) -> list[DefenderConfig]:
        return [d for entry in self.defenders for d in entry.expand()]

    def resolve(self, path: str) -> str:
        """Relative data/corpus paths are taken from the repository root when not found here."""
        p = Path(path)
        if p.is_absolute() or p.exists() or ":" in path.split("/")[0]:
            return path
        candidate = ROOT / path
        return str(candidate) if candidate.exists() else path


# Fields holding a dict whose keys are another model's fields (checked like nested models).
_DICT_AS_MODEL: dict[tuple[type[BaseModel], str], type[BaseModel]] = {
    (AblationConfig, "model_options"): ModelOptions,
}


def parse_value(raw: str) -> Any:
    """A command-line value: TOML (``0.2``, ``true``, ``"x"``, ``[1, 2]``), else JSON
    (``null``), else the text itself."""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        pass
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _model_of(annotation: Any) -> type[BaseModel] | None:
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _list_model(annotation: Any) -> type[BaseModel] | None:
    if typing.get_origin(annotation) is list:
        (inner,) = typing.get_args(annotation) or (None,)
        return _model_of(inner)
    return None


def apply_override(raw: dict[str, Any], pair: str) -> None:
    """Apply one ``KEY=VALUE`` override to a config dict read from TOML.

    Raises:
        CliError: Malformed pair, a key the config does not have, or a list index that
            does not exist.
    """
    key, sep, text = pair.partition("=")
    path = [p.strip() for p in key.split(".")]
    if not sep or not all(path):
        raise CliError(f"--set expects KEY=VALUE with a dotted KEY, got {pair!r}")
    model: type[BaseModel] | None = AblationConfig
    node: Any = raw
    for i, seg in enumerate(path):
        last = i == len(path) - 1
        where = ".".join(path[: i + 1])
        if isinstance(node, list):
            if not seg.isdigit() or int(seg) >= len(node):
                raise CliError(f"--set {key}: no entry {seg!r} in {'.'.join(path[:i])} "
                               f"(it has {len(node)})")
            if last:
                node[int(seg)] = parse_value(text)
                return
            node = node[int(seg)]
            continue
        if not isinstance(node, dict):
            raise CliError(f"--set {key}: {'.'.join(path[:i])} is not a table")
        element: type[BaseModel] | None = None
        nested: type[BaseModel] | None = None
        if model is not None:
            field = model.model_fields.get(seg)
            if field is None:
                known = ", ".join(sorted(model.model_fields))
                raise CliError(f"--set {key}: unknown key {where!r} (known here: {known})")
            element = _list_model(field.annotation)
            nested = _DICT_AS_MODEL.get((model, seg)) or _model_of(field.annotation)
        if last:
            node[seg] = parse_value(text)
            return
        if element is not None:
            node = node.get(seg, [])
            model = element
            continue
        node = node.setdefault(seg, {})
        model = nested


def load_config(path: str | Path, overrides: Sequence[str] = ()) -> AblationConfig:
    """Read, override and validate an ablation config.

    Raises:
        CliError: The file cannot be read or parsed, an override is wrong, or the result is
            not a valid config (the first problem, in one line).
    """
    try:
        with open(path, "rb") as fh:
            raw = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise CliError(f"{path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise CliError(f"{path}: cannot read the config ({exc.strerror or exc})") from None
    for pair in overrides:
        apply_override(raw, pair)
    try:
        return AblationConfig.model_validate(raw)
    except ValidationError as exc:
        raise CliError(f"{path}: {_describe(exc, raw)}") from None


def _known_keys(loc: Sequence[Any]) -> list[str]:
    """The keys the config accepts at ``loc`` (the table holding a misspelt key)."""
    model: type[BaseModel] | None = AblationConfig
    for seg in loc[:-1]:
        if model is None or isinstance(seg, int):
            continue
        field = model.model_fields.get(str(seg))
        if field is None:
            return []
        model = (_DICT_AS_MODEL.get((model, str(seg))) or _list_model(field.annotation)
                 or _model_of(field.annotation))
    return sorted(model.model_fields) if model is not None else []


def _describe(exc: ValidationError, raw: dict[str, Any]) -> str:
    """The first problem in one line; a misspelt key names the key it resembles."""
    errors = exc.errors()
    # a misspelt key also shows up as the missing key it was meant to be: name the misspelling
    first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    where = ".".join(str(p) for p in first["loc"]) or "config"
    if first["type"] == "extra_forbidden":
        known = _known_keys(first["loc"])
        close = difflib.get_close_matches(str(first["loc"][-1]), known, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(known)}"
        return f"{where}: unknown key ({hint})"
    return f"{where}: {first['msg']}"
