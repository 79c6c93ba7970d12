"""``medmis export inspect|parquet``: a fixture run read back with Inspect AI's own reader and
as Parquet, with the counts of ``metrics.json`` and ``records.jsonl``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from medmis.experiments.cli import main
from medmis.experiments.export import SCORERS

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "fixtures" / "medmisbench_sample.jsonl"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A simulated-examinee run with a tool-using defender (its web-tool calls become events)."""
    out = tmp_path_factory.mktemp("export") / "run"
    mp = pytest.MonkeyPatch()
    mp.setenv("MEDMIS_REPORT_WORKER", "0")
    try:
        code = main(["run", "--data", str(SAMPLE), "--limit", "8", "--model", "mock/examinee",
                     "--defender", "none,claim_verify", "--corpus-dir", str(ROOT / "fixtures" / "corpus"),
                     "--out", str(out), "--no-progress"])
    finally:
        mp.undo()
    assert code == 0
    return out


def records_of(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "records.jsonl").read_text().splitlines() if line.strip()]


def test_inspect_logs_read_back_with_the_counts_of_metrics_json(run_dir: Path, tmp_path: Path) -> None:
    log_api = pytest.importorskip("inspect_ai.log", reason="inspect_ai not installed: pip install 'medmis[inspect]'")
    out = tmp_path / "logs"
    assert main(["export", "inspect", str(run_dir), "--out", str(out)]) == 0
    # what `inspect view` lists and reads
    listed = log_api.list_eval_logs(str(out))
    assert len(listed) == 2
    metrics = json.loads((run_dir / "metrics.json").read_text())["mock/examinee"]
    records = records_of(run_dir)
    flips_seen = 0
    for defender in ("none", "claim_verify"):
        path = out / f"mock_examinee__{defender}.eval"
        assert len(log_api.read_eval_log_sample_summaries(str(path))) == len(
            [r for r in records if r["defender"] == defender])
        log = log_api.read_eval_log(str(path))
        assert log.status == "success" and log.eval.model == "mock/examinee" and log.eval.solver == defender
        m = metrics[defender]
        samples = log.samples
        assert log.results.total_samples == len(samples) == m["cost"]["cases"]
        # per-sample scores recount every proportion of metrics.json
        for protocol in ("clean", "type1", "type2"):
            graded = [s for s in samples if s.metadata["protocol"] == protocol and s.scores]
            acc = m[f"{protocol}_acc"]
            assert (len(graded), sum(s.scores["correct"].value == "C" for s in graded)) == (acc["n"], acc["k"])
        for protocol in ("type1", "type2"):
            flipped = [s.scores["flipped"].value for s in samples
                       if s.metadata["protocol"] == protocol and s.scores and "flipped" in s.scores]
            asr = m[f"{protocol}_asr"]
            assert (len(flipped), sum(flipped)) == (asr["n"], asr["k"])
            flips_seen += sum(flipped)
        targeted = [s.scores["targeted"].value for s in samples if s.scores and "targeted" in s.scores]
        assert (len(targeted), sum(targeted)) == (m["type1_tasr"]["n"], m["type1_tasr"]["k"])
        # the results are metrics.json's numbers
        results = {sc.name: sc for sc in log.results.scores}
        assert set(results) == set(SCORERS)
        for scorer, names in SCORERS.items():
            for name in names:
                if m[name]["value"] is None:
                    assert name not in results[scorer].metrics
                    continue
                shown = results[scorer].metrics[name]
                assert shown.value == pytest.approx(m[name]["value"])
                assert (shown.params["k"], shown.params["n"]) == (m[name]["k"], m[name]["n"])
        # token usage, the messages sent, and the defender's tool calls as events
        used = log.stats.model_usage["mock/examinee"]
        assert (used.input_tokens, used.output_tokens) == (m["cost"]["input_tokens"], m["cost"]["output_tokens"])
        first = samples[0]
        assert [msg.role for msg in first.messages][-1] == "assistant" and first.messages[0].role == "system"
        rec = next(r for r in records if r["defender"] == defender and r["item_id"] == first.metadata["item_id"]
                   and r["protocol"] == first.metadata["protocol"] and r["target"] == first.metadata["target"])
        assert first.target == rec["gold"] and f'"answer_letter": "{rec["choice"]}"' in first.output.completion
        tools = [e for s in samples for e in s.events if e.event == "tool"]
        models = [e for s in samples for e in s.events if e.event == "model"]
        assert len(models) == m["cost"]["llm_calls"]
        assert len(tools) == m["cost"]["tool_calls"]
        assert (len(tools) > 0) == (defender == "claim_verify")
    assert flips_seen > 0  # the counts compared include flips, not only zeros


def test_without_inspect_ai_the_export_is_one_line_exit_2(run_dir: Path, tmp_path: Path) -> None:
    code = ("import sys; sys.modules['inspect_ai'] = None; sys.modules['inspect_ai.log'] = None\n"
            "from medmis.experiments.cli import main\n"
            f"sys.exit(main(['export', 'inspect', {str(run_dir)!r}, '--out', {str(tmp_path / 'logs')!r}]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "medmis: medmis export inspect needs Inspect AI: pip install 'medmis[inspect]'"]
    assert not (tmp_path / "logs").exists()


def test_parquet_dataset_has_the_planned_records_and_a_card_naming_its_files(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "dataset"
    # a record outside the run's plan (an item the data never had) stays out, as in the metrics
    stray = dict(records_of(run_dir)[0], item_id="NOT-IN-PLAN")
    copy = tmp_path / "run"
    import shutil

    shutil.copytree(run_dir, copy)
    with (copy / "records.jsonl").open("a") as fh:
        fh.write(json.dumps(stray) + "\n")
    assert main(["export", "parquet", str(copy), "--out", str(out), "--license", "cc-by-4.0"]) == 0
    planned = records_of(run_dir)
    table = pq.read_table(out / "data" / "records.parquet")
    assert table.num_rows == len(planned)
    assert "NOT-IN-PLAN" not in table.column("item_id").to_pylist()
    metrics = json.loads((run_dir / "metrics.json").read_text())["mock/examinee"]
    rows = pq.read_table(out / "data" / "metrics.parquet").to_pylist()
    overall = {(r["defender"], r["metric"]): r for r in rows if r["stratum_kind"] == "all"}
    assert overall[("none", "type1_asr")]["k"] == metrics["none"]["type1_asr"]["k"]
    assert overall[("claim_verify", "clean_acc")]["n"] == metrics["claim_verify"]["clean_acc"]["n"]
    cost = pq.read_table(out / "data" / "cost.parquet").to_pylist()
    assert {r["defender"]: r["cases"] for r in cost} == {d: metrics[d]["cost"]["cases"] for d in metrics}
    text = (out / "README.md").read_text()
    assert text.startswith("---\n")
    header = yaml.safe_load(text[4:text.index("\n---\n", 4)])
    assert header["license"] == "cc-by-4.0" and "medmis" in header["tags"] and header["pretty_name"]
    files = [f["path"] for c in header["configs"] for f in c["data_files"]]
    assert [c["config_name"] for c in header["configs"]] == ["records", "metrics", "cost"]
    assert files and all((out / f).is_file() for f in files)
    assert all((out / f).is_file() for f in ("manifest.json", "metrics.json", "verdict.json"))
    body = text[text.index("\n---\n", 4):]
    assert "SIMULATED EXAMINEE" in body and "`claim_verify`" in body and f"records: {len(planned)}" in body


def test_export_of_a_folder_without_a_run_is_one_line_exit_2(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    for fmt in ("inspect", "parquet"):
        assert main(["export", fmt, str(tmp_path), "--out", str(tmp_path / "x")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and ("no records.jsonl" in err[0] or "Inspect AI" in err[0])
    assert not (tmp_path / "x").exists()
