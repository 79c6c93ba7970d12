"""The README's and the docs pages' shell and Python snippets run as written.

Every fenced ``bash`` and ``python`` block of README.md and docs/*.md is read from the page
itself (not restated here) and run offline in a temporary folder that holds the clone's
``fixtures/`` and ``experiments/`` (so the commands' relative paths resolve and what they write
lands in that folder: xdist workers never share a path). A page's blocks run in order in one
folder, as a reader types them, so a later block may read what an earlier one wrote.

A bash block whose every line stands alone runs line by line, as ``bash -e`` would: its plain
``medmis ...`` lines through ``medmis.experiments.cli.main`` in this process (the console script
and ``python -m`` are tested as processes elsewhere; a process per line costs a second and a
half of start-up each), under the same offline environment and with non-loopback connections
refused; its other lines (``head``, ``grep``, a redirection) in bash. A block with a construct
over several lines (a loop, a here-document) or a change of the shell's state (``cd``, a
variable) runs whole in bash.

A block that cannot run here says why in the comment just above it, ``<!-- skip: REASON -->``
(a key, a GPU, the hub, a server that runs until Ctrl-C, or another test that runs it with
checks of its own: the reason names that test). A block without a marker must run; there is
no other marker, so nothing long is left out of the default run without a reason on the page.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from medmis.experiments.cli import main

ROOT = Path(__file__).resolve().parents[1]
# the README and every page of the site, defender pages under docs/zoo/ included
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# variables that would let a snippet reach a paid API; a snippet must not need them
KEYS = ("GOOGLE_API_KEY", "GEMINI_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "TAVILY_API_KEY",
        "SERPER_API_KEY", "JINA_API_KEY", "HF_TOKEN")
BLOCK = re.compile(r"(?:<!--\s*(?P<marker>[^>]*?)\s*-->\n)?```(?P<lang>bash|python)\n(?P<code>.*?)```", re.DOTALL)


@dataclass(frozen=True)
class Snippet:
    """One fenced block of a page: its language, code, line and marker (``skip: ...``)."""

    page: Path
    line: int
    lang: str
    code: str
    marker: str

    @property
    def skipped(self) -> bool:
        return self.marker.startswith("skip:")


def snippets(page: Path) -> list[Snippet]:
    """The page's bash and python blocks in order, each with the marker comment just above it."""
    text = page.read_text(encoding="utf-8")
    return [Snippet(page, text.count("\n", 0, m.start("lang")) + 1, m["lang"], m["code"], m["marker"] or "")
            for m in BLOCK.finditer(text)]


PAGE_NEEDS = {"docs/exports.md": "inspect_ai"}
"""Pages whose blocks need an optional extra (``medmis export inspect`` needs ``medmis[inspect]``):
skipped, with the reason, where the README's test command alone installed ``.[test]``."""


def _page_params() -> list[object]:
    """One test per page that has a block to run."""
    params = []
    for page in PAGES:
        if not any(not s.skipped for s in snippets(page)):
            continue
        name = page.relative_to(ROOT).as_posix()
        module = PAGE_NEEDS.get(name)
        missing = module is not None and importlib.util.find_spec(module) is None
        params.append(pytest.param(page, id=name, marks=pytest.mark.skipif(
            missing, reason=f"{name} needs {module} (an optional extra)")))
    return params


def offline_env(home: Path) -> dict[str, str]:
    """This interpreter's environment without keys, with every proxy pointing at a closed port
    (a snippet that reaches for the network fails instead of fetching) and HOME in the test's
    folder."""
    env = {k: v for k, v in os.environ.items()
           if k not in KEYS and k not in ("PYTHONPATH", "PYTEST_ADDOPTS") and not k.startswith("PYTEST_XDIST")}
    closed = "http://127.0.0.1:9"
    env.update(HTTP_PROXY=closed, HTTPS_PROXY=closed, http_proxy=closed, https_proxy=closed,
               NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost", HF_HUB_OFFLINE="1",
               HOME=str(home), PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    return env


def workdir(tmp_path: Path) -> Path:
    """A folder laid out as the clone for the snippets' relative paths; writes stay in it."""
    where = tmp_path / "clone"
    where.mkdir()
    for name in ("fixtures", "experiments"):
        (where / name).symlink_to(ROOT / name, target_is_directory=True)
    return where


def run_snippet(snippet: Snippet, where: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Runs one block: bash with -euo pipefail, Python with this interpreter."""
    if snippet.lang == "bash":
        cmd = ["bash", "-euo", "pipefail", "-c", snippet.code]
    else:
        cmd = [sys.executable, "-c", snippet.code]
    return subprocess.run(cmd, cwd=where, env=env, capture_output=True, text=True, timeout=600)


def test_every_page_has_snippets_and_every_skip_says_why() -> None:
    found = [s for page in PAGES for s in snippets(page)]
    assert len(found) > 20
    for s in found:
        where = f"{s.page.name}:{s.line}"
        assert s.marker == "" or (s.skipped and len(s.marker) > len("skip: ") + 10), where
    # skipped: what needs keys, GPUs, the hub, a package install or a server that runs until
    # Ctrl-C, and what another test runs with checks of its own (the reason names it); a skip
    # added for convenience shows here
    skipped = [f"{s.page.name}:{s.line}" for s in found if s.skipped]
    others = [s for s in found if s.skipped and "tests/test_" in s.marker]
    assert len(skipped) - len(others) <= 18, skipped
    assert len(found) - len(skipped) >= 12


def test_a_block_with_a_marker_is_read_with_it(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("text\n\n<!-- skip: needs keys of its own -->\n```bash\nfalse\n```\n\n"
                    "```python\nprint(1)\n```\n<!-- a comment, not a skip -->\n```bash\ntrue\n```\n",
                    encoding="utf-8")
    found = snippets(page)
    assert [(s.lang, s.marker, s.line) for s in found] == [
        ("bash", "skip: needs keys of its own", 4), ("python", "", 8), ("bash", "a comment, not a skip", 12)]
    assert found[0].skipped and not found[1].skipped and not found[2].skipped
    # a marker that is not a skip is refused by the census above, so it cannot hide a block


# words that start a construct spanning lines or change the shell's state for the lines after
_SHELL_WORDS = {"if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case", "esac",
                "function", "{", "}", "(", ")", "!", "[[", "]]", "export", "cd", "set", "source", ".",
                "alias", "trap", "exec", "pushd", "popd"}
_OPERATORS = set("();<>|&")


def simple_lines(code: str) -> list[tuple[str, list[str]]] | None:
    """The block's command lines (continuations joined, comments dropped), each with its words,
    when every line is a command that ``bash -e`` runs on its own; None when one opens a construct
    over several lines (a loop, a here-document, a quote) or changes the shell's state."""
    lines = []
    for line in re.sub(r"\\\n\s*", " ", code).splitlines():
        lex = shlex.shlex(line, posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        try:
            words = list(lex)
        except ValueError:  # a quote that spans lines
            return None
        if not words:
            continue
        if (words[0] in _SHELL_WORDS or "=" in words[0].split("/")[0]
                or any(w.startswith("<<") or w in ("(", ")", "{", "}") for w in words)
                or set(words[-1]) <= _OPERATORS):
            return None
        lines.append((line, words))
    return lines


def medmis_args(words: list[str]) -> list[str] | None:
    """A line's arguments to ``medmis`` when it is a plain ``medmis`` command (no redirection,
    pipe, list, expansion or glob: those lines are bash's)."""
    if words[0] != "medmis" or any(set(w) <= _OPERATORS or any(c in w for c in "$`*?~[") for w in words):
        return None
    return words[1:]


def run_in_process(snippet: Snippet, where: Path, env: dict[str, str],
                   capsys: pytest.CaptureFixture[str]) -> str | None:
    """Runs a bash block line by line (plain ``medmis`` lines through ``main`` here, the rest in
    bash, stopping at the first failure, as ``bash -e`` does); what failed, or None. The caller
    has set the offline environment and changed to ``where``."""
    lines = simple_lines(snippet.code)
    assert lines is not None
    for line, words in lines:
        args = medmis_args(words)
        if args is not None:
            try:
                code: object = main(args)
            except SystemExit as stop:  # --help, --version and usage errors end in argparse
                code = stop.code or 0
            out, err = capsys.readouterr()
        else:
            done = subprocess.run(["bash", "-euo", "pipefail", "-c", line], cwd=where, env=env,
                                  capture_output=True, text=True, timeout=600)
            code, out, err = done.returncode, done.stdout, done.stderr
        if code != 0:
            return f"{line}\nexited {code}\n--- stdout\n{out[-3000:]}\n--- stderr\n{err[-3000:]}"
    return None


def test_a_block_runs_line_by_line_only_when_each_line_stands_alone() -> None:
    block = ('medmis run --data d \\\n  --out runs/x   # a comment\n\nhead -3 runs/x/a.csv\n'
             'grep -A5 "^| a | b" f\nprintf \'a\\nb\\n\' > runs/r.txt\n')
    lines = simple_lines(block)
    assert lines is not None
    assert [words for _, words in lines] == [
        ["medmis", "run", "--data", "d", "--out", "runs/x"], ["head", "-3", "runs/x/a.csv"],
        ["grep", "-A5", "^| a | b", "f"], ["printf", "a\\nb\\n", ">", "runs/r.txt"]]
    assert [medmis_args(words) for _, words in lines] == [["run", "--data", "d", "--out", "runs/x"], None, None, None]
    for line in ("medmis run > log", "medmis run | tee log", "medmis a && medmis b", "medmis a; medmis b",
                 "medmis run --out $OUT", "medmis report runs/*"):
        words = simple_lines(line)
        assert words is not None and medmis_args(words[0][1]) is None, line  # bash runs it
    for construct in ("out=runs/x", "for x in a b; do echo $x; done", "cat <<EOF", "medmis run |",
                      'echo "a\nb', "cd runs", "export A=1", "( cd runs && ls )", "if true; then", "medmis run &"):
        assert simple_lines(construct) is None, construct  # the whole block goes to bash


@pytest.mark.parametrize("page", _page_params())
def test_the_snippets_of_a_page_run_offline(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str],
                                            medmis_no_network: list[str]) -> None:
    where = workdir(tmp_path)
    env = offline_env(tmp_path)
    # what this process runs sees what a snippet's process would
    for key in KEYS:
        monkeypatch.delenv(key, raising=False)
    for key in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "NO_PROXY", "no_proxy",
                "HF_HUB_OFFLINE", "HOME"):
        monkeypatch.setenv(key, env[key])
    monkeypatch.chdir(where)
    for snippet in snippets(page):
        if snippet.skipped:
            continue
        if snippet.lang == "bash" and simple_lines(snippet.code) is not None:
            failed = run_in_process(snippet, where, env, capsys)
            assert failed is None, f"{page.name}:{snippet.line}: {failed}"
            continue
        done = run_snippet(snippet, where, env)
        assert done.returncode == 0, (
            f"{page.name}:{snippet.line} exited {done.returncode}\n{snippet.code}\n"
            f"--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}")
    assert medmis_no_network == []


# -- blocks another test runs with checks of its own (their markers name this file) ----------


def page_block(page: str, language: str, *needles: str) -> str:
    """The one fenced ``language`` block of ``page`` (README.md or docs/...) holding every needle."""
    blocks = [s.code for s in snippets(ROOT / page) if s.lang == language and all(n in s.code for n in needles)]
    assert len(blocks) == 1, f"{page}: {len(blocks)} {language} blocks hold {needles}"
    return blocks[0]


def shell_commands(block: str) -> list[list[str]]:
    """The commands of a bash block: comments dropped, backslash continuations joined."""
    joined = re.sub(r"\\\n\s*", " ", block)
    return [shlex.split(line) for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_the_offline_hle_mitigation_recipe_runs_without_the_hub_keys_or_network(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, medmis_no_network: list[str],
        capsys: pytest.CaptureFixture[str]) -> None:
    commands = shell_commands(page_block("docs/configs.md", "bash", "hle_mitigation.toml", "search=local"))
    assert [c[:3] for c in commands] == [["medmis", "ablate", "experiments/configs/hle_mitigation.toml"]] * 2
    monkeypatch.chdir(ROOT)  # the recipe runs from the clone
    for key in KEYS:
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
    example = page_block("docs/plugins.md", "python", "def test_search_agent_replays_offline")
    first = example.splitlines()[0]
    assert first.startswith("# tests/")
    where = tmp_path / "elsewhere"  # a user's project: no fixtures/ folder beside it
    test_file = where / first.removeprefix("# ")
    test_file.parent.mkdir(parents=True)
    test_file.write_text(example, encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)],
                          cwd=where, capture_output=True, text=True, timeout=300, env=offline_env(tmp_path))
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


def test_the_docs_name_every_command() -> None:
    from medmis.experiments.cli import build_parser

    page = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    usage = build_parser().format_usage()  # "usage: medmis [-h] [--version] {run,report,...} ..."
    found = re.search(r"\{(run,[^}]*)\}", usage)
    assert found, usage
    commands = found[1].split(",")
    assert sorted(c for c in commands if f"`medmis {c}" not in page) == []
    # every page is in the site's navigation (a page left out builds, but nobody finds it)
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = [p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")]
    assert sorted(p for p in pages if f": {p}" not in nav) == []


def test_the_readme_is_short_and_ci_runs_its_two_commands_as_written() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) < 300
    two = readme.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    commands = [s.code.strip() for s in snippets(ROOT / "README.md") if s.code.strip() in two]
    assert commands == ["pip install -e . && medmis ablate experiments/configs/demo.toml",
                        "pip install -e '.[test]' && pytest"]
    # .ci/run's steps, as `step "NAME" COMMAND...` lines; pip's -q only quietens it
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    steps = [shlex.split(line)[2:] for line in ci.splitlines() if line.startswith("step ")]
    steps = [[a for a in s if a != "-q"] for s in steps]
    for command in commands:  # each part of `A && B` is a step, in order, the parts back to back
        parts = [shlex.split(part) for part in command.split(" && ")]
        assert any(steps[i:i + len(parts)] == parts for i in range(len(steps))), (command, steps)
