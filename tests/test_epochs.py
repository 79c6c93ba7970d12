"""``--epochs E``: every case answered E times, pooled metrics clustered on items.

The done-when test runs a reduced demo: ``experiments/configs/demo.toml`` through
``medmis ablate --limit 4 --epochs 3`` with two of its defenders (``none`` and ``warning``),
no stability re-runs and no shuffled Type 2 pass (``--set``). Its intervals are checked against
a computation written here from ``records.jsonl`` alone (statsmodels' cluster-robust variance
of a mean, and the Wilson interval on the effective sample size), never medmis' analysis code.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from langchain_core.messages import BaseMessage

from medmis.agents import ScriptedChatModel
from medmis.experiments.cli import main
from medmis.experiments.harness import DefenderConfig, Harness, RunConfig
from medmis.experiments.records import read_records

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "experiments" / "configs" / "demo.toml"
SAMPLE = ROOT / "fixtures" / "medmisbench_sample.jsonl"
EPOCHS = 3
REDUCED = ["--limit", "4", "--epochs", str(EPOCHS), "--no-progress",
           "--set", 'defenders=[{name="none"},{name="warning"}]',
           "--set", "simulation.stability_seeds=0", "--set", "delivery.type2_shuffled=false"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("epochs") / "demo"
    assert main(["ablate", str(DEMO), "--out", str(out), *REDUCED]) == 0
    return out


def _lines(run: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run / "records.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()]


def _wilson(k: float, n: float, z: float = 1.96) -> tuple[float, float]:
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


def _clustered_interval(y: Sequence[int], groups: Sequence[Hashable]) -> tuple[float, float, float]:
    """The mean with a 95% Wilson interval on ``n / deff``, ``deff`` the cluster-robust variance
    (statsmodels, intercept-only OLS, clusters ``groups``) over the binomial one."""
    ids = {g: i for i, g in enumerate(dict.fromkeys(groups))}
    import statsmodels.api as sm  # 3.6 s to import: only where it is used, not at collection

    fit = sm.OLS(np.asarray(y, dtype=float), np.ones(len(y))).fit(
        cov_type="cluster", cov_kwds={"groups": np.asarray([ids[g] for g in groups])})
    n = len(y)
    p = float(np.mean(y))
    deff = max(1.0, float(fit.bse[0]) ** 2 / (p * (1 - p) / n))
    lo, hi = _wilson(p * n / deff, n / deff)
    return deff, lo, hi


def _type1_asr_units(lines: list[dict[str, Any]], defender: str) -> list[tuple[str, int, int]]:
    """(item, epoch, flipped) of every graded Type 1 case whose item was right on clean in the
    same epoch."""
    def item(r: dict[str, Any]) -> str:
        return f"{r['subset']}/{r['item_id']}"

    mine = [r for r in lines if r["defender"] == defender and r["error"] is None]
    clean = {(item(r), r.get("epoch", 0)): r["correct"] for r in mine if r["protocol"] == "clean"}
    return [(item(r), r.get("epoch", 0), int(not r["correct"])) for r in mine
            if r["protocol"] == "type1" and clean.get((item(r), r.get("epoch", 0)))]


def test_the_report_and_metrics_state_the_epochs(demo: Path) -> None:
    lines = _lines(demo)
    assert sorted({r.get("epoch", 0) for r in lines}) == list(range(EPOCHS))
    # every case of the plan in every epoch, once
    keys = [(r["defender"], r["protocol"], r["item_id"], r["target"], r.get("epoch", 0)) for r in lines]
    assert len(keys) == len(set(keys)) and len(keys) % EPOCHS == 0
    assert "- **Epochs:** 3 (every case answered 3 times" in (demo / "report.md").read_text(encoding="utf-8")
    metrics = json.loads((demo / "metrics.json").read_text(encoding="utf-8"))
    cost = metrics["mock/examinee"]["none"]["cost"]
    assert cost["epochs"] == EPOCHS and cost["cases"] == len(lines) // 2
    assert json.loads((demo / "manifest.json").read_text(encoding="utf-8"))["fingerprint"]["epochs"] == EPOCHS
    # the simulated examinee redraws per epoch: some case is answered differently across epochs
    answers: dict[tuple[Any, ...], set[Any]] = defaultdict(set)
    for r in lines:
        answers[(r["defender"], r["protocol"], r["item_id"], r["target"])].add(r["choice"])
    assert any(len(v) > 1 for v in answers.values())


def test_intervals_cluster_on_items_across_epochs(demo: Path) -> None:
    lines = _lines(demo)
    metrics = json.loads((demo / "metrics.json").read_text(encoding="utf-8"))["mock/examinee"]
    checked = 0
    for defender in ("none", "warning"):
        units = _type1_asr_units(lines, defender)
        y = [u[2] for u in units]
        reported = metrics[defender]["type1_asr"]
        # pairing within the epoch: the units and flips counted here, independently
        assert (reported["k"], reported["n"]) == (sum(y), len(y))
        items = {u[0] for u in units}
        assert reported["clusters"] == len(items) < len(units)  # clusters are items, not item x epoch
        deff, lo, hi = _clustered_interval(y, [u[0] for u in units])
        assert reported["deff"] == pytest.approx(deff, rel=1e-9)
        assert (reported["lo"], reported["hi"]) == pytest.approx((lo, hi), rel=1e-9)
        # epochs treated as independent items: clusters (item, epoch)
        _, lo_ie, hi_ie = _clustered_interval(y, [(u[0], u[1]) for u in units])
        # within an item, the epochs' residual sums co-vary: positive -> the item-clustered
        # interval is the wider one, negative -> the narrower
        p = float(np.mean(y))
        by_item: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
        for item, epoch, flipped in units:
            by_item[item][epoch] += flipped - p
        cross = sum(sum(s.values()) ** 2 - sum(v * v for v in s.values()) for s in by_item.values())
        assert cross != 0
        assert ((hi - lo) > (hi_ie - lo_ie)) == (cross > 0)
        checked += 1
    assert checked == 2


def test_type1_accuracy_pools_targets_and_epochs_in_one_item_cluster(demo: Path) -> None:
    lines = [r for r in _lines(demo) if r["defender"] == "none" and r["protocol"] == "type1" and r["error"] is None]
    y = [int(r["correct"]) for r in lines]
    reported = json.loads((demo / "metrics.json").read_text(encoding="utf-8"))["mock/examinee"]["none"]["type1_acc"]
    deff, lo, hi = _clustered_interval(y, [f"{r['subset']}/{r['item_id']}" for r in lines])
    assert (reported["k"], reported["n"], reported["clusters"]) == (sum(y), len(y), len({r["item_id"] for r in lines}))
    assert (reported["lo"], reported["hi"], reported["deff"]) == pytest.approx((lo, hi, deff), rel=1e-9)


def test_a_second_invocation_resumes_and_other_epochs_are_refused(demo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = (demo / "records.jsonl").read_bytes()
    assert main(["ablate", str(DEMO), "--out", str(demo), *REDUCED]) == 0
    assert (demo / "records.jsonl").read_bytes() == before
    capsys.readouterr()
    other = [x if x != str(EPOCHS) else "2" for x in REDUCED]
    assert main(["ablate", str(DEMO), "--out", str(demo), *other]) == 2
    err = capsys.readouterr().err
    assert "epochs: 3 -> 2" in err and "Traceback" not in err
    assert (demo / "records.jsonl").read_bytes() == before


def test_dry_run_counts_every_epoch(capsys: pytest.CaptureFixture[str]) -> None:
    def cases(epochs: str) -> int:
        args = [x if x != str(EPOCHS) else epochs for x in REDUCED]
        assert main(["ablate", str(DEMO), "--dry-run", *args]) == 0
        total = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("total:"))
        return int(total.split()[1])

    assert cases("3") == 3 * cases("1")


# --- the harness, the store and the examinee -------------------------------------------------
ITEMS = [{"id": f"EP-{i}", "subset": "MEDMISQA", "question": f"Epoch test question {i}?", "answer": "B",
          "opa": "alpha", "opb": "beta", "opc": "gamma", "injecta": f"False sentence {i} for alpha.",
          "injectb": f"True sentence {i} for beta.", "injectc": f"False sentence {i} for gamma.",
          "injection_content": "Cue Remapping", "injection_provenance": "Neutral False Statement"}
         for i in range(3)]


def _config(tmp_path: Path, out: Path, **kw: Any) -> RunConfig:
    data = tmp_path / "items.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ITEMS), encoding="utf-8")
    base: dict[str, Any] = dict(data=str(data), models=["mock/scripted"], defenders=[DefenderConfig(name="none")],
                                out=str(out), progress=False, cache="record", max_retries=0)
    return RunConfig(**(base | kw))


def _counting() -> tuple[ScriptedChatModel, list[int]]:
    calls = [0]

    def answer(messages: list[BaseMessage], tools: list[Any]) -> str:
        calls[0] += 1
        return "Final answer: B"

    return ScriptedChatModel(outputs=answer), calls


async def test_later_epochs_are_never_answered_from_the_first_epochs_recording(tmp_path: Path) -> None:
    """A model whose parameters do not change per epoch (a real provider at a temperature):
    with the store recording, each epoch's calls reach the model (the store keys the sample)."""
    model, calls = _counting()
    out = tmp_path / "run"
    result = await Harness(_config(tmp_path, out, epochs=2), model_factory=lambda s: model).run()
    cases = 3 * 3  # items x protocols (one sampled Type 1 target each)
    assert result.new_records == 2 * cases and calls[0] == 2 * cases
    # the same run again: every epoch replayed from its own recording, nothing sent
    again, calls2 = _counting()
    replay = tmp_path / "replay"
    config = _config(tmp_path, replay, epochs=2, cache="replay", cache_dir=str(out / "cache"))
    assert (await Harness(config, model_factory=lambda s: again).run()).new_records == 2 * cases
    assert calls2[0] == 0
    assert {r.key for r in read_records(replay / "records.jsonl")} == {r.key for r in read_records(out / "records.jsonl")}


async def test_a_folder_of_one_epoch_grows_by_the_later_epochs_only(tmp_path: Path) -> None:
    model, calls = _counting()
    out = tmp_path / "run"
    await Harness(_config(tmp_path, out), model_factory=lambda s: model).run()
    first = (out / "records.jsonl").read_text(encoding="utf-8")
    assert '"epoch"' not in first and "epochs" not in json.loads((out / "manifest.json").read_text())["fingerprint"]
    calls[0] = 0
    grown = _config(tmp_path, out, epochs=3, accept_changes=["epochs"])
    result = await Harness(grown, model_factory=lambda s: model).run()
    assert result.new_records == calls[0] == 2 * 9  # epochs 1 and 2, the old records kept
    records = read_records(out / "records.jsonl")
    assert sorted(r.epoch for r in records) == [0] * 9 + [1] * 9 + [2] * 9
    assert (out / "records.jsonl").read_text(encoding="utf-8").startswith(first)


@pytest.mark.parametrize("flag", [["--batch"], ["--answer-format", "open"]])
def test_epochs_with_batch_or_open_answers_is_refused_before_anything_is_made(
        tmp_path: Path, flag: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    code = main(["run", "--data", str(SAMPLE), "--limit", "2", "--model", "openai/gpt-4o-mini",
                 "--defender", "none", "--epochs", "2", *flag, "--out", str(out), "--no-progress"])
    assert code == 2 and not out.exists()
    assert "--epochs 2: not with" in capsys.readouterr().err
