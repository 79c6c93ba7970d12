"""A run folder's fingerprint: the settings that decide which cases exist and how they are
answered, stored in ``manifest.json`` and compared when a run resumes into the folder.

Two invocations may share a folder only when every *item-level* setting matches (data,
subset, limit, seed, protocols, target policy, prompt preset, generation options); models and
defenders may be *added* to the same items (and a run may resume only some of them), but a
defender label recorded with other options is a different defender. Anything else stops the
run with one line naming the differing fields, unless the user names them in
``accept_changes`` (``medmis run --accept-change FIELD``), which is then written into the
manifest's ``accepted_changes`` history.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from medmis.agents._decoding import decoding_fingerprint, decoding_table
from medmis.experiments.benchmark._prompts import prompt_preset

from ._config import RunConfig

__all__ = ["ACCEPTABLE_CHANGES", "ITEM_FIELDS", "FingerprintDiff", "compare_fingerprints",
           "legacy_fingerprint", "merge_fingerprints", "run_fingerprint"]

ITEM_FIELDS = (
    "data_sha256", "subset", "limit", "on_invalid", "seed", "protocols", "type1_targets",
    "shuffle_type2", "prompt", "model_options", "decoding",
)
"""Fingerprint fields that must match to resume. ``--accept-change`` takes these names and
``defenders`` (a recorded defender label run with other options)."""

ACCEPTABLE_CHANGES = (*ITEM_FIELDS, "defenders")

# Options that change how a request is sent, never what it asks for. Replicas serve the same
# model: the first URL (``base_url``) names the server, the list may change between runs.
_TRANSPORT_OPTIONS = ("timeout_s", "base_urls", "max_response_bytes")


def _bare_url(url: str | None) -> str | None:
    """A base URL without userinfo, query or fragment (credentials never reach the manifest)."""
    if not url:
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def run_fingerprint(config: RunConfig, defenders: Sequence[Any], dataset: Any) -> dict[str, Any]:
    """The fingerprint of one invocation (JSON-ready).

    Args:
        config: The run's configuration.
        defenders: The built defenders (``label``, ``name``, ``options``).
        dataset: The loaded dataset (its ``sha256`` identifies the data, not its path).
    """
    preset = prompt_preset(config.prompt)
    # the decoding preset is its own field ("decoding"), so folders written before it resume
    options = config.model_options.model_dump(mode="json", exclude={*_TRANSPORT_OPTIONS, "decoding"})
    options["base_url"] = _bare_url(options.get("base_url"))
    if options.get("seed") == config.seed:
        del options["seed"]  # the CLI passes --seed on to the model: one field, not two
    if options.get("run_seed") == config.seed:
        del options["run_seed"]  # the run seed the simulated examinee draws with: `seed`
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
        "decoding_resolved": decoding_table(config.models, config.model_options),
        "models": sorted(config.models),
        "defenders": {
            d.label: {"name": d.name, "options": d.options.model_dump(mode="json")} for d in defenders
        },
    }


@dataclass
class FingerprintDiff:
    """How a new invocation differs from the fingerprint recorded in a run folder."""

    changed: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    """Item-level fields (and ``defender <label>``) that differ: name -> (recorded, new)."""
    added_models: list[str] = field(default_factory=list)
    added_defenders: list[str] = field(default_factory=list)

    def blocking(self, accepted: Sequence[str]) -> dict[str, tuple[Any, Any]]:
        """The changes not named in ``accepted``."""
        return {k: v for k, v in self.changed.items()
                if k not in accepted and not (k.startswith("defender ") and "defenders" in accepted)}

    def describe(self, fields: Mapping[str, tuple[Any, Any]] | None = None) -> str:
        """``seed: 0 -> 5; prompt: paper@1 -> toolkit@1`` (short values, one line)."""
        items = self.changed if fields is None else fields
        return "; ".join(f"{k}: {_short(a)} -> {_short(b)}" for k, (a, b) in items.items())


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
        if name not in recorded:
            continue  # recorded by an older version that did not know this field
        old_v, new_v = recorded.get(name), new.get(name)
        if old_v == new_v:
            continue
        if isinstance(old_v, Mapping) and isinstance(new_v, Mapping):
            old_v, new_v = _dict_diff(old_v, new_v)
        diff.changed[name] = (old_v, new_v)
    old_models = set(recorded.get("models") or [])
    diff.added_models = sorted(set(new.get("models") or []) - old_models)
    old_defs: Mapping[str, Any] = recorded.get("defenders") or {}
    for label, spec in (new.get("defenders") or {}).items():
        if label not in old_defs:
            diff.added_defenders.append(label)
        elif old_defs[label] != spec:
            before, after = _dict_diff(old_defs[label].get("options", {}), spec.get("options", {}))
            if old_defs[label].get("name") != spec.get("name"):
                before["name"], after["name"] = old_defs[label].get("name"), spec.get("name")
            diff.changed[f"defender {label}"] = (before, after)
    return diff


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
    defenders = dict(recorded.get("defenders") or {})
    defenders.update(new.get("defenders") or {})
    merged["defenders"] = defenders
    return merged
