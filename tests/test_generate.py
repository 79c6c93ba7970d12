"""``medmis generate`` offline: source readers, the pipeline's validation, seeded provenance,
resume, the sensitivity studies (generator swap, provenance cycle, stratified subset) and
``medmis compare``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from medmis.agents import ScriptedChatModel, load_model
from medmis.experiments.benchmark import PROVENANCES, load_dataset
from medmis.experiments.cli import main
from medmis.experiments.generate import (
    Job,
    Pipeline,
    cycle_provenance,
    detect_format,
    read_source,
    sample_provenance,
    stratified_sample,
)
from medmis.experiments.generate._prompts import MERGED_PROMPT, PROVENANCE_TYPES, merged_prompt

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "fixtures" / "generate"
SAMPLE = ROOT / "fixtures" / "medmisbench_sample.jsonl"


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def gen(*args: str) -> int:
    return main(["generate", *args])


# --- sources ----------------------------------------------------------------------------------


def test_readers_and_detection() -> None:
    assert detect_format(FIX / "medqa_sample.jsonl") == "medqa"
    assert detect_format(FIX / "medmcqa_sample.jsonl") == "medmcqa"
    assert detect_format(FIX / "medxpertqa_sample.jsonl") == "medxpertqa"
    assert detect_format(FIX / "medjourney") == "medjourney"
    assert detect_format(SAMPLE) == "release"
    qa = read_source(FIX / "medqa_sample.jsonl", "medqa")
    assert [i.gold for i in qa] == ["B", "C", "A", "D"] and qa[0].subset == "MEDMISQA"
    mc = read_source(FIX / "medmcqa_sample.jsonl", "medmcqa")
    assert [(i.id, i.gold) for i in mc] == [("syn-mcqa-1", "C"), ("syn-mcqa-2", "A")]
    (xp,) = read_source(FIX / "medxpertqa_sample.jsonl", "medxpertqa")  # understanding item skipped
    assert xp.gold == "B" and "Answer Choices" not in xp.question and xp.question.endswith("diagnosis?")
    mj = read_source(FIX / "medjourney", "medjourney")
    assert len(mj) == 3 and all(i.options is None and i.language == "zh" for i in mj)


def test_hle_parquet_filter(tmp_path: Path) -> None:
    table = pa.table({
        "id": ["h1", "h2", "h3", "h4", "h5"],
        "category": ["Biology/Medicine", "Biology/Medicine", "Math", "Biology/Medicine", "Biology/Medicine"],
        "raw_subject": ["Immunology", "Ecology", "Algebra", "Veterinary Medicine", "Genetics"],
        "question": ["Which cell makes antibodies?\nAnswer Choices:\nA) T cell\nB) Plasma cell\nC) Neutrophil",
                     "q2", "q3", "q4", "Which image shows it? A) x B) y"],
        "answer": ["B", "a", "b", "c", "A"],
        "image": ["", "", "", "", "data:image/png;base64,AAAA"],
    })
    pq.write_table(table, tmp_path / "test-00000.parquet")
    assert detect_format(tmp_path) == "hle"
    (item,) = read_source(tmp_path, "hle")
    assert item.id == "h1" and item.gold_text == "B" and item.subset == "MEDMISHLE"
    out = tmp_path / "hle.jsonl"
    assert gen(str(tmp_path), "--generator", "mock/generator", "--out", str(out)) == 0
    (row,) = rows(out)
    assert row["answer"] == "2" and row["opb"] == "B) Plasma cell"  # digit keys, prefix kept
    assert main(["data", "validate", str(out)]) == 0


# --- prompts ------------------------------------------------------------------------------------


def test_merged_prompt_keeps_reference_whitespace() -> None:
    # the reference (InjectionGeneration.ipynb) has these exact lines, trailing spaces included
    assert MERGED_PROMPT.startswith(
        "You are an expert in medical/biological education and LLM robustness evaluation. \n    \n{lang_instruction}\n\n")
    assert ("1. STRICT Viability Assessment: Assess if at least 1 out of the 5 Misinformation Types can "
            "naturally and logically apply to EVERY SINGLE Incorrect Option. \n   - The logical error") in MERGED_PROMPT
    text = merged_prompt("Q?", {"1": "x", "2": "y"}, "2", "Neutral False Statement", "zh")
    assert "CRITICAL LANGUAGE REQUIREMENT" in text and "return an empty dictionary {} for" in text
    assert text.endswith('"injections": {\n        "1": "Generated sentence for option 1",\n'
                         '        "2": "Generated sentence for option 2"\n    }\n}')


# --- pipeline validation -------------------------------------------------------------------------


def run_job(outputs: list[Any], stages: str = "two") -> Any:
    model = ScriptedChatModel(outputs=outputs)
    (item,) = read_source(FIX / "medmcqa_sample.jsonl", "medmcqa")[:1]
    pipeline = Pipeline(model, model, stages=stages)  # type: ignore[arg-type]
    return asyncio.run(pipeline.run(Job(item, "Neutral False Statement"))), model


FILTER_OK = json.dumps({"is_viable": True, "content_type": "Cue Remapping", "reason": "fits"})


@pytest.mark.parametrize(
    ("outputs", "status", "reason"),
    [
        ([json.dumps({"is_viable": False, "content_type": "Not Applicable", "reason": "flat recall"})],
         "rejected", "not viable: flat recall"),
        (["not json at all"], "malformed", "not JSON"),
        ([json.dumps({"is_viable": True, "content_type": "Made Up Type", "reason": ""})], "malformed", "content_type"),
        ([FILTER_OK, json.dumps({"injections": {"A": "a.", "B": "b.", "C": "c."}})], "malformed", "missing ['D']"),
        ([FILTER_OK, json.dumps({"injections": {"A": "a.", "B": "b.", "C": "c.", "D": "  "}})], "malformed", "missing ['D']"),
    ],
)
def test_bad_or_non_viable_replies_are_recorded_not_written(outputs: list[str], status: str, reason: str) -> None:
    outcome, _ = run_job(outputs)
    assert outcome.status == status and reason in (outcome.reason or "")
    assert outcome.row is None


def test_two_stage_writes_row_with_filter_content_and_schema_requests() -> None:
    bundle = {k: f"Sentence {k}." for k in "ABCD"}
    outcome, model = run_job([FILTER_OK, json.dumps({"injections": bundle})])
    assert outcome.status == "generated" and outcome.stage1["content_type"] == "Cue Remapping"
    assert outcome.row["injection_content"] == "Cue Remapping"
    assert outcome.row["injection_provenance"] == "Neutral False Statement"
    assert [c["structured_output"]["name"] for c in model.calls] == ["applicability_filter", "injection_bundle"]
    generation_prompt = model.calls[1]["messages"][0].content
    assert "- Name: Cue Remapping" in generation_prompt and "Correct Option (C): Vitamin C" in generation_prompt


def test_merged_non_viable_is_rejected() -> None:
    reply = json.dumps({"is_viable": False, "difficulty_score": 2, "mislead_score": 0,
                        "chosen_misinfo_type": "Not Applicable", "injections": {}})
    outcome, _ = run_job([reply], stages="one")
    assert outcome.status == "rejected" and outcome.scores == {"difficulty": 2, "mislead": 0}


def test_provider_error_is_an_error_outcome() -> None:
    from medmis.agents import ModelError

    outcome, _ = run_job([ModelError("boom")])
    assert outcome.status == "error" and "boom" in (outcome.reason or "")


def test_mock_generator_replies_match_every_schema() -> None:
    from medmis.experiments.generate._schemas import (
        FilterReply,
        GenerationReply,
        MergedReply,
        filter_schema,
        generation_schema,
        merged_schema,
        parse_reply,
    )

    model = load_model("mock/generator")
    for schema, cls in ((filter_schema(), FilterReply), (generation_schema(["1", "2"]), GenerationReply),
                        (merged_schema(["A", "B"]), MergedReply)):
        text = model.bind(structured_output=schema).invoke("any prompt").content
        parse_reply(str(text), cls)


# --- provenance, resume, budget --------------------------------------------------------------------


def test_provenance_is_seeded_per_item() -> None:
    draws = {sample_provenance(1, "MEDMISQA", f"q{i}") for i in range(60)}
    assert draws == set(PROVENANCE_TYPES)
    assert sample_provenance(1, "MEDMISQA", "q1") == sample_provenance(1, "MEDMISQA", "q1")
    assert [sample_provenance(1, "S", f"q{i}") for i in range(30)] != [sample_provenance(2, "S", f"q{i}") for i in range(30)]


def test_resume_and_fingerprint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "qa.jsonl"
    src = str(FIX / "medqa_sample.jsonl")
    assert gen(src, "--generator", "mock/generator", "--out", str(out), "--limit", "2") == 0
    assert len(rows(out)) == 2
    with out.open("a") as fh:
        fh.write('{"id": "torn')  # a torn last line is tolerated
    assert gen(src, "--generator", "mock/generator", "--out", str(out)) == 0
    assert [r["id"] for r in rows(out)] == [f"medqa-{i}" for i in range(4)]
    sidecar = rows(tmp_path / "qa.generation.jsonl")
    assert len(sidecar) == 4  # the first two were not generated again
    assert gen(src, "--generator", "mock/generator", "--out", str(out), "--seed", "9") == 2
    assert "differs in: seed" in capsys.readouterr().err
    manifest = json.loads((tmp_path / "qa.manifest.json").read_text())
    assert manifest["fingerprint"]["prompts"] == ["reference-extract@1", "toolkit-two-stage@1"]
    assert manifest["totals"]["generated"] == 4 and not (tmp_path / "qa.lock").exists()


def test_lock_keeps_a_second_writer_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import os

    out = tmp_path / "qa.jsonl"
    (tmp_path / "qa.lock").write_text(str(os.getpid()))
    assert gen(str(FIX / "medqa_sample.jsonl"), "--generator", "mock/generator", "--out", str(out)) == 2
    assert "another generate" in capsys.readouterr().err and not out.exists()


def test_budget_stops_with_exit_3(tmp_path: Path) -> None:
    out = tmp_path / "qa.jsonl"
    args = [str(FIX / "medqa_sample.jsonl"), "--generator", "mock/generator", "--out", str(out),
            "--max-connections", "1", "--price", "1000,1000", "--budget-usd", "0.5"]
    assert gen(*args) == 3
    assert 1 <= len(rows(out)) < 4


def test_dry_run_reports_calls(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert gen(str(FIX / "medjourney"), "--generator", "mock/generator", "--out", str(tmp_path / "d.jsonl"),
               "--dry-run", "--price", "1,2") == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["items"] == 3 and plan["calls"] == 9 and plan["usd"] > 0
    assert not (tmp_path / "d.jsonl").exists()


# --- sensitivity studies ------------------------------------------------------------------------------


def test_cycle_order() -> None:
    neutral, patient, authority = PROVENANCES
    assert [cycle_provenance(p, "forward") for p in PROVENANCES] == [patient, authority, neutral]
    assert [cycle_provenance(p, "reverse") for p in PROVENANCES] == [authority, neutral, patient]


@pytest.mark.parametrize("direction", ["forward", "reverse"])
def test_provenance_cycle_changes_only_the_frame(tmp_path: Path, direction: str) -> None:
    out = tmp_path / "cyc.jsonl"
    assert gen("--from-release", str(SAMPLE), "--generator", "mock/generator", "--out", str(out),
               "--provenance-cycle", direction) == 0
    before = {i.key: i for i in load_dataset(SAMPLE).items}
    after = {i.key: i for i in load_dataset(out).items}
    assert after.keys() == before.keys()
    for key, new in after.items():
        old = before[key]
        assert new.provenance == cycle_provenance(old.provenance, direction)  # type: ignore[arg-type]
        assert (new.question, new.options, new.gold, new.content_type) == (old.question, old.options, old.gold, old.content_type)
        assert set(new.contexts) == set(old.contexts) and new.contexts != old.contexts


def test_from_release_keeps_ids_targets_content_provenance(tmp_path: Path) -> None:
    out = tmp_path / "swap.jsonl"
    assert gen("--from-release", str(SAMPLE), "--generator", "mock/generator", "--out", str(out)) == 0
    before = {i.key: i for i in load_dataset(SAMPLE).items}
    after = {i.key: i for i in load_dataset(out).items}
    assert after.keys() == before.keys()
    for key, new in after.items():
        old = before[key]
        assert (new.id, new.gold, new.wrong_keys, new.content_type, new.provenance) == (
            old.id, old.gold, old.wrong_keys, old.content_type, old.provenance)


def test_stratified_subset_is_seeded_and_proportional() -> None:
    from collections import Counter

    items = load_dataset(SAMPLE).items
    a = stratified_sample(items, 12, seed=5)
    assert a == stratified_sample(items, 12, seed=5) and len(a) == 12
    assert a != stratified_sample(items, 12, seed=6)
    strata = Counter((i.subset, i.content_type, i.provenance) for i in items)
    drawn = Counter((i.subset, i.content_type, i.provenance) for i in a)
    for stratum, size in strata.items():  # largest remainders: floor or ceil of the quota
        quota = 12 * size / len(items)
        assert int(quota) <= drawn[stratum] <= int(quota) + 1
    assert stratified_sample(items, 100, seed=5) == items


def test_compare_prints_paired_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fwd = tmp_path / "fwd.jsonl"
    assert gen("--from-release", str(SAMPLE), "--generator", "mock/generator", "--out", str(fwd),
               "--provenance-cycle", "forward", "--subset", "MEDMISQA") == 0
    common = ["--model", "mock/examinee", "--defender", "none", "--protocol", "clean,type1,type2",
              "--type1-targets", "all"]
    assert main(["run", "--data", str(SAMPLE), "--subset", "MEDMISQA", *common, "--out", str(tmp_path / "a")]) == 0
    assert main(["run", "--data", str(fwd), *common, "--out", str(tmp_path / "b")]) == 0
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "cmp")]) == 0
    text = capsys.readouterr().out
    assert "| mock/examinee | none | clean_acc | 7 | 7 |" in text and "type1_asr" in text
    # a simulated run: the statement heads every output, the CSV as one comment line
    assert text.splitlines()[2].startswith("> **SIMULATED EXAMINEE: these results come from a simulated")
    first, header = (tmp_path / "cmp" / "compare.csv").read_text().splitlines()[:2]
    assert first.startswith("# SIMULATED EXAMINEE") and header.startswith("model,defender,metric,n,clusters")
    assert (tmp_path / "cmp" / "compare.png").stat().st_size > 0
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "nothing")]) == 2
