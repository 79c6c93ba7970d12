"""The README's offline recipes run as written: the commands are read from the README itself
(not restated here), so a recipe that loses a step fails."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from medmis.experiments.cli import main

ROOT = Path(__file__).resolve().parents[1]


def readme_block(language: str, *needles: str) -> str:
    """The one fenced ``language`` block of the README that holds every needle."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = [b for b in re.findall(rf"```{language}\n(.*?)```", text, re.DOTALL) if all(n in b for n in needles)]
    assert len(blocks) == 1, f"README: {len(blocks)} {language} blocks hold {needles}"
    return blocks[0]


def shell_commands(block: str) -> list[list[str]]:
    """The commands of a bash block: comments dropped, backslash continuations joined."""
    joined = re.sub(r"\\\n\s*", " ", block)
    return [shlex.split(line) for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_the_offline_hle_mitigation_recipe_runs_without_the_hub_keys_or_network(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, medmis_no_network: list[str],
        capsys: pytest.CaptureFixture[str]) -> None:
    commands = shell_commands(readme_block("bash", "hle_mitigation.toml", "search=local"))
    assert [c[:3] for c in commands] == [["medmis", "ablate", "experiments/configs/hle_mitigation.toml"]] * 2
    monkeypatch.chdir(ROOT)  # the recipe runs from the clone
    for key in ("GOOGLE_API_KEY", "GEMINI_API_KEY", "TAVILY_API_KEY", "SERPER_API_KEY", "JINA_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    out = tmp_path / "hle_offline"
    dry, real = ([str(out) if a == "runs/hle_offline" else a for a in c] for c in commands)
    assert "--dry-run" in dry and str(out) in real
    assert main(dry[1:]) == 0
    plan = capsys.readouterr().out
    hle_items = sum('"MEDMISHLE"' in line for line in (ROOT / "fixtures" / "medmisbench_sample.jsonl")
                    .read_text(encoding="utf-8").splitlines())
    assert f"ablation 'hle_mitigation': {hle_items} items" in plan
    assert main(real[1:]) == 0
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["simulated"] is True and manifest["dataset"]["subset"] == "MEDMISHLE"
    records = [json.loads(line) for line in (out / "records.jsonl").read_text(encoding="utf-8").splitlines()]
    assert {r["subset"] for r in records} == {"MEDMISHLE"}
    assert len({r["item_id"] for r in records}) == hle_items
    assert len({r["defender"] for r in records}) == 9 and not any(r["error"] for r in records)
    # the search agent searched the bundled corpus (no Tavily key was there to use)
    assert sum(r["tool_calls"] for r in records if r["defender"] == "search_agent") > 0


def test_the_replay_example_runs_from_any_directory(tmp_path: Path) -> None:
    example = readme_block("python", "def test_search_agent_replays_offline")
    first = example.splitlines()[0]
    assert first.startswith("# tests/")
    where = tmp_path / "elsewhere"  # a user's project: no fixtures/ folder beside it
    test_file = where / first.removeprefix("# ")
    test_file.parent.mkdir(parents=True)
    test_file.write_text(example, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)],
                          cwd=where, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "1 passed" in done.stdout
    assert not (where / "fixtures").exists()


def test_bundled_fixture_names_what_it_cannot_find() -> None:
    from medmis.testing import BUNDLED_FIXTURES, bundled_fixture

    assert bundled_fixture("cassettes/search_agent_hle.jsonl") == BUNDLED_FIXTURES / "cassettes" / "search_agent_hle.jsonl"
    assert bundled_fixture("medmisbench_sample.jsonl").is_absolute()
    for bad in ("cassettes/none.jsonl", "../pyproject.toml", "corpus"):
        with pytest.raises(FileNotFoundError, match="medmis ships no fixture"):
            bundled_fixture(bad)
