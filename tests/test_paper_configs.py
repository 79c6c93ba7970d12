"""The paper's studies as ablation configs (arXiv 2606.12291 §4.1, App. D.3): each dry-runs
offline on fixture data without keys or network, runs for real with the simulated examinee in
place of the models, and holds the settings the paper names."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from conftest import clear_provider_env

from medmis.defenses import create_defender
from medmis.experiments.ablation import load_config
from medmis.experiments.cli import main
from medmis.experiments.records import read_records

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "experiments" / "configs"
SAMPLE = ROOT / "fixtures" / "medmisbench_sample.jsonl"
MOCK = 'models=[{spec="mock/examinee"}]'


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_provider_env(monkeypatch, "google", "openai", "anthropic")
    for var in ("SERPER_API_KEY", "JINA_API_KEY", "TAVILY_API_KEY"):
        monkeypatch.delenv(var, raising=False)

    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError("network disabled in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_paper_grid_is_the_eleven_configurations() -> None:
    config = load_config(CONFIGS / "paper_grid.toml")
    settings = {m.name: {**m.options, **dict.fromkeys(m.unset)} for m in config.models}
    assert {k: {o: v for o, v in s.items() if o not in ("base_url", "extra", "max_output_tokens")}
            for k, s in settings.items()} == {
        "openai/gpt-5.4@none": {"reasoning_effort": "none"},
        "openai/gpt-5.4@medium": {"reasoning_effort": "medium", "temperature": None},
        "google/gemini-3.1-pro-preview@low": {"thinking_level": "low"},
        "google/gemini-3.1-pro-preview@high": {"thinking_level": "high"},
        "google/gemini-3.1-flash-lite-preview@minimal": {"thinking_level": "minimal"},
        "google/gemini-3.1-flash-lite-preview@medium": {"thinking_level": "medium"},
        "anthropic/claude-sonnet-4-6@low": {"reasoning_effort": "low", "thinking_budget": "adaptive",
                                            "temperature": 1.0},
        "anthropic/claude-sonnet-4-6@medium": {"reasoning_effort": "medium", "thinking_budget": "adaptive",
                                               "temperature": 1.0},
        "openai/google/gemma-4-26B-A4B-it": {},
        "openai/Qwen/Qwen3.6-35B-A3B": {},
        "openai/google/medgemma-27b-text-it": {},
    }
    open_weight = [m for m in config.models if m.options.get("base_url")]
    assert len(open_weight) == 3 and len({m.options["base_url"] for m in open_weight}) == 3
    assert config.model_options == {"temperature": 0.0}  # App. C.1
    assert (config.data, config.protocols, config.type1_targets, config.prompt) == (
        "hub:all", ["clean", "type1", "type2"], "sampled", "paper")
    assert [d.name for d in config.defenders] == ["none"]


def test_defensive_prompt_is_the_table_20_setting() -> None:
    config = load_config(CONFIGS / "defensive_prompt.toml")
    assert [m.name for m in config.models] == ["google/gemini-3.1-pro-preview@high",
                                               "anthropic/claude-sonnet-4-6@medium",
                                               "openai/Qwen/Qwen3.6-35B-A3B"]
    labels = [create_defender(d.name, d.options).label for d in config.defender_configs()]
    assert labels == ["none", "warning[placement=prepend]", "warning"]


@pytest.mark.parametrize(("name", "extra", "models", "cells"), [
    ("paper_grid.toml", [], 11, 11),
    ("defensive_prompt.toml", [], 3, 9),
    ("hle_search_paper.toml", ["--set", 'subset="MEDMISHLE"'], 2, 4),
])
def test_config_dry_runs_offline(name: str, extra: list[str], models: int, cells: int, offline: None,
                                 tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code = main(["ablate", str(CONFIGS / name), "--dry-run", "--data", str(SAMPLE), "--limit", "3",
                 "--out", str(out), *extra])
    text = capsys.readouterr().out
    assert code == 0
    assert f"{models} model(s)" in text and "total:" in text and "estimated $" in text
    table = text.split("-\n", 1)[1].split("\ntotal:", 1)[0].splitlines()
    assert len(table) == cells
    assert not out.exists()


@pytest.mark.parametrize(("name", "extra"), [
    ("paper_grid.toml", []),
    ("defensive_prompt.toml", []),
    ("hle_search_paper.toml", ["--set", 'subset="MEDMISHLE"', "--set", 'search="local"',
                               "--set", 'visit="direct"']),
])
def test_config_runs_offline_with_the_simulated_examinee(name: str, extra: list[str], offline: None,
                                                         tmp_path: Path) -> None:
    out = tmp_path / "run"
    code = main(["ablate", str(CONFIGS / name), "--data", str(SAMPLE), "--limit", "2", "--set", MOCK,
                 "--set", "cache=\"live\"", "--out", str(out), "--no-progress", *extra])
    assert code == 0
    records = read_records(out / "records.jsonl")
    config = load_config(CONFIGS / name)
    labels = {create_defender(d.name, d.options).label for d in config.defender_configs()}
    assert {r.model for r in records} == {"mock/examinee"} and {r.defender for r in records} == labels
    assert all(r.error is None for r in records)
    report = (out / "report.md").read_text()
    assert all(label in report for label in labels)
    assert json.loads((out / "manifest.json").read_text())["simulated"] is True
