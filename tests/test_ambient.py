"""Ambient misinformation (issue 30, item 1): the misleading passages are not part of the clean
web. A run searches them only when it names them (``medmis run --search-ambient FILE``,
``search_ambient`` in an ablation config); the file's sha256 is in the fingerprint (a changed
file, or the flag added or dropped, is refused on resume) and the condition is named in the
manifest, report.md and report.html, verdict.json, the poison section and the exported card."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from medmis.experiments.cli import main

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "fixtures" / "medmisbench_sample.jsonl"
AMBIENT = ROOT / "fixtures" / "ambient" / "misleading.jsonl"


def one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def run_args(out: Path, *extra: str, defender: str = "none,search_agent") -> list[str]:
    return ["run", "--data", str(SAMPLE), "--subset", "MEDMISHLE", "--model", "mock/examinee",
            "--defender", defender, "--protocol", "clean,type1", "--out", str(out), "--no-progress", *extra]


def searched_urls(out: Path) -> set[str]:
    urls = set()
    for path in (out / "traces").glob("*.jsonl"):
        for trace in map(json.loads, path.read_text(encoding="utf-8").splitlines()):
            for step in trace["steps"]:
                if step["kind"] == "tool" and step["name"] == "search_web" and step["output"]:
                    output: Any = step["output"]
                    results = output.get("results") if isinstance(output, dict) else output
                    urls.update(r["url"] for r in results or [])
    return urls


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The same five items on the clean web and under the bundled ambient file."""
    base = tmp_path_factory.mktemp("ambient")
    ambient = shutil.copy(AMBIENT, base / "ambient.jsonl")
    out = {"clean": base / "clean", "ambient": base / "ambient"}
    assert main(run_args(out["clean"])) == 0
    assert main(run_args(out["ambient"], "--search-ambient", str(ambient))) == 0
    return {**out, "file": Path(ambient)}


def test_the_clean_web_never_shows_an_ambient_passage_and_the_condition_does(runs: dict[str, Path]) -> None:
    ambient_urls = {json.loads(line)["url"] for line in AMBIENT.read_text(encoding="utf-8").splitlines()}
    assert not searched_urls(runs["clean"]) & ambient_urls
    assert searched_urls(runs["ambient"]) & ambient_urls


def test_the_condition_is_fingerprinted_and_named_on_every_surface(runs: dict[str, Path], tmp_path: Path) -> None:
    out, file = runs["ambient"], runs["file"]
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    import hashlib

    digest = hashlib.sha256(file.read_bytes()).hexdigest()
    assert manifest["search_ambient"] == {"file": str(file), "sha256": digest, "passages": 30}
    assert manifest["fingerprint"]["search_ambient"] == {"sha256": digest}
    report = (out / "report.md").read_text(encoding="utf-8")
    assert f"- **Ambient misinformation:** 30 false passages of `{file}` (sha256 {digest[:12]}…)" in report
    assert "**Ambient misinformation:** every search of this run (clean questions included)" in report
    assert "Ambient misinformation" in (out / "report.html").read_text(encoding="utf-8")
    verdict = json.loads((out / "verdict.json").read_text(encoding="utf-8"))
    assert verdict["ambient"] == manifest["search_ambient"]
    assert main(["export", "parquet", str(out), "--out", str(tmp_path / "export")]) == 0
    card = (tmp_path / "export" / "README.md").read_text(encoding="utf-8")
    assert f"- ambient misinformation: 30 false passages of `{file.name}` (sha256 `{digest[:16]}`)" in card
    # the clean web says none of it
    clean = runs["clean"]
    assert "search_ambient" not in json.loads((clean / "manifest.json").read_text(encoding="utf-8"))
    assert json.loads((clean / "verdict.json").read_text(encoding="utf-8"))["ambient"] is None
    assert "Ambient misinformation" not in (clean / "report.md").read_text(encoding="utf-8")


def test_a_changed_added_or_dropped_ambient_file_is_refused_on_resume(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, file = runs["ambient"], runs["file"]
    capsys.readouterr()
    moved = Path(shutil.copy(file, tmp_path / "same.jsonl"))  # the contents decide, not the path
    assert main(run_args(out, "--search-ambient", str(moved))) == 0
    assert "nothing to do" in capsys.readouterr().out
    changed = tmp_path / "changed.jsonl"
    changed.write_text(file.read_text(encoding="utf-8").splitlines()[0] + "\n", encoding="utf-8")
    assert main(run_args(out, "--search-ambient", str(changed))) == 2
    assert "search_ambient: sha256=" in one_line(capsys.readouterr().err)
    assert main(run_args(out)) == 2  # the same folder on the clean web is another run
    assert "search_ambient:" in one_line(capsys.readouterr().err)
    assert main(run_args(runs["clean"], "--search-ambient", str(file))) == 2
    assert "search_ambient: None -> " in one_line(capsys.readouterr().err)


@pytest.mark.parametrize(("extra", "words"), [
    (("--search-ambient", "{tmp}/nope.jsonl"), "ambient passages file not found"),
    (("--search-ambient", "{tmp}/empty.jsonl"), "holds no passage"),
    (("--search-ambient", str(AMBIENT), "--search", "tavily"), "use --search local (not tavily)"),
])
def test_an_unusable_ambient_file_is_one_line_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: tuple[str, ...], words: str
) -> None:
    (tmp_path / "empty.jsonl").write_text("\n", encoding="utf-8")
    out = tmp_path / "out"
    assert main(run_args(out, *(x.format(tmp=tmp_path) for x in extra))) == 2
    assert words in one_line(capsys.readouterr().err)
    assert not out.exists()


def test_an_ablation_names_the_condition_in_every_share_run_and_the_poison_section(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from test_poison_grid import config

    path = config(tmp_path)
    text = path.read_text(encoding="utf-8").replace(
        'cache = "record"', f'cache = "record"\nsearch_ambient = "{AMBIENT.as_posix()}"')
    path.write_text(text, encoding="utf-8")
    assert main(["ablate", str(path)]) == 0, capsys.readouterr().err
    out = tmp_path / "out"
    digest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))["search_ambient"]["sha256"]
    for share in ("0", "0.5"):
        manifest = json.loads((out / "poison" / f"share-{share}" / "manifest.json").read_text(encoding="utf-8"))
        assert manifest["search_ambient"]["sha256"] == digest
    report = (out / "report.md").read_text(encoding="utf-8")
    section = report[report.index("## Poisoned retrieval"):]
    assert "**Ambient misinformation:** every search of every share run" in section
    assert json.loads((out / "poison.json").read_text(encoding="utf-8"))["ambient"]["sha256"] == digest


def test_a_folder_searched_over_another_corpus_is_refused_on_resume(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The local corpus is in the fingerprint by its documents' sha256: a folder made with the
    old corpus (misleading passages inside) must not resume on the clean one and mix the two."""
    corpus = tmp_path / "corpus"
    shutil.copytree(ROOT / "fixtures" / "corpus", corpus)
    capsys.readouterr()
    assert main(run_args(runs["clean"], "--corpus-dir", str(corpus))) == 0  # same documents
    assert "nothing to do" in capsys.readouterr().out
    shutil.copy(AMBIENT, corpus / "misleading.jsonl")  # the old default corpus's layout
    assert main(run_args(runs["clean"], "--corpus-dir", str(corpus))) == 2
    assert "web_tools" in one_line(capsys.readouterr().err)
