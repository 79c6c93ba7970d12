"""The command line a new user meets: --version, help for every option, spending caps on
``medmis run``, and the README's and docs' walkthroughs that write under ``runs/``."""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from medmis.experiments._cli_flags import RemovedFlag
from medmis.experiments.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "fixtures" / "medmisbench_sample.jsonl"


def _medmis(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "medmis.experiments.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=180)


def test_version_names_the_installed_distribution_and_the_checkout_commit() -> None:
    done = _medmis("--version")
    assert done.returncode == 0 and done.stderr == ""
    line = done.stdout.strip()
    assert line.startswith(f"medmis {metadata.version('medmis')}")
    if (ROOT / ".git").exists() and shutil.which("git"):
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        commit = re.fullmatch(r"medmis \S+ \(git ([0-9a-f]{12})\)", line)
        assert commit and head.startswith(commit.group(1))


def _walk(parser: argparse.ArgumentParser, path: list[str]) -> list[str]:
    missing: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | RemovedFlag):  # a removed flag is hidden on purpose
            continue
        if isinstance(action, argparse._SubParsersAction):
            described = {choice.dest for choice in action._choices_actions}
            for name, sub in action.choices.items():
                if name not in described:
                    missing.append(" ".join([*path, name]) + " (the command itself)")
                missing += _walk(sub, [*path, name])
        elif not action.help or action.help == argparse.SUPPRESS:
            missing.append(" ".join([*path, *(action.option_strings[:1] or [action.dest])]))
    return missing


def test_every_option_of_every_command_has_help() -> None:
    assert _walk(build_parser(), ["medmis"]) == []


@pytest.mark.parametrize("flag", [["--processes", "2"], ["--processes", "auto"], ["--processes"],
                                  ["--helper-timeout", "30"]])
def test_a_removed_flag_is_one_line_and_exit_2(flag: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["run", "--data", "x.jsonl", "--model", "mock/examinee", *flag])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert f"{flag[0]} was removed: every call runs in one process on one event loop" in err


def _run(tmp_path: Path, *extra: str) -> list[str]:
    return ["run", "--data", str(SAMPLE), "--limit", "10", "--model", "mock/examinee", "--defender", "none",
            "--protocol", "clean,type1", "--max-connections", "1", "--no-progress",
            "--out", str(tmp_path / "run"), *extra]


def test_run_stops_at_the_call_cap_with_exit_3_and_resumes(tmp_path: Path) -> None:
    assert main(_run(tmp_path, "--max-calls", "5")) == 3
    out = tmp_path / "run"
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["outcome"]["exit_code"] == 3 and "call cap 5" in manifest["outcome"]["message"]
    assert "call cap 5" in manifest["stopped"]
    records = [json.loads(line) for line in (out / "records.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(records) == 5 and sum(r["llm_calls"] for r in records) == 5
    # the same command goes on with a fresh allowance; without a cap it finishes
    assert main(_run(tmp_path, "--max-calls", "5")) == 3
    assert main(_run(tmp_path)) == 0
    assert len((out / "records.jsonl").read_text(encoding="utf-8").splitlines()) == 20


def test_run_stops_at_the_dollar_cap(tmp_path: Path) -> None:
    # $1,000 per million tokens: a few cases of the simulated examinee pass $0.50
    assert main(_run(tmp_path, "--price", "mock/examinee=1000,1000", "--max-usd", "0.5")) == 3
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text(encoding="utf-8"))
    assert "budget cap $0.50 reached" in manifest["outcome"]["message"]
    done = len((tmp_path / "run" / "records.jsonl").read_text(encoding="utf-8").splitlines())
    assert 0 < done < 20


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--max-usd", "1"), "--max-usd needs --price MODEL=IN,OUT for every model; none for mock/examinee"),
        (("--max-calls", "0"), "--max-calls: must be >= 1"),
    ],
)
def test_a_cap_that_cannot_work_is_one_line_and_creates_nothing(
    tmp_path: Path, extra: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:  # in this process: a refused value is main's exit 2 or argparse's
        code = main(_run(tmp_path, *extra))
    except SystemExit as usage:
        code = int(usage.code or 0)
    err = capsys.readouterr().err
    assert code == 2 and message in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "run").exists()


def _bash_blocks() -> list[str]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    text = "\n".join(page.read_text(encoding="utf-8") for page in pages)
    return re.findall(r"```bash\n(.*?)```", text, re.DOTALL)


def test_readme_and_docs_walkthroughs_write_under_runs() -> None:
    written: list[str] = []
    for block in _bash_blocks():
        code = "\n".join(line.split("  #", 1)[0] for line in block.splitlines()
                         if not line.lstrip().startswith("#"))
        written += re.findall(r"--out\s+(\S+)", code)
        written += re.findall(r"(?<![-=>\w])>>?\s*(\S+)", code)  # redirections, not arrows or <placeholders>
        written += re.findall(r"--cache-dir\s+(\S+)", code)
        written += re.findall(r"medmis cache export\s+--cache-dir\s+\S+\s+(\S+)", code)
    assert written, "README lost its walkthroughs"
    outside = [path for path in written if not path.startswith("runs/")]
    assert outside == []


# -- everything a user needs is in the project -------------------------------------------------


def _project_text_files() -> list[Path]:
    if (ROOT / ".git").exists() and shutil.which("git"):
        names = subprocess.run(["git", "-C", str(ROOT), "ls-files"], capture_output=True, text=True,
                               check=True).stdout.splitlines()
        files = [ROOT / name for name in names]
    else:  # pragma: no cover - an unpacked source archive
        files = [p for p in ROOT.rglob("*") if p.is_file() and ".git" not in p.parts]
    return [p for p in files if p.suffix in {".py", ".md", ".toml", ".txt", ".cfg", ""} and p.is_file()]


def test_the_project_points_to_nothing_outside_it() -> None:
    offenders = []
    for path in _project_text_files():
        if path.name == "test_cli_surface.py":  # this test names what it looks for
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if re.search(r"\.\./shared|shared/DESIGN|DESIGN\.md|STYLE\.md", text):
            offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []
    for page in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]:  # relative links resolve
        for target in re.findall(r"\]\(((?!https?:|#)[^)#]+)", page.read_text(encoding="utf-8")):
            assert (page.parent / target).exists(), (page.name, target)


def test_the_contracts_page_lists_every_field_the_code_writes() -> None:
    from medmis.experiments.analysis import (
        METRICS,
        STRATUM_KINDS,
        Cost,
        PairedComparison,
        Proportion,
    )
    from medmis.experiments.benchmark import Record
    from medmis.experiments.reporting._format import CSV_COLUMNS

    page = (ROOT / "docs" / "contracts.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`([a-z_0-9]+)`", page))
    fields = [*Record.model_fields, *METRICS, *STRATUM_KINDS, *Proportion.model_fields,
              *PairedComparison.model_fields, *Cost.model_fields, *CSV_COLUMNS,
              "status", "exit_code", "case_errors", "message", "stopped", "fingerprint", "accepted_changes"]
    assert sorted(set(fields) - named) == []
    assert "docs/contracts.md" in (ROOT / "README.md").read_text(encoding="utf-8")
    assert "contracts.md" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")


def test_the_contracts_page_lists_every_key_of_verdict_json() -> None:
    from medmis.experiments.analysis import Finding, ModelVerdict, Verdict

    written = Verdict(baseline="none", incomplete=None, simulated=True, models=[
        ModelVerdict(model="m", baseline_present=True, findings={"d": Finding(defender="d")})]).to_json()
    keys = {*written, *written["settings"], *written["models"]["m"], *written["models"]["m"]["findings"]["d"]}
    page = (ROOT / "docs" / "contracts.md").read_text(encoding="utf-8")
    section = page.split("## `verdict.json`", 1)[1].split("\n## ", 1)[0]
    assert sorted(k for k in keys if f"`{k}`" not in section) == []


@pytest.mark.parametrize(
    "argv",
    [
        ["compare", "{tmp}/a", "{tmp}/b"],
        ["report", "{tmp}/a"],
        ["view", "{tmp}/a"],
        ["review", "form", "{tmp}/a"],
        ["review", "sample", "{tmp}/a", "--n", "3", "--out", "{tmp}/pack"],
        ["ablate", "{tmp}/missing.toml"],
        ["generate", "{tmp}/missing.jsonl", "--generator", "mock/generator", "--out", "{tmp}/g.jsonl"],
        ["data", "validate", "{tmp}/bad.jsonl"],
    ],
)
def test_data_errors_exit_2_on_every_command(
    tmp_path: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # the exit-status table (docs/runs.md): a data error is 2 (one line, nothing created) whatever the command
    (tmp_path / "bad.jsonl").write_text('{"id": "x", "question": "", "answer": "Z"}\n', encoding="utf-8")
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 2
    assert "Traceback" not in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == before
