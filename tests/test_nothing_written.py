"""Exit 2 means nothing was written (issue 31): a run folder where a path the run writes is
unusable (a folder in place of a trace file or of ``records.jsonl``, a file in place of
``traces/``) is refused before a lock, a manifest, a plan or an empty ``records.jsonl`` is
made, by ``medmis run`` and by ``medmis ablate`` (one preflight, ``Harness.check_outputs``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from medmis.experiments.cli import main

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "fixtures" / "medmisbench_sample.jsonl"


def medmis(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """The command's exit code and stderr (``cli.main`` in this process: the refusal is the
    command's, not the interpreter's)."""
    capsys.readouterr()
    code = main(list(args))
    return code, capsys.readouterr().err


def tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize(("blocked", "as_folder", "words"), [
    ("traces/mock_examinee__none.jsonl", True, "is a folder where the run writes a file"),
    ("records.jsonl", True, "is a folder where the run writes a file"),
    ("manifest.json", True, "is a folder where the run writes a file"),
    ("traces", False, "is a file where the run keeps a folder"),
])
def test_an_unusable_output_path_is_one_line_exit_2_and_nothing_is_made(
    tmp_path: Path, blocked: str, as_folder: bool, words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    target = out / blocked
    if as_folder:
        target.mkdir(parents=True)
    else:
        target.parent.mkdir(parents=True)
        target.write_text("not a folder\n")
    before = tree(out)
    code, err = medmis(capsys, "run", "--data", str(SAMPLE), "--model", "mock/examinee", "--defender", "none",
                  "--protocol", "clean", "--limit", "2", "--out", str(out), "--no-progress")
    assert code == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0] == f"medmis: {target} {words}; move it away or choose another --out"
    assert tree(out) == before  # no lock, manifest, plan or records.jsonl


def test_ablate_checks_every_grid_folder_before_anything_is_made(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
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
    code, err = medmis(capsys, "ablate", str(config), "--no-progress")
    assert code == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert str(blocked) in lines[0] and "is a folder where the run writes a file" in lines[0]
    assert tree(tmp_path) == before
