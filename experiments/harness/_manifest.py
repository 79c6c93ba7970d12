"""``manifest.json``: what was run, with which versions and data, by which command."""

from __future__ import annotations

import json
import os
import platform
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from medmis.agents import decoding_record
from medmis.experiments.benchmark import Dataset, prompt_preset
from medmis.tools import is_secret_name, json_file, redact, redact_obj

from ._ambient import ambient_manifest
from ._config import RunConfig
from ._poison import poison_manifest

if TYPE_CHECKING:  # ``._fingerprint`` reads ``is_simulated`` from here
    from ._fingerprint import Fingerprint

_VERSIONED_PACKAGES = (
    "medmis",
    "langgraph",
    "langchain-core",
    "langchain-openai",
    "openai",
    "google-genai",
    "tavily-python",
    "trafilatura",
    "httpx",
    "pydantic",
    "diskcache",
    "bm25s",
)



def package_versions() -> dict[str, str]:
    out = {}
    for name in _VERSIONED_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


_SECRET_FLAG = re.compile(r"(key|token|secret|password)", re.IGNORECASE)


def scrub_argv(argv: Sequence[str]) -> list[str]:
    """The command line as recorded: values of any secret-looking flag are masked."""
    out: list[str] = []
    mask_next = False
    for arg in argv:
        if mask_next:
            out.append("***")
            mask_next = False
            continue
        if arg.startswith("--") and _SECRET_FLAG.search(arg):
            if "=" in arg:
                out.append(arg.split("=", 1)[0] + "=***")
            else:
                out.append(arg)
                mask_next = True
            continue
        name, eq, _value = arg.partition("=")
        # option values such as `--model-option auth_token=…` or `--set x.api_key=…`
        # URLs with user:pass@ and configured keys, wherever they appear
        out.append(f"{name}=***" if eq and is_secret_name(name) else redact(arg))
    return out


def is_simulated(model_spec: str) -> bool:
    return model_spec.startswith("mock/")


def write_manifest(
    out: Path,
    config: RunConfig,
    defenders: Sequence[Any],
    dataset: Dataset,
    n_cases: int,
    argv: Sequence[str],
    *,
    fingerprint: Fingerprint | None = None,
    accepted: Mapping[str, Any] | None = None,
) -> None:
    """Write ``out/manifest.json``, keeping the first creation time and counting invocations.

    ``fingerprint`` is what a resume must match (see ``_fingerprint``); ``accepted`` the
    fingerprint changes this invocation was told to accept, appended to ``accepted_changes``.
    """
    manifest_path = out / "manifest.json"
    previous: dict[str, Any] = {}
    if manifest_path.exists():
        try:
            previous = json_file(manifest_path)
        except ValueError:
            previous = {}
    now = datetime.now(UTC).isoformat(timespec="seconds")
    manifest = {
        "command": scrub_argv(argv),
        "config": config.model_dump(mode="json"),
        "models": config.models,
        "defenders": [
            {"label": d.label, "name": d.name, "options": d.options.model_dump(mode="json")}
            for d in defenders
        ],
        "protocols": list(config.protocols),
        "answer_format": config.answer_format,
        "prompt": _prompt_facts(config),
        "decoding": decoding_record(config.seeded(config.model_options),
                                    {m: (config.spec_of(m), config.options_of(m)) for m in config.models}),
        "seed": config.seed,
        "prices": {m: list(p) for m, p in config.prices.items()},
        "dataset": {
            "source": str(config.data),
            "sha256": dataset.sha256,
            "items": len(dataset.items),
            "hub_repo": config.hub_repo,
            "invalid_rows": len(dataset.issues),
            "warnings": len(dataset.warnings),
            "subset": config.subset,
        },
        "cases_per_model_defender": n_cases,
        "simulated": any(is_simulated(m) for m in config.models),
        "versions": package_versions(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "created": previous.get("created", now),
        "updated": now,
        "runs": int(previous.get("runs", 0)) + 1,
    }
    if config.poison is not None:  # the settings and the page file's sha256
        manifest["poison"] = poison_manifest(config.poison)
    if config.search_ambient is not None:  # a named condition: the file, its sha256, its passages
        manifest["search_ambient"] = ambient_manifest(config.search_ambient)
    if config.shard is not None:  # which items the folder holds; `medmis merge` joins the shards
        manifest["shard"] = config.shard.to_json()
    if (budget := config.rate_budget()) is not None:  # the total, this folder's share, its pace
        manifest["rate_budget"] = budget
    if config.batch:  # its prices are list prices; the report takes the batch discount off them
        manifest["batch"] = {"enabled": True, "discount": config.batch_discount}
    if fingerprint is not None:
        manifest["fingerprint"] = fingerprint.to_json()
    if "grading" in previous:  # `medmis grade`'s block (rubric, judges, threshold) outlives a resumed run
        manifest["grading"] = previous["grading"]
    history = list(previous.get("accepted_changes", []))
    if accepted:
        history.append({"at": now, "changes": {k: list(v) for k, v in accepted.items()}})
    if history:
        manifest["accepted_changes"] = history
    # base URLs with user:pass@, keys passed as options or in the command line: masked
    manifest = redact_obj(manifest)
    manifest_path.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _prompt_facts(config: RunConfig) -> dict[str, Any]:
    preset = prompt_preset(config.prompt)
    return {
        "name": preset.name,
        "version": preset.version_for(config.answer_format),
        "source": preset.source,
        "temperature": config.model_options.temperature,  # the option; per model: "decoding"
    }


_STATUS = {0: "finished", 1: "finished with case errors", 3: "stopped early"}


def mark_outcome(out: Path, outcome: Any, *, stopped: str | None, errors: int,
                 concurrency: dict[str, Any] | None = None, status: str | None = None) -> None:
    """Record how the invocation ended: ``stopped`` (why it stopped early, when it did),
    ``outcome`` (``status``, ``exit_code``, ``case_errors``, ``message``) and, when given,
    ``concurrency`` (the adaptive limiter's figures for this invocation). ``status`` names
    an end the exit code does not (``write failed``). The file is replaced whole: a write that
    fails (a full disk) leaves the previous manifest as it was."""
    path = out / "manifest.json"
    manifest = json_file(path)
    manifest.pop("stopped", None)
    if stopped:
        manifest["stopped"] = stopped
    manifest["outcome"] = {
        "status": status or _STATUS.get(outcome.code, "unknown"),
        "exit_code": outcome.code,
        "case_errors": errors,
        "message": outcome.message,
    }
    if concurrency is not None:
        manifest["concurrency"] = concurrency
    temporary = path.with_name(path.name + ".tmp")
    try:
        temporary.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
