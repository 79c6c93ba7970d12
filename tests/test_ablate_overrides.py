"""``medmis ablate`` overrides (``--data``, ``--limit``, ``--set``), the shipped HLE configs'
Type 1 target policies, and the prompt preset reaching records from ``run`` and ``ablate``."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from conftest import clear_provider_env

from medmis.experiments.ablation._config import load_config, parse_value
from medmis.experiments.benchmark import PRESETS
from medmis.experiments.cli import main
from medmis.experiments.records import read_records

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "experiments" / "configs"
HLE = CONFIGS / "hle_mitigation.toml"
SAMPLE = ROOT / "fixtures" / "medmisbench_sample.jsonl"


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError("network disabled in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


def test_hle_configs_sample_one_target_or_run_all() -> None:
    sampled, every = load_config(HLE), load_config(CONFIGS / "hle_mitigation_all_targets.toml")
    assert sampled.type1_targets == "sampled" and every.type1_targets == "all"
    assert sampled.prompt == every.prompt == "paper"
    assert sampled.out != every.out
    # the same grid otherwise
    assert sampled.models == every.models and sampled.defenders == every.defenders


def test_hle_dry_run_on_a_local_copy_needs_no_key_and_no_network(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], no_network: None
) -> None:
    clear_provider_env(monkeypatch, "google", "openai")
    monkeypatch.delenv("TAVILY_API_KEY", raising=False)
    code = main(["ablate", str(HLE), "--dry-run", "--data", str(SAMPLE), "--set", "subset=\"MEDMISHLE\""])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    # 5 MEDMISHLE items x (clean + one sampled type1 + type2) + a shuffled type2 pass
    assert "5 items" in captured.out and "type1 targets sampled, prompt paper" in captured.out
    assert "google/gemini-3.1-pro" in captured.out and "search_agent" in captured.out
    assert "total:" in captured.out and "estimated $" in captured.out


def test_overrides_reach_the_config(tmp_path: Path) -> None:
    config = load_config(
        HLE,
        [
            f"data={json.dumps(str(SAMPLE))}",
            "limit=3",
            "model_options.temperature=0.7",
            "defenders.3.options.max_iterations=2",
            "delivery.type2_shuffled=false",
            'prompt="toolkit"',
            "protocols=[\"clean\", \"type1\"]",
        ],
    )
    assert config.data == str(SAMPLE) and config.limit == 3
    assert config.model_options["temperature"] == 0.7
    assert config.defenders[3].name == "search_agent" and config.defenders[3].options == {"max_iterations": 2}
    assert config.delivery.type2_shuffled is False
    assert config.prompt == "toolkit" and config.protocols == ["clean", "type1"]


@pytest.mark.parametrize(
    ("raw", "value"),
    [("0.2", 0.2), ("3", 3), ("true", True), ('"x y"', "x y"), ("[1, 2]", [1, 2]),
     ("null", None), ("hub:MEDMISHLE", "hub:MEDMISHLE"), ("{a = 1}", {"a": 1})],
)
def test_values_read_as_toml_then_json_then_text(raw: str, value: object) -> None:
    assert parse_value(raw) == value


@pytest.mark.parametrize(
    ("pair", "message"),
    [
        ("temprature=0", "unknown key 'temprature'"),
        ("model_options.temprature=0", "unknown key 'model_options.temprature'"),
        ("delivery.shuffle=true", "unknown key 'delivery.shuffle'"),
        ("defenders.42.name=none", "no entry '42' in defenders"),
        ("models.x.spec=google/x", "no entry 'x' in models"),
        ("seed", "expects KEY=VALUE"),
        ("seed=abc", "seed: Input should be a valid integer"),
        ('prompt="fancy"', "prompt: Input should be 'paper' or 'toolkit'"),
    ],
)
def test_bad_overrides_are_one_line_errors(
    pair: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["ablate", str(HLE), "--dry-run", "--data", str(SAMPLE), "--set", pair])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("preset", ["paper", "toolkit"])
def test_run_records_the_preset(preset: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    argv = ["run", "--data", str(SAMPLE), "--subset", "MEDMISHLE", "--limit", "2",
            "--model", "mock/examinee", "--defender", "none", "--prompt", preset,
            "--out", str(out), "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    records = read_records(out / "records.jsonl")
    assert records and {(r.prompt, r.prompt_version) for r in records} == {(preset, PRESETS[preset].version)}
    assert all(r.choice is not None for r in records)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["prompt"] == preset and manifest["prompt"]["name"] == preset
    steps = [json.loads(line)["steps"] for line in (out / "traces").glob("*.jsonl").__next__().read_text().splitlines()]
    first_system = steps[0][0]["input"][0]["content"]
    assert ("Return only valid JSON" in first_system) == (preset == "paper")
    assert f"**Prompt:** `{preset}` v{PRESETS[preset].version}" in (out / "report.md").read_text()
