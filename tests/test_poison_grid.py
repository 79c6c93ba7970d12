"""``[poison]`` in ablation configs (issue 26 item 3): one run of the clean and Type 1 cases per
share in ``OUT/poison/share-<S>``, ``--set poison.share=...``, the dry run's plan per share, and
every share folder's fingerprint checked before "nothing to do"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medmis.experiments.ablation._config import load_config
from medmis.experiments.benchmark._data import load_dataset
from medmis.experiments.benchmark._protocols import build_cases
from medmis.experiments.cli import main
from medmis.experiments.records import read_records
from medmis.tools._poison_types import PAGE_STYLES, PoisonedPage, case_key

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "fixtures" / "medmisbench_sample.jsonl"


def pages_file(path: Path) -> Path:
    """Two pages per Type 1 case of the sample (every wrong option), supporting its claim."""
    items = load_dataset(str(SAMPLE)).items
    with path.open("w", encoding="utf-8") as fh:
        for case in build_cases(items, ["type1"], type1_targets="all"):
            assert case.target is not None
            claim = " ".join(case.context_texts)
            slug = f"{case.item.id}-{case.target}".lower()
            for style in PAGE_STYLES[:2]:
                page = PoisonedPage(id=f"{slug}-{style}", case_key=case_key(case.item.key, case.target),
                                    item_key=case.item.key, target=case.target, style=style, claim=claim,
                                    title=f"{case.target} ({style})", text=claim,
                                    url=f"https://example-{style}.org/{slug}")
                fh.write(page.model_dump_json() + "\n")
    return path


def config(tmp_path: Path, poison: str | None = None) -> Path:
    pages = pages_file(tmp_path / "pages.jsonl")
    poison = poison if poison is not None else f'share = [0, 0.5]\npages = "{pages.as_posix()}"'
    path = tmp_path / "grid.toml"
    path.write_text(f"""
name = "p"
data = "{SAMPLE.as_posix()}"
subset = "MEDMISHLE"
limit = 2
protocols = ["clean", "type1", "type2"]
out = "{(tmp_path / 'out').as_posix()}"
cache = "record"

[poison]
{poison}

[[models]]
spec = "mock/examinee"

[[defenders]]
name = "none"

[[defenders]]
name = "search_agent"
""", encoding="utf-8")
    return path


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_poison_shares_as_a_list_a_number_or_a_set_override(tmp_path: Path) -> None:
    path = config(tmp_path, 'share = [1.0, 0, 0.25]\nrank = "spread"\nstyles = ["forum"]')
    cfg = load_config(path)
    assert cfg.poison is not None and cfg.poison.shares == [0.0, 0.25, 1.0]
    settings = cfg.poison.settings(0.25, "p.jsonl")
    assert (settings.share, settings.rank, settings.styles, str(settings.pages)) == (0.25, "spread", ("forum",), "p.jsonl")
    assert load_config(path, ["poison.share=0.5"]).poison.shares == [0.5]  # type: ignore[union-attr]
    assert load_config(path, ["poison.share=[0, 1]"]).poison.shares == [0.0, 1.0]  # type: ignore[union-attr]


@pytest.mark.parametrize(("poison", "flags", "message"), [
    ("share = [0, 1.5]", [], "poison.share: Value error, share 1.5 is not between 0 and 1"),
    ("share = []", [], "poison.share: Value error, give at least one share"),
    ("share = [0.5, 0.5]", [], "share 0.5 listed twice"),
    ('share = 0\nstyles = ["tweet"]', [], "unknown page style tweet"),
    ('share = 0\nrank = "middle"', [], "poison.rank:"),
    ("share = 0\nshares = 1", [], "poison.shares: unknown key (did you mean 'share'?)"),
    ("share = 0", ["--set", "poison.rnk=top"], "unknown key 'poison.rnk'"),
    ('share = 0\npages = "nowhere.jsonl"', [], "poison.pages: nowhere.jsonl: cannot read poisoned pages"),
    ("share = 0", ["--set", 'protocols=["clean"]'], "add 'type1' to protocols"),
])
def test_a_bad_poison_table_is_one_line_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], poison: str, flags: list[str], message: str,
) -> None:
    path = config(tmp_path, poison)
    assert main(["ablate", str(path), "--no-progress", *flags]) == 2
    assert message in one_line(capsys.readouterr().err)
    assert not (tmp_path / "out").exists()


def test_a_page_file_with_a_bad_line_names_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x"}\n', encoding="utf-8")
    path = config(tmp_path, f'share = 0\npages = "{bad.as_posix()}"')
    assert main(["ablate", str(path), "--dry-run"]) == 2
    assert f"poison.pages: {bad}:1: not a poisoned page" in one_line(capsys.readouterr().err)


def test_dry_run_prints_each_share_run_and_runs_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = config(tmp_path)
    assert main(["ablate", str(path), "--dry-run", "--set", "poison.share=[0, 0.25, 1]"]) == 0
    out = capsys.readouterr().out
    assert "poisoned web: 3 share run(s) of the clean and Type 1 cases, rank top, styles all" in out
    for share in ("0", "0.25", "1"):
        assert f"share {share} ({tmp_path / 'out' / 'poison' / f'share-{share}'}): " in out
    # a share run has the clean and Type 1 cases only: 2 clean + the Type 1 targets of 2 items
    share_line = next(line for line in out.splitlines() if line.startswith("share 0 ("))
    assert share_line.endswith(" cases per model x defender")
    assert not (tmp_path / "out").exists()


def test_each_share_runs_into_its_folder_and_a_rerun_checks_every_folder_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    path = config(tmp_path)
    out = tmp_path / "out"
    assert main(["ablate", str(path), "--no-progress"]) == 0
    main_records = read_records(out / "records.jsonl")
    assert {r.protocol for r in main_records} == {"clean", "type1", "type2"}
    for share in ("0", "0.5"):
        folder = out / "poison" / f"share-{share}"
        records = read_records(folder / "records.jsonl")
        assert {r.protocol for r in records} == {"clean", "type1"}  # Type 2 gets no poison
        assert len(records) == len([r for r in main_records if r.protocol != "type2"])
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        assert manifest["config"]["poison"]["share"] == float(share)
        assert manifest["config"]["poison"]["pages"] == str(tmp_path / "pages.jsonl")
        assert (folder / "metrics.json").exists() and not (folder / "report.html").exists()
    plan = json.loads((out / "poison" / "shares.json").read_text(encoding="utf-8"))
    assert plan["shares"] == [0.0, 0.5] and len(plan["pages_sha256"]) == 64
    assert (out / "poison.json").exists() and (out / "plots" / "poison_asr.png").exists()
    assert "## Poisoned retrieval" in (out / "report.md").read_text(encoding="utf-8")
    capsys.readouterr()
    assert main(["ablate", str(path), "--no-progress"]) == 0
    assert "nothing to do" in capsys.readouterr().out
    # one share folder missing a case: not "nothing to do", the case is run
    folder = out / "poison" / "share-0.5"
    lines = (folder / "records.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (folder / "records.jsonl").write_text("".join(lines[:-1]), encoding="utf-8")
    assert main(["ablate", str(path), "--no-progress"]) == 0
    assert "nothing to do" not in capsys.readouterr().out
    assert len(read_records(folder / "records.jsonl")) == len(lines)
    # an error left in a share folder decides the exit status of "nothing to do"
    last = json.loads(lines[-1])
    (folder / "records.jsonl").write_text("".join(lines) + json.dumps({**last, "error": "RuntimeError: x"}) + "\n",
                                          encoding="utf-8")
    assert main(["ablate", str(path), "--no-progress"]) == 1
    captured = capsys.readouterr()
    assert "nothing to do:" in captured.out and "and its 2 other run folder(s)" in captured.out
    # an answered key recorded again (here: as an error) is announced with the rule applied
    warning, summary = captured.err.strip().splitlines()
    assert "again with another answer" in warning and "the last line of a key is used" in warning
    assert "1 of " in one_line(summary)
    # a share folder holding another run is refused before "nothing to do", naming the field
    manifest_path = folder / "manifest.json"
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    manifest["fingerprint"]["seed"] = 99
    manifest_path.write_text(json.dumps(manifest), encoding="utf-8")
    before = (folder / "records.jsonl").read_text(encoding="utf-8")
    assert main(["ablate", str(path), "--no-progress"]) == 2
    captured = capsys.readouterr()
    assert "seed: 99 -> 0" in one_line(captured.err) and "nothing to do" not in captured.out
    assert (folder / "records.jsonl").read_text(encoding="utf-8") == before


def test_the_offline_config_is_the_issues_grid_and_dry_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = ROOT / "experiments" / "configs" / "poisoned_search.toml"
    cfg = load_config(path)
    assert cfg.poison is not None and cfg.poison.shares == [0.0, 0.25, 0.5, 1.0]
    assert cfg.poison.pages == "fixtures/poison/sample_pages.jsonl" and cfg.poison.rank == "top"
    assert (cfg.data, cfg.protocols, cfg.type1_targets, cfg.search) == (
        "fixtures/medmisbench_sample.jsonl", ["clean", "type1", "type2"], "all", "local")
    assert [m.spec for m in cfg.models] == ["mock/examinee"]
    assert [d.name for d in cfg.defenders][:4] == ["none", "warning", "search_agent", "claim_verify"]
    pages = pages_file(tmp_path / "pages.jsonl")
    assert main(["ablate", str(path), "--dry-run", "--out", str(tmp_path / "out"),
                 "--set", f'poison.pages="{pages.as_posix()}"']) == 0
    assert "poisoned web: 4 share run(s)" in capsys.readouterr().out


def test_a_budget_stop_runs_no_share_and_the_report_lists_them_not_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    path = config(tmp_path)
    path.write_text(path.read_text().replace('cache = "record"', 'cache = "record"\nbudget_usd = 0.0001')
                    .replace('spec = "mock/examinee"', 'spec = "mock/examinee"\nprice_in_per_mtok = 1000.0'))
    assert main(["ablate", str(path), "--no-progress"]) == 3
    out = tmp_path / "out"
    assert not (out / "poison" / "share-0" / "records.jsonl").exists()
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "- share 0: not run (no records)" in report and "- share 0.5: not run (no records)" in report
