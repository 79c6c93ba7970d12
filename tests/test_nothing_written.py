"""Exit 2 means nothing was written (issue 31): a run folder where a path the run writes is
unusable (a folder in place of a trace file or of ``records.jsonl``, a file in place of
``traces/``) is refused before a lock, a manifest, a plan or an empty ``records.jsonl`` is
made, by ``medmis run`` and by ``medmis ablate`` (one preflight, ``Harness.check_outputs``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "fixtures" / "medmisbench_sample.jsonl"


def medmis(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ}
    return subprocess.run([sys.executable, "-m", "medmis.experiments.cli", *args], capture_output=True,
                          text=True, env=env, timeout=120, cwd=ROOT)


def tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize(("blocked", "as_folder", "words"), [
    ("traces/mock_examinee__none.jsonl", True, "is a folder where the run writes a file"),
    ("records.jsonl", True, "is a folder where the run writes a file"),
    ("manifest.json", True, "is a folder where the run writes a file"),
    ("traces", False, "is a file where the run keeps a folder"),
])
def test_an_unusable_output_path_is_one_line_exit_2_and_nothing_is_made(
    tmp_path: Path, blocked: str, as_folder: bool, words: str
) -> None:
    out = tmp_path / "run"
    target = out / blocked
    if as_folder:
        target.mkdir(parents=True)
    else:
        target.parent.mkdir(parents=True)
        target.write_text("not a folder\n")
    before = tree(out)
    done = medmis("run", "--data", str(SAMPLE), "--model", "mock/examinee", "--defender", "none",
                  "--protocol", "clean", "--limit", "2", "--out", str(out), "--no-progress")
    assert done.returncode == 2, done.stderr
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0] == f"medmis: {target} {words}; move it away or choose another --out"
    assert tree(out) == before  # no lock, manifest, plan or records.jsonl


def test_ablate_checks_every_grid_folder_before_anything_is_made(tmp_path: Path) -> None:
    out = tmp_path / "grid"
    blocked = out / "traces" / "mock_examinee__none.jsonl"
    blocked.mkdir(parents=True)
    config = tmp_path / "grid.toml"
    config.write_text(f"""
name = "blocked"
data = "{SAMPLE.as_posix()}"
limit = 2
protocols = ["clean", "type1"]
out = "{out.as_posix()}"

[[models]]
spec = "mock/examinee"

[[defenders]]
name = "none"
""", encoding="utf-8")
    before = tree(tmp_path)
    done = medmis("ablate", str(config), "--no-progress")
    assert done.returncode == 2, done.stderr
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert str(blocked) in lines[0] and "is a folder where the run writes a file" in lines[0]
    assert tree(tmp_path) == before
