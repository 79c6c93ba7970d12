"""A run folder's fingerprint: the settings that decide which cases exist and how they are
answered, stored in ``manifest.json`` and compared when a run resumes into the folder.

Two invocations may share a folder only when every *item-level* setting matches (data,
subset, limit, seed, protocols, target policy, prompt preset, generation options, the web
tools' servers); models and defenders may be *added* to the same items (and a run may resume
only some of them), but a model recorded against another server (``endpoints``) or with other
simulated-examinee settings (``examinee``), or a defender label recorded with other options
(``defenders``) or other code (``defender_code``), is a different one. Anything else stops the
run with one line naming the differing fields, unless the user names them in
``accept_changes`` (``medmis run --accept-change FIELD``), which is then written into the
manifest's ``accepted_changes`` history. medmis's own version and commit (``medmis``) are
recorded and a change is announced, never refused. A field an older manifest did not record
is not compared.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from medmis.agents import decoding_fingerprint, decoding_table, effective_base_url
from medmis.experiments.benchmark import Dataset, prompt_preset

from ._ambient import ambient_fingerprint
from ._config import RunSpec
from ._identity import (
    bare_url,
    defender_code,
    examinee_identity,
    medmis_identity,
    web_tool_endpoints,
)
from ._poison import poison_fingerprint

__all__ = ["ACCEPTABLE_CHANGES", "ITEM_FIELDS", "MODEL_FIELDS", "DefenderPrint", "Fingerprint", "FingerprintDiff",
           "accept_name", "compare_fingerprints", "run_fingerprint"]

ITEM_FIELDS = (
    "data_sha256", "subset", "limit", "on_invalid", "seed", "protocols", "type1_targets",
    "shuffle_type2", "prompt", "answer_format", "model_options", "decoding", "web_tools", "poison",
    "search_ambient", "epochs",
)
"""Fingerprint fields that must match to resume. ``--accept-change`` takes these names,
``endpoints`` and ``examinee`` (a recorded model with another server or other simulated
settings), ``defenders`` (a recorded defender label run with other options) and
``defender_code`` (a recorded defender whose code changed)."""

MODEL_FIELDS = ("endpoints", "examinee")
"""Per-model fields (model spec -> value): compared for the models both invocations run."""

_BOTH_OR_NEITHER = ("web_tools",)
"""Recorded only when a defender uses the web tools: compared when both invocations have it."""

_NONE_WHEN_ABSENT = ("poison", "search_ambient")
"""Recorded only when set: a folder without it ran without (a poisoned run, or one with ambient
misinformation, is refused there, and the other way round)."""

_DEFAULT_WHEN_ABSENT: dict[str, Any] = {"answer_format": "mcq", "epochs": 1}
"""Fields an older manifest did not record but whose value it implies: every run before open-ended
answers existed asked multiple choice, so an open run is refused in its folder and back; every
run before ``--epochs`` (and every run of one epoch, which leaves it out) answered each case once.
``--accept-change epochs`` lets a folder grow (or drop) epochs: its records of epochs past the new
count stay outside the plan."""

NEVER_MIXED = ("answer_format",)
"""Fields no ``--accept-change`` lets differ: graded choices and ungraded free text in one folder
would make every reader of it (metrics, report, grading) wrong about half of its records."""

ACCEPTABLE_CHANGES = tuple(f for f in (*ITEM_FIELDS, *MODEL_FIELDS, "defenders", "defender_code")
                           if f not in NEVER_MIXED)

# Options that change how a request is sent, never what it asks for. Replicas serve the same
# model: the first URL (``base_url``) names the server, the list may change between runs.
_TRANSPORT_OPTIONS = ("timeout_s", "base_urls", "max_response_bytes")


class DefenderPrint(BaseModel):
    """A defender label's part of the fingerprint: its registry name, options and code."""

    model_config = ConfigDict(extra="ignore")

    name: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)
    code: dict[str, Any] | None = None
    """The code identity (``._identity.defender_code``); not recorded by older manifests, and
    then not compared."""


class Fingerprint(BaseModel):
    """The settings a run folder's records depend on (``manifest.json``'s ``fingerprint``).

    A field is *recorded* when it was given (``model_fields_set``): a field an older manifest
    did not record is not compared (see the module's docstring). Written back with
    :meth:`to_json`, in the shape ``manifest.json`` has always had. Older manifests are read
    by :meth:`from_manifest`, the one place that knows their shapes.
    """

    model_config = ConfigDict(extra="ignore")

    data_sha256: str | None = None
    subset: str | None = None
    limit: int | None = None
    on_invalid: str | None = None
    seed: int | None = None
    protocols: list[str] = Field(default_factory=list)
    type1_targets: str | None = None
    shuffle_type2: bool | None = None
    prompt: str | None = None
    """``name@version`` of the prompt preset."""
    answer_format: str | None = None
    """``mcq`` or ``open`` (``RunSpec.answer_format``); absent in older manifests: ``mcq``."""
    epochs: int | None = None
    """``RunSpec.epochs``, recorded when above 1; absent: 1."""
    model_options: dict[str, Any] = Field(default_factory=dict)
    """The run's model options without the transport options and the decoding preset."""
    decoding: dict[str, Any] | None = None
    """The decoding preset and the user's overrides (``medmis.agents.decoding_fingerprint``)."""
    decoding_resolved: dict[str, Any] = Field(default_factory=dict)
    """The values each model's decoding resolved to (recorded, never compared)."""
    models: list[str] = Field(default_factory=list)
    endpoints: dict[str, str | None] = Field(default_factory=dict)
    """The server each (non-simulated) model talks to, credentials stripped."""
    examinee: dict[str, Any] = Field(default_factory=dict)
    """The simulated examinee's settings by model spec."""
    model_variants: dict[str, Any] = Field(default_factory=dict)
    """Models run under a name of their own: name -> spec and option overrides."""
    defenders: dict[str, DefenderPrint] = Field(default_factory=dict)
    web_tools: dict[str, Any] | None = None
    poison: dict[str, Any] | None = None
    search_ambient: dict[str, Any] | None = None
    medmis: dict[str, Any] | None = None
    """medmis's version and commit: a change is announced, never refused."""

    @classmethod
    def from_manifest(cls, manifest: Mapping[str, Any]) -> Fingerprint:
        """The fingerprint a ``manifest.json`` records; for a manifest written before
        fingerprints existed, the fields it can still vouch for (the only migration of older
        shapes: every other reader gets a :class:`Fingerprint`).

        Raises:
            ValueError: The recorded fingerprint is not one (a field of the wrong type).
        """
        recorded = manifest.get("fingerprint")
        try:
            return cls.model_validate(recorded if isinstance(recorded, Mapping) else _legacy_fields(manifest))
        except ValidationError as exc:
            where = ", ".join(".".join(map(str, e["loc"])) for e in exc.errors()[:3])
            raise ValueError(f"its fingerprint is malformed ({where})") from None

    def to_json(self) -> dict[str, Any]:
        """The JSON form written to ``manifest.json`` (only the recorded fields)."""
        return self.model_dump(mode="json", exclude_unset=True)

    def recorded(self, name: str) -> bool:
        """Whether ``name`` was recorded (an older manifest may lack it)."""
        return name in self.model_fields_set

    def compare(self, new: Fingerprint) -> FingerprintDiff:
        """What differs between this (recorded) fingerprint and a new invocation's."""
        diff = FingerprintDiff()
        diff.changed.update(self._item_changes(new))
        diff.changed.update(self._model_changes(new))
        diff.added_models = sorted(set(new.models) - set(self.models))
        diff.changed.update(self._variant_changes(new))
        diff.added_defenders = [label for label in new.defenders if label not in self.defenders]
        diff.changed.update(self._defender_changes(new))
        if self.medmis and new.medmis and self.medmis != new.medmis:
            diff.medmis = (self.medmis, new.medmis)
        return diff

    def _item_changes(self, new: Fingerprint) -> dict[str, tuple[Any, Any]]:
        changed: dict[str, tuple[Any, Any]] = {}
        for name in ITEM_FIELDS:
            if not self.recorded(name) and name not in _NONE_WHEN_ABSENT and name not in _DEFAULT_WHEN_ABSENT:
                continue  # recorded by an older version that did not know this field
            if name in _BOTH_OR_NEITHER and not new.recorded(name):
                continue
            old_v, new_v = getattr(self, name), getattr(new, name)
            if name in _DEFAULT_WHEN_ABSENT:
                old_v, new_v = old_v or _DEFAULT_WHEN_ABSENT[name], new_v or _DEFAULT_WHEN_ABSENT[name]
            if name == "model_options" and self.recorded("endpoints") and new.recorded("endpoints"):
                # the server each model talks to is compared as `endpoints` (flag or environment)
                old_v, new_v = _without(old_v, "base_url"), _without(new_v, "base_url")
            if old_v == new_v:
                continue
            if isinstance(old_v, Mapping) and isinstance(new_v, Mapping):
                old_v, new_v = _dict_diff(old_v, new_v)
                if not old_v and not new_v:
                    continue  # only keys one side lacks and the other holds as null: no change
            changed[name] = (old_v, new_v)
        return changed

    def _model_changes(self, new: Fingerprint) -> dict[str, tuple[Any, Any]]:
        """``endpoints`` and ``examinee`` of the models both invocations run (an added model
        is not a change); of a dict value only the keys that differ, as ``<spec> <key>``."""
        changed: dict[str, tuple[Any, Any]] = {}
        for name in MODEL_FIELDS:
            if not (self.recorded(name) and new.recorded(name)):
                continue
            old_m, new_m = getattr(self, name), getattr(new, name)
            before: dict[str, Any] = {}
            after: dict[str, Any] = {}
            for spec in sorted(set(old_m) & set(new_m)):
                a, b = old_m[spec], new_m[spec]
                if name == "examinee" and isinstance(a, Mapping) and isinstance(b, Mapping) \
                        and a.get("seed") == self.seed and b.get("seed") == new.seed:
                    # a model that follows the run's seed: that change is the `seed` field's
                    a, b = _without(a, "seed"), _without(b, "seed")
                if a == b:
                    continue
                if isinstance(a, Mapping) and isinstance(b, Mapping):
                    da, db = _dict_diff(a, b)
                    before.update({f"{spec} {k}": v for k, v in da.items()})
                    after.update({f"{spec} {k}": v for k, v in db.items()})
                else:
                    before[spec], after[spec] = a, b
            if before:
                changed[name] = (before, after)
        return changed

    def _variant_changes(self, new: Fingerprint) -> dict[str, tuple[Any, Any]]:
        """A model name run again with another spec or other options of its own is another model."""
        old_vars, new_vars = self.model_variants, new.model_variants
        both = (set(old_vars) | set(new_vars)) & set(self.models) & set(new.models)
        return {f"model {name}": (old_vars.get(name), new_vars.get(name))
                for name in sorted(both) if old_vars.get(name) != new_vars.get(name)}

    def _defender_changes(self, new: Fingerprint) -> dict[str, tuple[Any, Any]]:
        """``defender <label>`` (other options or registry name) and ``defender_code <label>``
        (other code; not compared against a manifest that did not record it)."""
        changed: dict[str, tuple[Any, Any]] = {}
        for label, spec in new.defenders.items():
            old = self.defenders.get(label)
            if old is None:
                continue
            if old.options != spec.options or old.name != spec.name:
                before, after = _dict_diff(old.options, spec.options)
                if old.name != spec.name:
                    before["name"], after["name"] = old.name, spec.name
                changed[f"defender {label}"] = (before, after)
            if "code" in old.model_fields_set and old.code != spec.code:
                changed[f"defender_code {label}"] = _code_diff(old.code or {}, spec.code or {})
        return changed

    def merged_with(self, new: Fingerprint) -> Fingerprint:
        """The folder's fingerprint after ``new`` ran in it (this one recorded): the new
        item-level settings, every model and defender either invocation ran."""
        merged = new.to_json()
        merged["models"] = sorted(set(self.models) | set(new.models))
        old = self.to_json()
        for name in (*MODEL_FIELDS, "decoding_resolved", "defenders"):
            merged[name] = {**(old.get(name) or {}), **(merged.get(name) or {})}
        for name in _BOTH_OR_NEITHER:  # a resume without the tool-using defenders keeps their record
            if name not in merged and name in old:
                merged[name] = old[name]
        variants = {**self.model_variants, **new.model_variants}
        if variants:
            merged["model_variants"] = variants
        return Fingerprint.model_validate(merged)


def run_fingerprint(config: RunSpec, defenders: Sequence[Any], dataset: Dataset | None,
                    models: Mapping[str, Any] | None = None) -> Fingerprint:
    """The fingerprint of one invocation.

    Args:
        config: The run's spec (a :class:`RunConfig` is one): no operational option can
            reach the fingerprint.
        defenders: The built defenders (``label``, ``name``, ``options``).
        dataset: The loaded dataset (its ``sha256`` identifies the data, not its path).
        models: The built chat models by spec (what they report decides ``endpoints`` and
            ``examinee``); without them the options and the environment decide.
    """
    from ._manifest import is_simulated

    built = models or {}
    preset = prompt_preset(config.prompt)
    # the decoding preset is its own field ("decoding"), so folders written before it resume
    # `sample` is the harness's per-epoch setting, never the run's (`epochs` is)
    options = config.model_options.model_dump(mode="json", exclude={*_TRANSPORT_OPTIONS, "decoding", "sample"})
    options["base_url"] = bare_url(options.get("base_url"))
    if options.get("seed") == config.seed:
        del options["seed"]  # the CLI passes --seed on to the model: one field, not two
    if options.get("run_seed") in (None, config.seed):
        options.pop("run_seed", None)  # the run seed the simulated examinee draws with: `seed`
    return Fingerprint.model_validate({
        "data_sha256": (dataset.sha256 or None) if dataset is not None else None,
        "subset": config.subset,
        "limit": config.limit,
        "on_invalid": config.on_invalid,
        "seed": config.seed,
        "protocols": sorted(config.protocols),
        "type1_targets": config.type1_targets,
        "shuffle_type2": config.shuffle_type2,
        "prompt": f"{preset.name}@{preset.version_for(config.answer_format)}",
        "answer_format": config.answer_format,
        **({"epochs": config.epochs} if config.epochs > 1 else {}),
        "model_options": options,
        # the preset and the values it resolved to (models may be added: the per-model table
        # is recorded, the preset and the user's overrides are what must match)
        "decoding": decoding_fingerprint(config.model_options),
        "decoding_resolved": decoding_table({m: (config.spec_of(m), config.options_of(m)) for m in config.models}),
        "models": sorted(config.models),
        "endpoints": {name: bare_url(effective_base_url(config.spec_of(name), config.options_of(name),
                                                        built.get(name)))
                      for name in config.models if not is_simulated(name)},
        "examinee": {spec: examinee_identity(built[spec]) for spec in config.models
                     if is_simulated(spec) and spec in built},
        **({"model_variants": {
            m: {"spec": v.spec, "options": {k: bare_url(x) if k == "base_url" else x
                                            for k, x in sorted(v.options.items()) if k not in _TRANSPORT_OPTIONS}}
            for m, v in sorted(config.model_variants.items())}} if config.model_variants else {}),
        "defenders": {
            d.label: {"name": d.name, "options": d.options.model_dump(mode="json"), "code": defender_code(d.name)}
            for d in defenders
        },
        **({"web_tools": web_tool_endpoints(config.search, config.visit, config.corpus_dir)}
           if any(getattr(d, "uses_tools", False) for d in defenders) else {}),
        **({"poison": poison_fingerprint(config.poison)} if config.poison is not None else {}),
        **({"search_ambient": ambient_fingerprint(config.search_ambient)}
           if config.search_ambient is not None else {}),
        "medmis": medmis_identity(),
    })


@dataclass
class FingerprintDiff:
    """How a new invocation differs from the fingerprint recorded in a run folder."""

    changed: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    """Fields (and ``defender <label>``, ``defender_code <label>``, ``model <name>``) that
    differ: name -> (recorded, new)."""
    added_models: list[str] = field(default_factory=list)
    added_defenders: list[str] = field(default_factory=list)
    medmis: tuple[Any, Any] | None = None
    """medmis's (recorded, new) version and commit when they differ: announced, never refused."""

    def blocking(self, accepted: Sequence[str]) -> dict[str, tuple[Any, Any]]:
        """The changes not named in ``accepted``."""
        return {k: v for k, v in self.changed.items() if accept_name(k) not in accepted}

    def describe(self, fields: Mapping[str, tuple[Any, Any]] | None = None) -> str:
        """``seed: 0 -> 5; prompt: paper@1 -> toolkit@1`` (short values, one line)."""
        items = self.changed if fields is None else fields
        return "; ".join(f"{k}: {_short(a)} -> {_short(b)}" for k, (a, b) in items.items())


def compare_fingerprints(recorded: Fingerprint | Mapping[str, Any],
                         new: Fingerprint | Mapping[str, Any]) -> FingerprintDiff:
    """What differs between the recorded fingerprint and a new one (:meth:`Fingerprint.compare`;
    a mapping is read as a recorded ``fingerprint`` table)."""
    return _as_fingerprint(recorded).compare(_as_fingerprint(new))


def _as_fingerprint(value: Fingerprint | Mapping[str, Any]) -> Fingerprint:
    return value if isinstance(value, Fingerprint) else Fingerprint.model_validate(value)


def accept_name(changed: str) -> str:
    """The ``--accept-change`` name of a changed field (``defender none`` -> ``defenders``)."""
    if changed.startswith("defender_code "):
        return "defender_code"
    if changed.startswith("defender "):
        return "defenders"
    if changed.startswith("model "):  # a model name's own spec or options (``[[models]]``)
        return "model_options"
    return changed


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    if isinstance(value, dict):
        text = ", ".join(f"{k}={v!r}" for k, v in value.items())
    if len(text) > 60:
        text = text[:29] + "…" + text[-20:]
    return text


def _without(value: Any, key: str) -> Any:
    return {k: v for k, v in value.items() if k != key} if isinstance(value, Mapping) else value


def _dict_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    keys = sorted(set(old) | set(new))
    return ({k: old.get(k) for k in keys if old.get(k) != new.get(k)},
            {k: new.get(k) for k in keys if old.get(k) != new.get(k)})


def _code_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[Any, Any]:
    """The differing parts of two code identities (a hash shortened to 12 digits)."""
    keys = [k for k in ("distribution", "sha256", "modules") if old.get(k) != new.get(k)]

    def shown(code: Mapping[str, Any]) -> dict[str, Any]:
        return {k: (str(code.get(k))[:12] if k == "sha256" and code.get(k) else code.get(k)) for k in keys}

    return shown(old), shown(new)


def _legacy_fields(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The fields a manifest written before fingerprints existed can still vouch for."""
    config = manifest.get("config") or {}
    dataset = manifest.get("dataset") or {}
    prompt = manifest.get("prompt") or {}
    out: dict[str, Any] = {"models": list(manifest.get("models") or [])}
    if dataset.get("sha256"):
        out["data_sha256"] = dataset["sha256"]
    if "seed" in manifest:
        out["seed"] = manifest["seed"]
    if manifest.get("protocols"):
        out["protocols"] = sorted(manifest["protocols"])
    for name in ("subset", "limit", "type1_targets", "shuffle_type2"):
        if name in config:
            out[name] = config[name]
    if prompt.get("name") and prompt.get("version"):
        out["prompt"] = f"{prompt['name']}@{prompt['version']}"
    out["defenders"] = {d["label"]: {"name": d.get("name"), "options": d.get("options", {})}
                        for d in manifest.get("defenders") or [] if isinstance(d, dict) and "label" in d}
    return out
