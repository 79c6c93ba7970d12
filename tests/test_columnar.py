"""The DuckDB engine against the per-record reference implementation, to the last bit.

Random runs with several targets per item, errors, unparsed answers, retried keys, missing
tags, quotes and non-ASCII in ids, several models and defenders, and ``escalated`` flags of
every JSON type; the ``metrics.json`` of both must be equal as text. Also the keys-only
resume scan against ``read_records``.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from _metrics_reference import reference_metrics

from medmis.experiments import Record, Usage
from medmis.experiments.analysis import compute_metrics, compute_run_metrics
from medmis.experiments.harness._resume import CasePlan, resume_state
from medmis.experiments.records import compact_records, read_records

SUBSETS = ["MEDMISQA", "MEDMISHLE", "MEDMISXPERTQA"]
CONTENT = ["Cue Remapping", "Spurious Anchoring", "", None]
PROV = ["Neutral False Statement", "Authority (Guideline / Discharge Note / SOP)", None]
ESCALATED = [True, False, None, 0, 1, 0.0, "", "yes", [], [1], {}, {"a": 1}]


def random_records(seed: int, n_items: int = 40) -> list[Record]:
    rng = random.Random(seed)
    out = []
    ids = [f"q{i}" for i in range(n_items)] + ["it's", "é-ü", "back\\slash", "q1"]
    items = [(rng.choice(SUBSETS), i) for i in ids]
    for model in ("m/b", "m/a"):
        for defender in ("guard", "none", "other"):
            if model == "m/a" and defender == "other":
                continue
            for subset, iid in items:
                letters = "ABCD"[: rng.randint(2, 4)]
                gold = letters[0]
                cases = [("clean", None), ("type2", None)] + [("type1", t) for t in letters[1:]]
                for protocol, target in cases:
                    if rng.random() < 0.05:
                        continue
                    error = "Boom: x" if rng.random() < 0.08 else None
                    choice = None if error or rng.random() < 0.07 else rng.choice(letters)
                    extra = {"escalated": rng.choice(ESCALATED)} if defender == "guard" and rng.random() < 0.5 else {}
                    out.append(Record(
                        model=model, defender=defender, protocol=protocol, item_id=iid,  # type: ignore[arg-type]
                        subset=subset, target=target, gold=gold, choice=choice,
                        correct=None if error or rng.random() < 0.1 else choice == gold,
                        content_type=rng.choice(CONTENT), provenance=rng.choice(PROV), error=error,
                        usage=Usage(input_tokens=rng.randint(0, 500), output_tokens=rng.randint(0, 90)),
                        llm_calls=rng.randint(0, 4), tool_calls=rng.randint(0, 3),
                        latency_s=round(rng.random() * 3, 4), extra=extra,
                    ))
    rng.shuffle(out)
    return out


def _dump(report) -> str:
    return json.dumps(report.to_json_dict(), indent=2, ensure_ascii=False, allow_nan=False)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_engine_equals_reference(seed: int, tmp_path: Path) -> None:
    records = random_records(seed)
    # a retried key: the later line wins at the first line's position
    retried = records[3].model_copy(update={"error": None, "choice": records[3].gold, "correct": True})
    path = tmp_path / "records.jsonl"
    path.write_text("".join(r.model_dump_json() + "\n" for r in [*records, retried]) + '{"torn', "utf-8")
    deduped = read_records(path)
    expected = _dump(reference_metrics(deduped, n_boot=300, seed=seed))
    assert _dump(compute_metrics(deduped, n_boot=300, seed=seed)) == expected
    assert _dump(compute_run_metrics(tmp_path, n_boot=300, seed=seed)) == expected
    assert (tmp_path / "records.parquet").exists()
    assert _dump(compute_run_metrics(tmp_path, n_boot=300, seed=seed)) == expected  # from the Parquet copy


def test_engine_baseline_absent_and_empty() -> None:
    records = [r for r in random_records(5, 10) if r.defender != "none"]
    assert _dump(compute_metrics(records)) == _dump(reference_metrics(records))
    assert compute_metrics([]).to_json_dict() == {}


def _old_resume(records: list[Record], retry_errors: bool) -> tuple[set, dict, list, int, dict]:
    done = {r.key for r in records if r.error is None or not retry_errors}
    graded: dict[str, list[int]] = {}
    clean: dict = {}
    flips = [0, 0]
    errors = 0
    for r in sorted(records, key=lambda r: r.protocol != "clean"):
        if r.key not in done:
            continue
        if r.error:
            errors += 1
            continue
        g = graded.setdefault(r.protocol, [0, 0])
        g[0] += int(bool(r.correct))
        g[1] += 1
        if r.protocol == "clean":
            clean[(r.model, r.defender, r.item_key)] = bool(r.correct)
        elif r.protocol == "type1" and clean.get((r.model, r.defender, r.item_key)):
            flips[0] += int(not r.correct)
            flips[1] += 1
    return done, graded, flips, errors, clean


def _plan_of(records: list[Record]) -> CasePlan:
    """Every key of the records' grid, plus keys no record has (a new model, a new case)."""
    models = [*sorted({r.model for r in records}), "m/new"]
    defenders = sorted({r.defender for r in records})
    cases = sorted({(r.protocol, r.item_key, r.target) for r in records}, key=str)
    cases += [("type1", "MEDMISQA/unseen", "B"), ("clean", "MEDMISQA/unseen", None)]
    return CasePlan(models, defenders, cases)


@pytest.mark.parametrize("retry_errors", [False, True])
def test_resume_scan_equals_read_records(tmp_path: Path, retry_errors: bool) -> None:
    records = random_records(7)
    path = tmp_path / "records.jsonl"
    path.write_text("".join(r.model_dump_json() + "\n" for r in records) + '{"mod', "utf-8")
    deduped = read_records(path)
    done, graded, flips, errors, clean = _old_resume(deduped, retry_errors)
    plan = _plan_of(deduped)
    expected = [(mi, di, ci) for mi, m in enumerate(plan.models) for di, d in enumerate(plan.defenders)
                for ci, (p, item, t) in enumerate(plan.cases) if (m, d, p, item, t, 0) not in done]
    for attempt in ("jsonl", "parquet"):
        state = resume_state(path, plan, retry_errors=retry_errors)
        assert state.missing == expected, attempt
        assert len(expected) < len(plan.models) * len(plan.defenders) * len(plan.cases)
        assert state.graded == graded and state.flips == flips and state.errors == errors
        assert state.clean == clean
        assert state.input_tokens == sum(r.usage.input_tokens for r in deduped if r.key in done)
        compact_records(path)  # the second pass reads the fresh Parquet copy


def test_resume_with_nothing_missing_skips_the_clean_map(tmp_path: Path) -> None:
    records = random_records(3, 6)
    path = tmp_path / "records.jsonl"
    path.write_text("".join(r.model_dump_json() + "\n" for r in records), "utf-8")
    only_done = CasePlan(["m/b"], ["none"], [(r.protocol, r.item_key, r.target) for r in records
                                             if (r.model, r.defender) == ("m/b", "none")])
    state = resume_state(path, only_done)
    assert state.missing == [] and state.clean == {} and state.records == len(records)
    assert resume_state(tmp_path / "absent.jsonl", only_done).missing == [
        (0, 0, i) for i in range(len(only_done.cases))]


def test_resume_scan_reports_a_bad_middle_line(tmp_path: Path) -> None:
    records = random_records(8, 5)
    path = tmp_path / "records.jsonl"
    lines = [r.model_dump_json() for r in records]
    lines.insert(3, "{not json")
    path.write_text("\n".join(lines) + "\n", "utf-8")
    with pytest.raises(ValueError, match=r"records.jsonl:4"):
        resume_state(path, CasePlan(["m/a"], ["none"], [("clean", "MEDMISQA/q0", None)]))


@pytest.mark.parametrize("tail", [b"", b'{"torn', b'{"long' + b"x" * 200_000])
@pytest.mark.parametrize("head", [b"", b'{"a": 1}\n', b'{"a": 1}\n' + b"y" * 150_000 + b"\n"])
def test_repair_torn_tail_cuts_only_the_partial_line(tmp_path: Path, head: bytes, tail: bytes) -> None:
    from medmis.experiments.records import repair_torn_tail

    path = tmp_path / "records.jsonl"
    path.write_bytes(head + tail)
    repair_torn_tail(path)
    assert path.read_bytes() == head


@pytest.mark.parametrize("seed", [0, 4])
def test_same_answers_sql_equals_per_record(seed: int) -> None:
    from medmis.experiments.analysis._columnar import records_into
    from medmis.experiments.analysis._same_answers import same_answers, same_answers_sql
    from medmis.experiments.records import connect

    records = random_records(seed)
    # a control that answers like "none" wherever both are graded, and one with no graded case
    records += [r.model_copy(update={"defender": "blind"}) for r in records if r.defender == "none"]
    records += [r.model_copy(update={"defender": "dead", "error": "E: x", "choice": None, "correct": None})
                for r in records[:5]]
    records = list({r.key: r for r in records}.values())  # one record per key, as a run holds
    con = connect()
    try:
        records_into(con, records)
        for controls in ({"none"}, {"blind", "other"}, {"guard", "none", "blind", "dead"}, set()):
            got = same_answers_sql(con, controls)
            want = same_answers(records, controls)
            assert got == want, controls
            assert list(got) == sorted(got)
        assert same_answers_sql(con, {"blind"})[("m/b", "none")]["blind"].k > 0
    finally:
        con.close()


@pytest.mark.parametrize(("m", "scale"), [(17, 5), (31, 5), (400, 5), (2049, 5), (101, 400_000)])
def test_sign_flips_from_the_raw_stream_equal_choice(m: int, scale: int, monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    from medmis.experiments.analysis import _cluster

    rng = np.random.default_rng(m)
    nz = rng.integers(-scale, scale + 1, size=m).astype(np.float64)  # scale 400,000: float64 sums
    nz[nz == 0] = 3.0
    assert _cluster._raw_signs_match_choice()
    for n_perm in (1, 999, 5000):
        for threshold in (0.0, abs(nz.sum()) - 1e-9, 10.0):
            monkeypatch.setattr(_cluster, "_RAW_SIGNS_OK", True)
            fast = _cluster._sign_flip_hits(nz, threshold, n_perm, seed=m)
            monkeypatch.setattr(_cluster, "_RAW_SIGNS_OK", False)  # the old draws through choice
            assert fast == _cluster._sign_flip_hits(nz, threshold, n_perm, seed=m)
            if threshold == 0.0:
                assert fast == n_perm


def test_ablation_calibration_is_the_per_record_mean(tmp_path: Path) -> None:
    from medmis.experiments.ablation._ablate import _calibration

    records = random_records(9)
    records[0] = records[0].model_copy(update={"error": ""})  # an empty error counts as none
    (tmp_path / "records.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in records), "utf-8")
    sums: dict[tuple[str, str, str], list[float]] = {}
    for r in read_records(tmp_path / "records.jsonl"):
        if r.error:
            continue
        s = sums.setdefault((r.model, r.defender, r.protocol), [0, 0, 0, 0, 0])
        for i, v in enumerate((r.llm_calls, r.tool_calls, r.usage.input_tokens, r.usage.output_tokens, 1)):
            s[i] += v
    want = {k: (v[0] / v[4], v[1] / v[4], v[2] / v[4], v[3] / v[4]) for k, v in sums.items()}
    assert _calibration(tmp_path) == want and len(want) > 10
    assert _calibration(tmp_path / "absent") == {}
