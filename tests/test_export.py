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
from medmis.experiments.export import SCORERS, config_file, text_language

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "fixtures" / "medmisbench_sample.jsonl"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A simulated-examinee run with a tool-using defender (its web-tool calls become events)."""
    out = tmp_path_factory.mktemp("export") / "run"
    mp = pytest.MonkeyPatch()
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


def test_inspect_logs_tell_the_defenders_apart_and_headline_the_asr(run_dir: Path, tmp_path: Path) -> None:
    # every defender's log was task `medmis` with the same (empty) args and clean accuracy first
    log_api = pytest.importorskip("inspect_ai.log", reason="inspect_ai not installed: pip install 'medmis[inspect]'")
    out = tmp_path / "logs"
    assert main(["export", "inspect", str(run_dir), "--out", str(out)]) == 0
    metrics = json.loads((run_dir / "metrics.json").read_text())["mock/examinee"]
    headers = [log_api.read_eval_log(info, header_only=True) for info in log_api.list_eval_logs(str(out))]
    by_defender = {h.eval.task_args["defender"]: h for h in headers}
    assert set(by_defender) == {"none", "claim_verify"}
    assert len({h.eval.task for h in headers}) == len({h.eval.task_display_name for h in headers}) == 2
    assert len({json.dumps(h.eval.task_args, sort_keys=True) for h in headers}) == 2
    for defender, header in by_defender.items():
        assert defender in header.eval.task and defender in header.eval.task_display_name
        assert f"defender:{defender}" in header.eval.tags and "simulated" in header.eval.tags
        assert header.eval.task_args["defender_options"] == header.eval.solver_args
        # the ASR is what a listing shows: the headline, and the first score
        headline = log_api.headline_metric(header)
        assert headline is not None and headline.name == "type1_asr"
        assert headline.metric.value == pytest.approx(metrics[defender]["type1_asr"]["value"])
        assert header.results.scores[0].name == "flipped"
        assert "type1_asr" in header.results.scores[0].metrics
    assert by_defender["claim_verify"].eval.task_args["defender_options"]["max_claims"] == 8


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
    table = pq.read_table(out / config_file("records"))
    assert table.num_rows == len(planned)
    assert "NOT-IN-PLAN" not in table.column("item_id").to_pylist()
    metrics = json.loads((run_dir / "metrics.json").read_text())["mock/examinee"]
    rows = pq.read_table(out / config_file("metrics")).to_pylist()
    overall = {(r["defender"], r["metric"]): r for r in rows if r["stratum_kind"] == "all"}
    assert overall[("none", "type1_asr")]["k"] == metrics["none"]["type1_asr"]["k"]
    assert overall[("claim_verify", "clean_acc")]["n"] == metrics["claim_verify"]["clean_acc"]["n"]
    cost = pq.read_table(out / config_file("cost")).to_pylist()
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


def card_header(out: Path) -> tuple[dict, str]:
    text = (out / "README.md").read_text(encoding="utf-8")
    end = text.index("\n---\n", 4)
    return yaml.safe_load(text[4:end]), text[end:]


def test_each_config_is_a_folder_of_one_schema_as_the_card_says(run_dir: Path, tmp_path: Path) -> None:
    # three schemas in one folder made `load_dataset("parquet", data_dir=...)` fail with a CastError
    out = tmp_path / "dataset"
    assert main(["export", "parquet", str(run_dir), "--out", str(out)]) == 0
    header, _ = card_header(out)
    folders = {}
    for config in header["configs"]:
        paths = [f["path"] for f in config["data_files"]]
        (folder,) = {(out / p).parent for p in paths}
        folders[config["config_name"]] = folder
        parquet = sorted(folder.rglob("*.parquet"))
        assert parquet == sorted(out / p for p in paths)  # nothing else in the config's folder
        assert len({pq.read_schema(p) for p in parquet}) == 1
        assert pq.read_table(folder).num_rows == sum(pq.read_metadata(p).num_rows for p in parquet)
    assert len(set(folders.values())) == len(folders) == 3
    assert pq.read_table(folders["records"]).num_rows == len(records_of(run_dir))


def test_load_dataset_reads_each_config_by_name_and_by_folder(run_dir: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    datasets = pytest.importorskip("datasets", reason="datasets not installed: pip install 'medmis[hub]'")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf" / "datasets"))
    out = tmp_path / "dataset"
    assert main(["export", "parquet", str(run_dir), "--out", str(out)]) == 0
    expected = {"records": len(records_of(run_dir))}
    for config in ("records", "metrics", "cost"):
        # cache_dir: `datasets` read HF_DATASETS_CACHE when it was imported, so without it the
        # machine's shared cache (keyed by the folder's name, not its content) answers for an
        # export of another run, with that run's columns
        cache = str(tmp_path / "hf" / "datasets")
        by_name = datasets.load_dataset(str(out), config, split="train", cache_dir=cache)
        by_folder = datasets.load_dataset("parquet", data_dir=str((out / config_file(config)).parent), split="train",
                                          cache_dir=cache)
        assert by_name.num_rows == by_folder.num_rows == pq.read_table(out / config_file(config)).num_rows > 0
        assert by_name.column_names == by_folder.column_names
        if config in expected:
            assert by_name.num_rows == expected[config]


def test_text_language_reads_the_script() -> None:
    assert text_language("患者，女，32岁，月经量多，乏力半年。缺铁性贫血患者外周血涂片最典型的表现是什么") == "zh"
    # the prompt's English headings around a short Chinese question do not make it English
    assert text_language("You are an expert physician taking a board exam. Question: 首选治疗药物是什么？"
                         "Options: A: 青霉素 B: 头孢曲松 C: 多西环素 D: 阿奇霉素") == "zh"
    assert text_language("Which drug is the usual first-line therapy for type 2 diabetes?") == "en"
    assert text_language("12 / 3 = 4") is None


def test_the_card_lists_the_languages_of_the_items(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = SAMPLE.read_text(encoding="utf-8").splitlines()
    data = tmp_path / "mixed.jsonl"
    english = [r for r in rows if '"MEDMISQA"' in r][:2]
    chinese = [r for r in rows if '"MEDMISJOURNEY"' in r][:3]
    data.write_text("\n".join(english + chinese) + "\n", encoding="utf-8")
    run = tmp_path / "run"
    assert main(["run", "--data", str(data), "--model", "mock/examinee", "--defender", "none",
                 "--out", str(run), "--no-progress"]) == 0
    assert main(["export", "parquet", str(run), "--out", str(tmp_path / "ds")]) == 0
    header, body = card_header(tmp_path / "ds")
    assert header["language"] == ["en", "zh"]
    assert "- languages: `en` (2 items), `zh` (3 items)" in body
    # a Chinese-only run is not declared English
    only = tmp_path / "zh.jsonl"
    only.write_text("\n".join(chinese) + "\n", encoding="utf-8")
    assert main(["run", "--data", str(only), "--model", "mock/examinee", "--defender", "none",
                 "--protocol", "clean", "--out", str(tmp_path / "run_zh"), "--no-progress"]) == 0
    assert main(["export", "parquet", str(tmp_path / "run_zh"), "--out", str(tmp_path / "ds_zh")]) == 0
    assert card_header(tmp_path / "ds_zh")[0]["language"] == ["zh"]


def test_the_card_of_a_stopped_run_says_incomplete_with_its_counts(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "run"
    # a call cap stops the run part-way (exit 3), as a budget or Ctrl-C does
    assert main(["run", "--data", str(SAMPLE), "--limit", "10", "--model", "mock/examinee",
                 "--defender", "none,context_blind", "--out", str(run), "--no-progress", "--max-calls", "25"]) == 3
    held = records_of(run)
    assert 0 < len(held) < 60
    assert main(["export", "parquet", str(run), "--out", str(tmp_path / "ds")]) == 0
    header, body = card_header(tmp_path / "ds")
    assert "incomplete" in header["tags"] and "incomplete" in header["pretty_name"]
    assert f"it holds {len(held)} of 60 planned cases" in body and "stopped early: call cap" in body
    assert "each model answered each item" not in body
    assert f"- records: {len(held)} of 60 planned" in body
    for defender in ("none", "context_blind"):
        counts = [sum(1 for r in held if r["defender"] == defender and r["protocol"] == p)
                  for p in ("clean", "type1", "type2")]
        cells = " | ".join(f"{n} / 10" for n in counts)
        assert f"| `mock/examinee` | `{defender}` | {cells} | {sum(counts)} / 30 |" in body
    # a complete run's card carries no coverage section
    full = tmp_path / "full"
    assert main(["run", "--data", str(SAMPLE), "--limit", "2", "--model", "mock/examinee",
                 "--defender", "none", "--out", str(full), "--no-progress"]) == 0
    assert main(["export", "parquet", str(full), "--out", str(tmp_path / "ds_full")]) == 0
    header, body = card_header(tmp_path / "ds_full")
    assert "incomplete" not in header["tags"] and "## Coverage" not in body
    assert "each model answered each item" in body and "- records: 6 of 6 planned" in body
