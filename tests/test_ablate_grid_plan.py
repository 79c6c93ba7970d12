"""``medmis ablate``'s plan is the grid it runs: the dry run estimates every run folder (the
shuffled Type 2 pass, the stability re-runs, the poison shares), its case count is the count of
records the run then writes, and the budget cap is the whole grid's (issue 30 item 9: the demo
ran 8,600 cases against "1,900 planned")."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from medmis.experiments.cli import main
from medmis.experiments.records import read_records

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "fixtures" / "medmisbench_sample.jsonl"
PRICE = 1000.0  # USD per million tokens, in and out: a few cents per case


def _pages(path: Path) -> Path:
    from medmis.experiments.benchmark import build_cases, load_dataset
    from medmis.tools._poison_types import PoisonedPage, case_key

    with path.open("w", encoding="utf-8") as fh:
        for case in build_cases(load_dataset(str(SAMPLE)).items, ["type1"], type1_targets="all"):
            assert case.target is not None
            claim = " ".join(case.context_texts)
            slug = f"{case.item.id}-{case.target}".lower()
            page = PoisonedPage(id=slug, case_key=case_key(case.item.key, case.target), item_key=case.item.key,
                                target=case.target, style="forum", claim=claim, title=case.target, text=claim,
                                url=f"https://example-forum.org/{slug}")
            fh.write(page.model_dump_json() + "\n")
    return path


def _config(tmp_path: Path, extra: str = "", poison: bool = True) -> Path:
    pages = _pages(tmp_path / "pages.jsonl")
    text = f"""
name = "plan"
data = "{SAMPLE.as_posix()}"
subset = "MEDMISHLE"
limit = 2
protocols = ["clean", "type1", "type2"]
out = "{(tmp_path / 'out').as_posix()}"
cache = "record"
{extra}

[delivery]
type2_shuffled = true

[simulation]
stability_seeds = 3

[[models]]
spec = "mock/examinee"
price_in_per_mtok = {PRICE}
price_out_per_mtok = {PRICE}

[[defenders]]
name = "none"

[[defenders]]
name = "search_agent"
"""
    if poison:
        text += f'\n[poison]\nshare = [0, 1]\npages = "{pages.as_posix()}"\n'
    path = tmp_path / "grid.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _records(folder: Path) -> int:
    return len(read_records(folder / "records.jsonl"))


def test_the_dry_runs_plan_is_what_the_run_executes(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    path = _config(tmp_path)
    assert main(["ablate", str(path), "--dry-run"]) == 0
    plan = capsys.readouterr().out
    out = tmp_path / "out"
    assert not out.exists()
    # one heading per sub-run folder, each with its cases per model x defender
    per_folder = {Path(folder): int(n) for folder, n in
                  re.findall(r"^[^\n]*\((\S+)\): (\d+) cases per model x defender$", plan, flags=re.M)}
    planned = int(re.findall(r"total: (?:\d+ run folders, )?(\d+) cases", plan)[-1])
    assert main(["ablate", str(path), "--no-progress"]) == 0
    capsys.readouterr()
    folders = sorted(p.parent for p in out.rglob("records.jsonl"))
    assert len(folders) == 1 + 1 + 2 + 2  # main, shuffled, 2 stability re-runs, 2 shares
    ran = sum(_records(f) for f in folders)
    assert planned == ran
    assert f"grid total: 6 run folders, {ran} cases" in plan
    assert set(per_folder) == set(folders) - {out}
    for folder, n in per_folder.items():
        assert _records(folder) == 2 * n  # two defenders


def _cost(folder: Path) -> float:
    return sum((r.usage.input_tokens + r.usage.output_tokens) * PRICE / 1e6
               for r in read_records(folder / "records.jsonl"))


def test_the_budget_cap_is_the_whole_grids(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    free = tmp_path / "free"
    free.mkdir()
    assert main(["ablate", str(_config(free, poison=False)), "--no-progress"]) == 0
    main_cost = _cost(free / "out")
    total = sum(_cost(p.parent) for p in (free / "out").rglob("records.jsonl"))
    cap = 1.5 * main_cost  # the main run fits; the main run and its sub-runs do not
    assert total > 2 * cap
    capped = tmp_path / "capped"
    capped.mkdir()
    path = _config(capped, extra=f"budget_usd = {cap}", poison=False)
    assert main(["ablate", str(path), "--dry-run"]) == 0
    assert f"budget cap: ${cap:.2f} (below the grid's estimate $" in capsys.readouterr().out
    assert main(["ablate", str(path), "--no-progress"]) == 3
    assert "budget cap" in capsys.readouterr().err
    out = capped / "out"
    spent = sum(_cost(p.parent) for p in out.rglob("records.jsonl"))
    assert _records(out) == _records(free / "out")  # the main run finished within the cap
    assert spent < total  # stopped in a sub-run: the cap counted the folders run before it
    stopped = [json.loads((p.parent / "manifest.json").read_text())
               for p in out.rglob("records.jsonl") if p.parent != out]
    assert any("budget cap" in (m.get("stopped") or "") for m in stopped)
