"""Local plug-in files (``--plugin FILE``): registered for one command, no packaging; their
source hash joins the fingerprint; a bad file is one line, exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from medmis.experiments.cli import main

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "fixtures" / "medmisbench_sample.jsonl"

PLUGIN = '''
from medmis.defenses import CaseView, DefenderContext, DefenderOptions, SolveFn, answer_from_reply, defender
from medmis.experiments.benchmark import Answer, render_prompt


class LocalOptions(DefenderOptions):
    """Attributes:
        preface: Put before the question.
    """

    preface: str = "Read carefully."


@defender("local_probe", options=LocalOptions, single_call=True)
def local_probe(opts: LocalOptions) -> SolveFn:
    """Answers once, with a preface."""
    async def solve(case: CaseView, ctx: DefenderContext) -> Answer:
        reply = await ctx.generate(render_prompt(case, preface=opts.preface), name="answer")
        return answer_from_reply(reply, case, ctx)

    return solve


@defender("local_blind", control=True, single_call=True)
def local_blind(opts: DefenderOptions) -> SolveFn:
    """A control: answers without the context."""
    async def solve(case: CaseView, ctx: DefenderContext) -> Answer:
        reply = await ctx.generate(render_prompt(case, context=[]), name="answer")
        return answer_from_reply(reply, case, ctx)

    return solve
'''


def medmis(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "medmis.experiments.cli", *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd)


def one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def run_args(out: Path, plugin: Path, *extra: str) -> list[str]:
    return ["run", "--data", str(SAMPLE), "--limit", "2", "--model", "mock/examinee",
            "--defender", "none,local_probe,local_blind", "--protocol", "clean,type1", "--out", str(out),
            "--no-progress", "--plugin", str(plugin), *extra]


def test_defenders_lists_a_local_plugin(tmp_path: Path) -> None:
    plugin = tmp_path / "defense.py"
    plugin.write_text(PLUGIN)
    listed = medmis("defenders", "--plugin", str(plugin))
    assert listed.returncode == 0, listed.stderr
    assert "local_probe  [single call: --batch]" in listed.stdout
    assert "--defender-option local_probe.preface=<str>" in listed.stdout
    assert "Put before the question." in listed.stdout
    assert "local_probe" not in medmis("defenders").stdout  # registered for that command only


def test_run_with_a_plugin_writes_its_report_and_refuses_an_edited_file(tmp_path: Path) -> None:
    plugin = tmp_path / "defense.py"
    plugin.write_text(PLUGIN)
    out = tmp_path / "run"
    first = medmis(*run_args(out, plugin))
    assert first.returncode == 0, first.stderr
    assert (out / "report.md").exists() and "local_probe" in (out / "report.md").read_text()
    # the report knew the plug-in's defenders: its control is a control there
    findings = json.loads((out / "verdict.json").read_text())["models"]["mock/examinee"]["findings"]
    assert findings["local_blind"]["control"] is True and findings["local_probe"]["control"] is False
    code = json.loads((out / "manifest.json").read_text())["fingerprint"]["defenders"]["local_probe"]["code"]
    assert code["sha256"] and code["modules"] == ["<local plug-in file>"]
    # the same content from another place is the same defender: nothing to do
    moved = tmp_path / "elsewhere" / "renamed.py"
    moved.parent.mkdir()
    moved.write_text(PLUGIN)
    again = medmis(*run_args(out, moved))
    assert again.returncode == 0 and "nothing to do" in again.stdout, again.stderr
    # an edit is another defender: refused on resume, named as a defender_code change
    plugin.write_text(PLUGIN.replace('name="answer"', 'name="first answer"'))
    edited = medmis(*run_args(out, plugin))
    assert edited.returncode == 2, edited.stdout
    line = one_line(edited.stderr)
    assert "defender_code local_probe: sha256=" in line and "--accept-change defender_code" in line
    accepted = medmis(*run_args(out, plugin, "--accept-change", "defender_code"))
    assert accepted.returncode == 0, accepted.stderr


def test_report_rebuilt_later_loads_the_runs_plugins(tmp_path: Path) -> None:
    """``medmis report RUN`` reads the run's plug-in files from its manifest, so a plug-in's
    control stays a control in a report rebuilt later; a file gone is one notice line."""
    plugin = tmp_path / "defense.py"
    plugin.write_text(PLUGIN)
    out = tmp_path / "run"
    assert medmis(*run_args(out, plugin)).returncode == 0

    def control() -> bool:
        findings = json.loads((out / "verdict.json").read_text())["models"]["mock/examinee"]["findings"]
        return bool(findings["local_blind"]["control"])

    (out / "verdict.json").unlink()
    rebuilt = medmis("report", str(out))
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert control() is True
    plugin.unlink()
    gone = medmis("report", str(out))
    assert gone.returncode == 0, gone.stderr
    line = one_line(gone.stderr)
    assert f"plug-in {plugin}" in line and "is not there" in line
    assert control() is False  # judged as a candidate without its registration


def test_ablate_takes_plugins_from_the_config_relative_to_it(tmp_path: Path) -> None:
    grid = tmp_path / "grids"
    (grid / "plugins").mkdir(parents=True)
    plugin = grid / "plugins" / "defense.py"
    plugin.write_text(PLUGIN)
    config = grid / "grid.toml"
    config.write_text(f"""
name = "local"
data = "{SAMPLE.as_posix()}"
limit = 2
protocols = ["clean", "type1"]
out = "{(tmp_path / 'out').as_posix()}"
plugins = ["plugins/defense.py"]

[[models]]
spec = "mock/examinee"

[[defenders]]
name = "none"

[[defenders]]
name = "local_probe"
sweep = {{ preface = ["Read carefully.", "Check the context."] }}
""", encoding="utf-8")
    done = medmis("ablate", str(config), "--no-progress", cwd=ROOT)
    assert done.returncode == 0, done.stderr
    defenders = json.loads((tmp_path / "out" / "manifest.json").read_text())["fingerprint"]["defenders"]
    assert {"none", "local_probe", "local_probe[preface=Check the context.]"} <= set(defenders)
    plugin.write_text(PLUGIN.replace("reply = await", "reply = (await").replace(
        'name="answer")', 'name="answer"))'))
    edited = medmis("ablate", str(config), "--no-progress", cwd=ROOT)
    assert edited.returncode == 2
    assert "defender_code local_probe" in one_line(edited.stderr)
    # the flag works on ablate too (a config without `plugins`)
    config.write_text(config.read_text().replace('plugins = ["plugins/defense.py"]\n', ""))
    other = tmp_path / "other.py"
    other.write_text(PLUGIN)
    flagged = medmis("ablate", str(config), "--dry-run", "--plugin", str(other), cwd=ROOT)
    assert flagged.returncode == 0, flagged.stderr
    assert "local_probe" in flagged.stdout


@pytest.mark.parametrize(("content", "expected"), [
    (None, "no such file"),
    ("def broken(:\n", "syntax error at line 1"),
    ("import medmis_no_such_module\n", "failed to import: ModuleNotFoundError: No module named 'medmis_no_such_module'"),
    ("X = 1\n", "defines no defender"),
    (PLUGIN.replace('"local_probe"', '"warning"'), "defender 'warning' is already registered"),
])
def test_a_bad_plugin_file_is_one_line_exit_2(tmp_path: Path, content: str | None, expected: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    # in this process: a file that fails registers nothing (the loader undoes what it did), so
    # no other test sees it; the tests above run the commands as processes
    plugin = tmp_path / "bad.py"
    if content is not None:
        plugin.write_text(content)
    for args in (["defenders", "--plugin", str(plugin)],
                 run_args(tmp_path / "run", plugin)):
        assert main(args) == 2, args
        line = one_line(capsys.readouterr().err)
        assert line.startswith(f"medmis: plug-in {plugin}: ") and expected in line, line
    assert not (tmp_path / "run").exists()  # nothing created
