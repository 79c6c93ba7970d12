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

from medmis.agents import decoding_fingerprint, decoding_table, effective_base_url
from medmis.experiments.benchmark import prompt_preset

from ._ambient import ambient_fingerprint
from ._config import RunConfig
from ._identity import (
    bare_url,
    defender_code,
    examinee_identity,
    medmis_identity,
    web_tool_endpoints,
)
from ._poison import poison_fingerprint

__all__ = ["ACCEPTABLE_CHANGES", "ITEM_FIELDS", "MODEL_FIELDS", "FingerprintDiff", "accept_name",
           "compare_fingerprints", "legacy_fingerprint", "merge_fingerprints", "run_fingerprint"]

ITEM_FIELDS = (
    "data_sha256", "subset", "limit", "on_invalid", "seed", "protocols", "type1_targets",
    "shuffle_type2", "prompt", "model_options", "decoding", "web_tools", "poison", "search_ambient",
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

ACCEPTABLE_CHANGES = (*ITEM_FIELDS, *MODEL_FIELDS, "defenders", "defender_code")

# Options that change how a request is sent, never what it asks for. Replicas serve the same
# model: the first URL (``base_url``) names the server, the list may change between runs.
_TRANSPORT_OPTIONS = ("timeout_s", "base_urls", "max_response_bytes")


def run_fingerprint(config: RunConfig, defenders: Sequence[Any], dataset: Any,
                    models: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The fingerprint of one invocation (JSON-ready).

    Args:
        config: The run's configuration.
        defenders: The built defenders (``label``, ``name``, ``options``).
        dataset: The loaded dataset (its ``sha256`` identifies the data, not its path).
        models: The built chat models by spec (what they report decides ``endpoints`` and
            ``examinee``); without them the options and the environment decide.
    """
    from ._manifest import is_simulated

    built = models or {}
    preset = prompt_preset(config.prompt)
    # the decoding preset is its own field ("decoding"), so folders written before it resume
    options = config.model_options.model_dump(mode="json", exclude={*_TRANSPORT_OPTIONS, "decoding"})
    options["base_url"] = bare_url(options.get("base_url"))
    if options.get("seed") == config.seed:
        del options["seed"]  # the CLI passes --seed on to the model: one field, not two
    if options.get("run_seed") in (None, config.seed):
        options.pop("run_seed", None)  # the run seed the simulated examinee draws with: `seed`
    return {
        "data_sha256": getattr(dataset, "sha256", None) or None,
        "subset": config.subset,
        "limit": config.limit,
        "on_invalid": config.on_invalid,
        "seed": config.seed,
        "protocols": sorted(config.protocols),
        "type1_targets": config.type1_targets,
        "shuffle_type2": config.shuffle_type2,
        "prompt": f"{preset.name}@{preset.version}",
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
    }


@dataclass
class FingerprintDiff:
    """How a new invocation differs from the fingerprint recorded in a run folder."""

    changed: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    """Fields (and ``defender <label>``, ``defender_code <label>``) that differ: name ->
    (recorded, new)."""
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


def _dict_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    keys = sorted(set(old) | set(new))
    return ({k: old.get(k) for k in keys if old.get(k) != new.get(k)},
            {k: new.get(k) for k in keys if old.get(k) != new.get(k)})


def compare_fingerprints(recorded: Mapping[str, Any], new: Mapping[str, Any]) -> FingerprintDiff:
    """What differs between the recorded fingerprint and a new one."""
    diff = FingerprintDiff()
    for name in ITEM_FIELDS:
        if (name not in recorded and name not in _NONE_WHEN_ABSENT) or (name in _BOTH_OR_NEITHER and name not in new):
            continue  # recorded by an older version that did not know this field
        old_v, new_v = recorded.get(name), new.get(name)
        if name == "model_options" and "endpoints" in recorded and "endpoints" in new \
                and isinstance(old_v, Mapping) and isinstance(new_v, Mapping):
            # the server each model talks to is compared as `endpoints` (flag or environment)
            old_v = {k: v for k, v in old_v.items() if k != "base_url"}
            new_v = {k: v for k, v in new_v.items() if k != "base_url"}
        if old_v == new_v:
            continue
        if isinstance(old_v, Mapping) and isinstance(new_v, Mapping):
            old_v, new_v = _dict_diff(old_v, new_v)
            if not old_v and not new_v:
                continue  # only keys one side lacks and the other holds as null: no change
        diff.changed[name] = (old_v, new_v)
    for name in MODEL_FIELDS:
        old_m, new_m = recorded.get(name), new.get(name)
        if isinstance(old_m, Mapping) and isinstance(new_m, Mapping):
            before: dict[str, Any] = {}
            after: dict[str, Any] = {}
            for spec in sorted(set(old_m) & set(new_m)):  # an added model is not a change
                a, b = old_m[spec], new_m[spec]
                if name == "examinee" and isinstance(a, Mapping) and isinstance(b, Mapping) \
                        and a.get("seed") == recorded.get("seed") and b.get("seed") == new.get("seed"):
                    # a model that follows the run's seed: that change is the `seed` field's
                    a, b = {k: v for k, v in a.items() if k != "seed"}, {k: v for k, v in b.items() if k != "seed"}
                if a == b:
                    continue
                if isinstance(a, Mapping) and isinstance(b, Mapping):  # only the keys that differ
                    da, db = _dict_diff(a, b)
                    before.update({f"{spec} {k}": v for k, v in da.items()})
                    after.update({f"{spec} {k}": v for k, v in db.items()})
                else:
                    before[spec], after[spec] = a, b
            if before:
                diff.changed[name] = (before, after)
    old_models = set(recorded.get("models") or [])
    diff.added_models = sorted(set(new.get("models") or []) - old_models)
    # a model name run again with another spec or other options of its own is another model
    old_vars, new_vars = recorded.get("model_variants") or {}, new.get("model_variants") or {}
    for name in sorted((set(old_vars) | set(new_vars)) & old_models & set(new.get("models") or [])):
        if old_vars.get(name) != new_vars.get(name):
            diff.changed[f"model {name}"] = (old_vars.get(name), new_vars.get(name))
    old_defs: Mapping[str, Any] = recorded.get("defenders") or {}
    for label, spec in (new.get("defenders") or {}).items():
        if label not in old_defs:
            diff.added_defenders.append(label)
            continue
        old = old_defs[label]
        if old.get("options", {}) != spec.get("options", {}) or old.get("name") != spec.get("name"):
            before, after = _dict_diff(old.get("options", {}), spec.get("options", {}))
            if old.get("name") != spec.get("name"):
                before["name"], after["name"] = old.get("name"), spec.get("name")
            diff.changed[f"defender {label}"] = (before, after)
        if "code" in old and old.get("code") != spec.get("code"):  # older manifests: not compared
            diff.changed[f"defender_code {label}"] = _code_diff(old.get("code") or {}, spec.get("code") or {})
    old_medmis, new_medmis = recorded.get("medmis"), new.get("medmis")
    if old_medmis and new_medmis and old_medmis != new_medmis:
        diff.medmis = (old_medmis, new_medmis)
    return diff


def _code_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[Any, Any]:
    """The differing parts of two code identities (a hash shortened to 12 digits)."""
    keys = [k for k in ("distribution", "sha256", "modules") if old.get(k) != new.get(k)]

    def shown(code: Mapping[str, Any]) -> dict[str, Any]:
        return {k: (str(code.get(k))[:12] if k == "sha256" and code.get(k) else code.get(k)) for k in keys}

    return shown(old), shown(new)


def legacy_fingerprint(manifest: Mapping[str, Any]) -> dict[str, Any]:
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


def merge_fingerprints(recorded: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The folder's fingerprint after ``new`` ran in it: the new item-level settings, every
    model and defender either invocation ran."""
    merged = dict(new)
    merged["models"] = sorted(set(recorded.get("models") or []) | set(new.get("models") or []))
    for name in (*MODEL_FIELDS, "decoding_resolved", "defenders"):
        union = dict(recorded.get(name) or {})
        union.update(new.get(name) or {})
        merged[name] = union
    for name in _BOTH_OR_NEITHER:  # a resume without the tool-using defenders keeps their record
        if name not in new and name in recorded:
            merged[name] = recorded[name]
    variants = {**(recorded.get("model_variants") or {}), **(new.get("model_variants") or {})}
    if variants:
        merged["model_variants"] = variants
    return merged
