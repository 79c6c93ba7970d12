"""Ablations: grid expansion, dry-run estimates, budget cap, resume, shuffled type2, keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medmis.experiments.ablation import AblationConfig, DefenderEntry, load_config
from medmis.experiments.cli import main
from medmis.experiments.records import read_records

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "fixtures" / "medmisbench_sample.jsonl"


def write_config(tmp_path: Path, extra: str = "", defenders: str | None = None) -> Path:
    defenders = defenders or """
[[defenders]]
name = "none"

[[defenders]]
name = "warning"

[[defenders]]
name = "search_agent"
sweep = { max_iterations = [1, 3] }
"""
    text = f"""
name = "t"
data = "{SAMPLE.as_posix()}"
subset = "MEDMISHLE"
out = "{(tmp_path / 'out').as_posix()}"
cache = "record"
{extra}

[[models]]
spec = "mock/examinee"
price_in_per_mtok = 1000.0
price_out_per_mtok = 1000.0
{defenders}
"""
    path = tmp_path / "ablation.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_sweeps_expand_into_labelled_defenders() -> None:
    entry = DefenderEntry(name="search_agent", options={"max_results": 3}, sweep={"max_iterations": [1, 3]})
    assert [d.options for d in entry.expand()] == [
        {"max_results": 3, "max_iterations": 1},
        {"max_results": 3, "max_iterations": 3},
    ]


def test_shipped_configs_are_valid() -> None:
    for name in ("demo.toml", "hle_mitigation.toml"):
        config = load_config(ROOT / "experiments" / "configs" / name)
        assert isinstance(config, AblationConfig)
        labels = {d.name for d in config.defender_configs()}
        assert {"none", "warning", "search_agent"} <= labels


def test_dry_run_prints_plan_and_runs_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ablate", str(write_config(tmp_path)), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "search_agent[max_iterations=3]" in out and "search_agent[max_iterations=1]" in out
    assert "total: 60 cases" in out  # 5 items x 3 protocols x 4 defender cells (type1 sampled)
    assert "estimated $" in out
    assert not (tmp_path / "out" / "records.jsonl").exists()


def test_budget_cap_stops_cleanly_and_a_rerun_finishes_without_repeats(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, extra="budget_usd = 1.0")
    assert main(["ablate", str(config), "--no-progress"]) == 3  # stopped early
    assert "stopped early: budget cap" in capsys.readouterr().err
    out_dir = tmp_path / "out"
    manifest = json.loads((out_dir / "manifest.json").read_text())
    assert "budget cap" in manifest["stopped"]
    assert manifest["outcome"]["exit_code"] == 3
    partial = read_records(out_dir / "records.jsonl")
    assert 0 < len(partial) < 60
    # raise the cap and run again: the interrupted ablation completes, nothing is redone
    config.write_text(config.read_text().replace("budget_usd = 1.0", "budget_usd = 1000.0"))
    assert main(["ablate", str(config), "--no-progress"]) == 0
    lines = (out_dir / "records.jsonl").read_text().splitlines()
    keys = [tuple(json.loads(x)[k] for k in ("defender", "protocol", "item_id", "target")) for x in lines]
    assert len(keys) == len(set(keys)) == 60
    assert (out_dir / "report.md").exists()
    assert "SIMULATED EXAMINEE" in (out_dir / "report.md").read_text()


def test_shuffled_type2_pass_runs_beside_the_main_grid(tmp_path: Path) -> None:
    config = write_config(
        tmp_path, extra='[delivery]\ntype2_shuffled = true',
        defenders='[[defenders]]\nname = "none"\n',
    )
    assert main(["ablate", str(config), "--no-progress"]) == 0
    shuffled = read_records(tmp_path / "out" / "type2_shuffled" / "records.jsonl")
    assert {r.protocol for r in shuffled} == {"clean", "type2"}
    assert (tmp_path / "out" / "type2_shuffled" / "metrics.json").exists()


def test_missing_keys_point_to_the_demo(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    for var in ("GOOGLE_API_KEY", "GEMINI_API_KEY", "TAVILY_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    code = main(["ablate", str(ROOT / "experiments" / "configs" / "hle_mitigation.toml")])
    err = capsys.readouterr().err
    assert code == 2
    assert "GOOGLE_API_KEY" in err and "demo.toml" in err and "Traceback" not in err


PAPER_CONFIG = ROOT / "experiments" / "configs" / "hle_search_paper.toml"


def test_paper_search_config_is_the_table_19_setting() -> None:
    from medmis.defenses import create_defender

    config = load_config(PAPER_CONFIG)
    mitigation = load_config(ROOT / "experiments" / "configs" / "hle_mitigation.toml")
    # the paper's -preview ids; flash-lite at medium thinking (App. D.3)
    assert [m.spec for m in config.models] == ["google/gemini-3.1-pro-preview",
                                               "google/gemini-3.1-flash-lite-preview"]
    assert [m.options for m in config.models] == [{}, {"thinking_level": "medium"}]
    assert len(config.models) == len(mitigation.models)
    assert (config.search, config.visit, config.type1_targets) == ("serper", "jina", "sampled")
    assert config.data == "hub:MEDMISHLE" and "clean" in config.protocols
    defenders = [create_defender(d.name, d.options) for d in config.defender_configs()]
    assert [d.label for d in defenders] == ["none", "search_agent[preset=paper]"]
    agent = defenders[1].options
    assert agent.research_clean is True and agent.warn is False  # type: ignore[attr-defined]


def test_paper_search_config_dry_runs_without_keys(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for var in ("GOOGLE_API_KEY", "GEMINI_API_KEY", "SERPER_API_KEY", "JINA_API_KEY", "TAVILY_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    out = tmp_path / "out"
    code = main(["ablate", str(PAPER_CONFIG), "--dry-run", "--data", str(SAMPLE), "--limit", "2", "--out", str(out)])
    text = capsys.readouterr().out
    assert code == 0
    assert "2 items, 2 model(s) x 2 defender(s)" in text and "search_agent[preset=paper]" in text
    assert "total: 24 cases" in text  # 2 items x 3 protocols x 2 models x 2 defenders
    assert not out.exists()
    # clean questions are estimated through the tool loop too (the toolkit agent skips it)
    from medmis.experiments.ablation import estimate
    from medmis.experiments.benchmark import build_cases, load_dataset

    clean = build_cases(load_dataset(str(SAMPLE), limit=2).items, ["clean"])
    config = load_config(PAPER_CONFIG)
    config = config.model_copy(update={"models": config.models[:1], "defenders": [
        DefenderEntry(name="search_agent", options={"preset": "paper"}), DefenderEntry(name="search_agent")]})
    paper_cell, toolkit_cell = estimate(config, clean, tmp_path)
    assert paper_cell.tool_calls > 0 and toolkit_cell.tool_calls == 0


def test_paper_search_config_names_every_missing_key(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GOOGLE_API_KEY", "g")
    for var in ("SERPER_API_KEY", "JINA_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    assert main(["ablate", str(PAPER_CONFIG)]) == 2
    err = capsys.readouterr().err
    assert "SERPER_API_KEY" in err and "JINA_API_KEY" in err and "Traceback" not in err


def test_key_check_knows_anthropic_and_langchain_specs(monkeypatch: pytest.MonkeyPatch) -> None:
    from medmis.experiments.ablation import ModelEntry
    from medmis.experiments.ablation._ablate import check_keys

    for var in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL", "GOOGLE_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    config = load_config(ROOT / "experiments" / "configs" / "hle_mitigation.toml")
    specs = ["anthropic/claude-sonnet-4-6", "langchain:anthropic:claude-opus-4-6", "langchain:openai:gpt-5.4"]
    config = config.model_copy(update={"models": [ModelEntry(spec=s) for s in specs], "search": "local"})
    problem = check_keys(config)
    assert problem is not None and "\n" not in problem
    assert "anthropic/claude-sonnet-4-6 needs ANTHROPIC_API_KEY" in problem
    assert "langchain:anthropic:claude-opus-4-6 needs ANTHROPIC_API_KEY" in problem
    assert "langchain:gpt-5.4" not in problem and "langchain:openai:gpt-5.4 needs OPENAI_API_KEY" in problem
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant")
    monkeypatch.setenv("OPENAI_API_KEY", "sk")
    assert check_keys(config) is None


def _choices(out: Path) -> dict[tuple[str, str, str | None], str | None]:
    return {(r.protocol, r.item_id, r.target): r.choice for r in read_records(out / "records.jsonl")}


def test_the_ablation_seed_reseeds_the_simulated_examinee(tmp_path: Path) -> None:
    """``--set seed=1`` changes the examinee's draws, as ``medmis run --seed`` does (issue 23:
    1,600/1,600 demo answers were identical under another seed)."""
    config = tmp_path / "seeded.toml"
    config.write_text(f"""
data = "{SAMPLE.as_posix()}"
protocols = ["clean", "type1"]
type1_targets = "all"
cache = "record"

[[models]]
spec = "mock/examinee"

[[defenders]]
name = "none"
""", encoding="utf-8")
    runs = {}
    for seed in (0, 1):
        out = tmp_path / f"seed-{seed}"
        assert main(["ablate", str(config), "--out", str(out), "--no-progress", "--set", f"seed={seed}"]) == 0
        runs[seed] = _choices(out)
    assert runs[0].keys() == runs[1].keys()
    assert sum(runs[0][k] != runs[1][k] for k in runs[0]) > len(runs[0]) / 10


def test_stability_seeds_rerun_the_cases_reseeded_and_the_report_counts_them(tmp_path: Path) -> None:
    config = write_config(tmp_path, extra="[simulation]\nstability_seeds = 3",
                          defenders='[[defenders]]\nname = "none"\n\n[[defenders]]\nname = "context_blind"\n')
    assert main(["ablate", str(config), "--no-progress"]) == 0
    out = tmp_path / "out"
    main_choices = _choices(out)
    for seed in (1, 2):
        sub = out / "stability" / f"seed-{seed}"
        assert _choices(sub).keys() == main_choices.keys()
        manifest = json.loads((sub / "manifest.json").read_text())
        # the examinee's seed (the run seed stays the grid's: it picks the same cases)
        assert manifest["fingerprint"]["model_options"]["run_seed"] == seed
        assert manifest["decoding"]["resolved"]["mock/examinee"] == {"simulated": True, "seed": seed}
    stability = json.loads((out / "stability.json").read_text())
    assert stability["seeds"] == [0, 1, 2]
    report = (out / "report.md").read_text()
    assert "## Ranking stability over 3 examinee seeds" in report
    assert "`context_blind`: named better 0/3" in report  # a control is never named
    assert main(["ablate", str(config), "--no-progress"]) == 0  # all done: nothing to do


def test_stability_seeds_are_refused_for_a_real_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, extra="[simulation]\nstability_seeds = 5")
    config.write_text(config.read_text().replace('spec = "mock/examinee"', 'spec = "openai/gpt-x"'))
    assert main(["ablate", str(config), "--dry-run"]) == 2
    assert "stability_seeds" in capsys.readouterr().err
