"""One ablation holding a model several times with options of its own (the paper's grid runs
GPT-5.4 at two reasoning efforts): each ``[[models]]`` entry's ``label`` names it in records,
its ``options`` override ``model_options`` for it alone, ``unset`` sends an option not at all,
and a resume with other options for a name is refused."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import clear_provider_env

from medmis.agents import ModelOptions
from medmis.experiments import ConfigError as CliError
from medmis.experiments.ablation import load_config
from medmis.experiments.cli import main
from medmis.experiments.harness import Harness, ModelVariant, RunConfig
from medmis.experiments.records import read_records

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "fixtures" / "medmisbench_sample.jsonl"

GRID = f"""
name = "variants"
data = "{SAMPLE}"
subset = "MEDMISHLE"
limit = 2
protocols = ["clean", "type1"]
cache = "live"

[model_options]
temperature = 0.0
extra = {{ clean_accuracy = 0.8 }}

[[models]]
spec = "mock/examinee"
label = "mock/examinee@knows-little"
options = {{ extra = {{ clean_accuracy = 0.05 }} }}

[[models]]
spec = "mock/examinee"
label = "mock/examinee@knows-much"
options = {{ extra = {{ clean_accuracy = 0.95 }} }}

[[defenders]]
name = "none"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "grid.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_one_spec_twice_with_options_of_its_own(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert main(["ablate", str(write(tmp_path, GRID)), "--out", str(out), "--no-progress"]) == 0
    records = read_records(out / "records.jsonl")
    assert {r.model for r in records} == {"mock/examinee@knows-little", "mock/examinee@knows-much"}
    assert len(records) == 2 * 2 * 2  # 2 models x 2 items x (clean + one type1)
    manifest = json.loads((out / "manifest.json").read_text())
    variants = manifest["config"]["model_variants"]
    assert variants["mock/examinee@knows-little"] == {"spec": "mock/examinee",
                                                      "options": {"extra": {"clean_accuracy": 0.05}}}
    assert manifest["simulated"] is True  # a label keeps its spec's provider
    report = (out / "report.md").read_text()
    assert ("**Per-model settings:** `mock/examinee@knows-little` = `mock/examinee` "
            "(extra={'clean_accuracy': 0.05})") in report
    # the options reached each model: the same requests, other answers
    harness = Harness(RunConfig.model_validate(manifest["config"] | {"out": str(tmp_path / "x")}))
    built = {name: harness._pool.raw(name) for name in variants}
    assert {n: m._identifying_params["clean_accuracy"] for n, m in built.items()} == {
        "mock/examinee@knows-little": 0.05, "mock/examinee@knows-much": 0.95}



def test_refused_resume_names_the_model_and_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An interrupted grid resumed with another option for a name already run: another model."""
    out = tmp_path / "run"
    assert main(["ablate", str(write(tmp_path, GRID)), "--out", str(out), "--no-progress"]) == 0
    lines = (out / "records.jsonl").read_text().splitlines(keepends=True)
    (out / "records.jsonl").write_text("".join(lines[:-2]))  # as if stopped before the end
    capsys.readouterr()
    changed = GRID.replace("clean_accuracy = 0.95", "clean_accuracy = 0.5")
    assert main(["ablate", str(write(tmp_path, changed)), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    # the name's own options changed, and so did the simulated examinee it builds
    assert "model mock/exam" in err and "--accept-change examinee,model_options" in err
    assert len(read_records(out / "records.jsonl")) == 6
    # the same options resume it
    assert main(["ablate", str(write(tmp_path, GRID)), "--out", str(out), "--no-progress"]) == 0
    assert len(read_records(out / "records.jsonl")) == 8


def test_openai_entries_are_built_with_their_own_settings(monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    """What the paper grid's GPT-5.4 entries send (no request is made: the adapters' request
    parameters are read)."""
    clear_provider_env(monkeypatch, "openai")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-used-0000")
    config = RunConfig(
        data=str(SAMPLE), out=str(tmp_path / "r"), models=["openai/gpt-5.4@none", "openai/gpt-5.4@medium"],
        defenders=[],
        model_options=ModelOptions(temperature=0.0),
        model_variants={
            "openai/gpt-5.4@none": ModelVariant(spec="openai/gpt-5.4", options={"reasoning_effort": "none"}),
            "openai/gpt-5.4@medium": ModelVariant(spec="openai/gpt-5.4", options={
                "reasoning_effort": "medium", "temperature": None}),
        },
    )
    harness = Harness(config)
    none = harness._pool.raw("openai/gpt-5.4@none")._identifying_params
    medium = harness._pool.raw("openai/gpt-5.4@medium")._identifying_params
    assert (none["model"], none["reasoning_effort"], none["temperature"]) == ("gpt-5.4", "none", 0.0)
    assert (medium["model"], medium["reasoning_effort"]) == ("gpt-5.4", "medium")
    assert medium.get("temperature") is None


@pytest.mark.parametrize(("models", "message"), [
    ('[[models]]\nspec = "mock/examinee"\n[[models]]\nspec = "mock/examinee"\n', "listed twice"),
    ('[[models]]\nspec = "mock/examinee"\nlabel = "examinee B"\n', "must be the spec"),
    ('[[models]]\nspec = "mock/examinee"\nunset = ["timeout_s"]\n', "unset: timeout_s cannot be unset"),
])
def test_bad_model_entries_are_one_line(tmp_path: Path, models: str, message: str,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    text = f'data = "{SAMPLE}"\n{models}[[defenders]]\nname = "none"\n'
    code = main(["ablate", str(write(tmp_path, text)), "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_bad_per_model_option_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (f'data = "{SAMPLE}"\n[[models]]\nspec = "mock/examinee"\nlabel = "mock/examinee@x"\n'
            'options = { thinking_level = "extreme" }\n[[defenders]]\nname = "none"\n')
    assert main(["ablate", str(write(tmp_path, text)), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "models.0.options (mock/examinee@x)" in err and "thinking_level" in err


def test_set_reaches_a_per_model_option(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, GRID), ["models.1.options.reasoning_effort=\"low\""])
    assert config.models[1].options["reasoning_effort"] == "low"
    with pytest.raises(CliError, match=re.escape("unknown key 'models.1.options.reasoning_efort'")):
        load_config(write(tmp_path, GRID), ["models.1.options.reasoning_efort=\"low\""])
