"""Checks of an ablation config before its estimate is printed, and what is left to run.

A config that names an unknown provider, defender or baseline, or a real provider whose API key
is missing, is a one-line error (exit 2) before any data is read or any estimate shown; a grid whose every case is recorded says
"nothing to do" instead of printing the cost table again.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from medmis.agents import ModelOptions, parse_spec
from medmis.defenses import create_defender, get_spec
from medmis.experiments.benchmark import Case
from medmis.experiments.harness import (
    EXIT_CASE_ERRORS,
    EXIT_OK,
    EXIT_STOPPED,
    Outcome,
    merge_options,
)
from medmis.experiments.records import read_records
from medmis.tools import ConfigError

from ._config import ROOT, AblationConfig

__all__ = ["check_config", "check_keys", "pending_cases", "worst_outcome"]


def check_config(config: AblationConfig) -> None:
    """Model specs, model options, defenders, the poisoned-page file and the baseline, checked
    without running.

    Raises:
        ConfigError: The first problem, in one line.
        DefenderConfigError: An unknown defender or invalid defender options.
    """
    for m in config.models:
        try:
            parse_spec(m.spec)
        except ValueError as exc:
            raise ConfigError(f"models: spec {m.spec!r}: {exc}") from None
    try:
        base = ModelOptions(**config.model_options)
    except (TypeError, ValueError) as exc:
        first = str(exc).splitlines()
        raise ConfigError(f"model_options: {' '.join(first[:3])}") from None
    for i, m in enumerate(config.models):
        try:
            merge_options(base, m.overrides)
        except (TypeError, ValueError) as exc:
            first = str(exc).splitlines()
            raise ConfigError(f"models.{i}.options ({m.name}): {' '.join(first[:3])}") from None
    labels = [create_defender(d.name, d.options).label for d in config.defender_configs()]
    if config.poison is not None:  # every share run reads the page file: a bad one stops all first
        from medmis.tools import load_pages

        pages = config.resolve(config.poison.pages)
        try:
            if not load_pages(pages):
                raise ConfigError(f"poison.pages: {pages} holds no poisoned pages")
        except ValueError as exc:
            raise ConfigError(f"poison.pages: {exc}") from None
    if config.baseline != "none" and config.baseline not in labels:
        raise ConfigError(f"baseline {config.baseline!r} is not a defender of the grid "
                       f"(choose from {', '.join(labels)})")


def pending_cases(out: Path, models: Sequence[str], labels: Sequence[str], cases: Sequence[Case],
                  *, retry_errors: bool = False, epochs: int = 1) -> int:
    """How many (model, defender, case, epoch) keys of ``cases`` in ``epochs`` epochs have no
    record in ``out`` yet (with ``retry_errors``: or a last record that is an error)."""
    done = {r.key for r in read_records(out / "records.jsonl") if not (retry_errors and r.error)}
    return sum(
        (spec, label, c.protocol, c.item.key, c.target, e) not in done
        for spec in models for label in labels for c in cases for e in range(epochs)
    )


def worst_outcome(outcomes: Sequence[Outcome | None]) -> Outcome:
    """The outcome that decides the exit status of several runs (stopped > errors > ok)."""
    rank = {EXIT_STOPPED: 2, EXIT_CASE_ERRORS: 1, EXIT_OK: 0}
    present = [o for o in outcomes if o is not None]
    return max(present, key=lambda o: rank.get(o.code, 3), default=Outcome(EXIT_OK))


def check_keys(config: AblationConfig) -> str | None:
    """A one-line explanation when a real provider's key is missing (before anything runs)."""
    import os

    needs = {
        "google": ("GOOGLE_API_KEY", "GEMINI_API_KEY"),
        "google_genai": ("GOOGLE_API_KEY", "GEMINI_API_KEY"),
        "openai": ("OPENAI_API_KEY",),
        "anthropic": ("ANTHROPIC_API_KEY",),
    }
    missing = []
    for m in config.models:
        # langchain:<provider>:<model> needs what the integration's provider needs
        provider = (m.spec.split(":")[1] if m.spec.startswith("langchain:")
                    else m.spec.split("/", 1)[0])
        variables = needs.get(provider)
        base_url = m.options.get("base_url") or config.model_options.get("base_url")
        if m.spec.startswith("openai/") and (base_url or os.environ.get("OPENAI_BASE_URL")):
            continue  # a local OpenAI-compatible server needs no key
        if variables and not any(os.environ.get(v) for v in variables):
            missing.append(f"{m.spec} needs {' or '.join(variables)}")
    uses_tools = any(get_spec(d.name).uses_tools for d in config.defender_configs())
    tool_keys = {("search", "tavily"): "TAVILY_API_KEY", ("search", "serper"): "SERPER_API_KEY",
                 ("visit", "jina"): "JINA_API_KEY"}
    for (field, value), variable in tool_keys.items():
        if uses_tools and getattr(config, field) == value and not os.environ.get(variable):
            missing.append(f"{field} = '{value}' needs {variable}")
    if not missing:
        return None
    demo = ROOT / "experiments" / "configs" / "demo.toml"
    return ("missing API keys: " + "; ".join(missing)
            + f". To see the whole pipeline offline, run: medmis ablate {demo.relative_to(ROOT)}")
