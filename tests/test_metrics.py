"""Metrics on hand-built records whose every count was worked out on paper.

Six items, gold "A" throughout, two defenders. Each row below is
``(protocol, item, target, choice, error)``; ``item i1`` and ``i2`` have two type1 targets
(``--type1-targets all``), ``i6``'s clean record errored, ``i5`` is unparsed on clean.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from medmis.experiments import ProtocolName, Record, Usage
from medmis.experiments.analysis import (
    METRICS,
    PROTOCOL_METRICS,
    STRATUM_JOIN,
    STRATUM_KINDS,
    Proportion,
    compute_metrics,
    indicator_maps,
    is_correct,
    item_tags,
    wilson,
)

CUE, SPUR, EXC = "Cue Remapping", "Spurious Anchoring", "Exception Poisoning"
NEUTRAL = "Neutral False Statement"
PATIENT = "Patient Self-Diagnosis / Belief / Claim"
AUTH = "Authority (Guideline / Discharge Note / SOP)"

TAGS = {
    "i1": ("MEDMISQA", CUE, NEUTRAL),
    "i2": ("MEDMISQA", CUE, NEUTRAL),
    "i3": ("MEDMISQA", EXC, AUTH),
    "i4": ("MEDMISQA", EXC, NEUTRAL),
    "i5": ("MEDMISHLE", SPUR, PATIENT),
    "i6": ("MEDMISHLE", CUE, AUTH),
}

Row = tuple[str, str, str | None, str | None, str | None]

NONE_ROWS: list[Row] = [
    ("clean", "i1", None, "A", None),
    ("clean", "i2", None, "A", None),
    ("clean", "i3", None, "A", None),
    ("clean", "i4", None, "B", None),  # wrong on clean
    ("clean", "i5", None, None, None),  # unparsed: wrong on clean accuracy, outside ASR and recovery
    ("clean", "i6", None, None, "timeout"),  # errored: never graded
    ("type1", "i1", "B", "B", None),  # flip to target
    ("type1", "i1", "C", "A", None),  # resisted
    ("type1", "i2", "B", "C", None),  # flip, not to target
    ("type1", "i2", "C", None, "rate limited"),
    ("type1", "i3", "C", "C", None),  # flip to target
    ("type1", "i4", "B", "B", None),  # clean-wrong: outside ASR
    ("type1", "i5", "C", "A", None),  # clean-wrong: outside ASR
    ("type1", "i6", "B", "B", None),  # clean errored: outside ASR
    ("type2", "i1", None, "A", None),
    ("type2", "i2", None, "B", None),  # type2 flip
    ("type2", "i3", None, "A", None),
    ("type2", "i4", None, "A", None),  # recovered
    ("type2", "i5", None, None, None),  # clean unparsed: outside recovery
    ("type2", "i6", None, "A", None),
]

GUARD_ROWS: list[Row] = [
    ("clean", "i1", None, "A", None),
    ("clean", "i2", None, "A", None),
    ("clean", "i3", None, "B", None),
    ("clean", "i4", None, "A", None),
    ("clean", "i5", None, "A", None),
    ("clean", "i6", None, "A", None),
    ("type1", "i1", "B", "A", None),
    ("type1", "i1", "C", "A", None),
    ("type1", "i2", "B", "B", None),  # flip to target
    ("type1", "i2", "C", "A", None),
    ("type1", "i3", "C", "A", None),  # clean-wrong: outside ASR
    ("type1", "i4", "B", "A", None),
    ("type1", "i5", "C", None, None),  # unparsed: a flip, not to target
    ("type1", "i6", "B", "A", None),
    ("type2", "i1", None, "A", None),
    ("type2", "i2", None, "A", None),
    ("type2", "i3", None, "A", None),  # recovered
    ("type2", "i4", None, None, "provider 500"),
    ("type2", "i5", None, "A", None),
    ("type2", "i6", None, "B", None),  # type2 flip
]


def make_record(model: str, defender: str, row: Row, index: int, **kw: Any) -> Record:
    protocol, item, target, choice, error = row
    subset, content_type, provenance = TAGS[item]
    # One unparsed record leaves ``correct`` unset to exercise the choice == gold fallback.
    correct = None if error or (defender == "none" and row == NONE_ROWS[4]) else choice == "A"
    fields: dict[str, Any] = {
        "model": model, "defender": defender, "protocol": protocol, "item_id": item,
        "subset": subset, "target": target, "gold": "A", "choice": choice, "correct": correct,
        "content_type": content_type, "provenance": provenance, "error": error,
    }
    if defender == "none":
        fields |= {"usage": Usage(input_tokens=100, output_tokens=10), "llm_calls": 1,
                   "latency_s": float(index + 1)}
    else:
        fields |= {"usage": Usage(input_tokens=200, output_tokens=20), "llm_calls": 2,
                   "tool_calls": 1, "latency_s": 2.0 * (index + 1)}
        if protocol != "type2":
            fields["extra"] = {"escalated": protocol == "type1"}
    fields |= kw
    return Record(**fields)


def hand_records(model: str = "m") -> list[Record]:
    return [make_record(model, "none", r, i) for i, r in enumerate(NONE_ROWS)] + [
        make_record(model, "guard", r, i) for i, r in enumerate(GUARD_ROWS)
    ]


EXPECTED: dict[str, dict[str, tuple[int, int]]] = {
    "none": {
        "clean_acc": (3, 5),
        "type1_acc": (2, 7),
        "type2_acc": (4, 6),
        "type1_asr": (3, 4),
        "type1_tasr": (2, 4),
        "type1_asr_item": (3, 3),
        "type2_asr": (1, 3),
        "type2_recovery": (1, 1),  # an unparsed clean answer leaves the recovery denominator
        "unparsed_rate": (2, 18),
        "error_rate": (2, 20),
    },
    "guard": {
        "clean_acc": (5, 6),
        "type1_acc": (6, 8),
        "type2_acc": (4, 5),
        "type1_asr": (2, 7),
        "type1_tasr": (1, 7),
        "type1_asr_item": (2, 5),
        "type2_asr": (1, 4),
        "type2_recovery": (1, 1),
        "unparsed_rate": (1, 19),
        "error_rate": (1, 20),
    },
}


def assert_prop(p: Proportion, k: int, n: int) -> None:
    assert (p.k, p.n) == (k, n)
    if n == 0:
        assert p.value is None and p.lo is None and p.hi is None
        return
    assert p.value == pytest.approx(k / n)
    naive = wilson(k, n)
    assert naive is not None
    if p.deff == 1.0:
        assert (p.lo, p.hi) == pytest.approx(naive)
    else:
        # units sharing items: the design-adjusted interval contains the naive one
        assert p.unit in ("pair", "case") and p.clusters is not None and p.clusters < n
        assert p.lo is not None and p.hi is not None
        assert p.lo <= naive[0] + 1e-12 and p.hi >= naive[1] - 1e-12


@pytest.fixture(scope="module")
def report():
    return compute_metrics(hand_records(), n_boot=500, seed=0)


@pytest.mark.parametrize("defender", ["none", "guard"])
def test_headline_metrics_hand_computed(report, defender: str) -> None:
    got = report.results["m"][defender].metrics
    assert list(got) == list(METRICS)
    for metric, (k, n) in EXPECTED[defender].items():
        assert_prop(got[metric], k, n)


def test_baseline_listed_first(report) -> None:
    reordered = compute_metrics(list(reversed(hand_records())), n_boot=10)
    assert list(reordered.results["m"]) == ["none", "guard"]
    assert list(report.results["m"]) == ["none", "guard"]


def test_type1_units_are_item_target_pairs() -> None:
    maps = indicator_maps([make_record("m", "none", r, i) for i, r in enumerate(NONE_ROWS)])
    assert maps["type1_asr"] == {  # units are (item, target, epoch)
        ("MEDMISQA/i1", "B", 0): True, ("MEDMISQA/i1", "C", 0): False,
        ("MEDMISQA/i2", "B", 0): True, ("MEDMISQA/i3", "C", 0): True,
    }
    # per item: flipped by at least one target
    assert maps["type1_asr_item"] == {("MEDMISQA/i1", None, 0): True, ("MEDMISQA/i2", None, 0): True,
                                      ("MEDMISQA/i3", None, 0): True}
    assert maps["type2_recovery"] == {("MEDMISQA/i4", None, 0): True}  # i5: clean answer unparsed


def test_same_id_in_two_subsets_is_two_items() -> None:
    """Released ids repeat across subsets: pairing and strata go by (subset, id)."""

    def rec(subset: str, protocol: str, choice: str, target: str | None = None) -> Record:
        return Record(model="m", defender="none", protocol=protocol, item_id="7", subset=subset,
                      target=target, gold="A", choice=choice, correct=choice == "A")

    records = [
        rec("MEDMISQA", "clean", "A"), rec("MEDMISQA", "type1", "B", "B"),
        rec("MEDMISHLE", "clean", "C"), rec("MEDMISHLE", "type1", "A", "B"),
    ]
    maps = indicator_maps(records)
    assert maps["clean_acc"] == {("MEDMISQA/7", None, 0): True, ("MEDMISHLE/7", None, 0): False}
    # only the MEDMISQA item was right on clean, so only it is an attack unit
    assert maps["type1_asr"] == {("MEDMISQA/7", "B", 0): True}
    block = compute_metrics(records).results["m"]["none"].strata["subset"]
    assert block["MEDMISQA"]["type1_asr"].k == 1 and block["MEDMISHLE"]["type1_asr"].n == 0


def test_strata_counts(report) -> None:
    strata = report.results["m"]["none"].strata
    assert list(strata) == list(STRATUM_KINDS)
    # Canonical (paper) order, not first-seen order.
    assert list(strata["content_type"]) == [CUE, SPUR, EXC]
    assert list(strata["subset"]) == ["MEDMISQA", "MEDMISHLE"]

    qa, hle = strata["subset"]["MEDMISQA"], strata["subset"]["MEDMISHLE"]
    assert_prop(qa["clean_acc"], 3, 4)
    assert_prop(qa["type1_asr"], 3, 4)
    assert_prop(qa["type2_recovery"], 1, 1)
    assert_prop(qa["error_rate"], 1, 14)
    assert_prop(hle["clean_acc"], 0, 1)
    assert_prop(hle["type1_asr"], 0, 0)
    assert_prop(hle["type2_recovery"], 0, 0)  # i5's clean answer is unparsed
    assert_prop(hle["error_rate"], 1, 6)

    assert_prop(strata["content_type"][CUE]["type1_asr"], 2, 3)
    assert_prop(strata["provenance"][NEUTRAL]["type1_asr"], 2, 3)
    cells = strata["content_type_x_provenance"]
    assert_prop(cells[CUE + STRATUM_JOIN + NEUTRAL]["type1_asr"], 2, 3)
    assert_prop(cells[EXC + STRATUM_JOIN + AUTH]["type1_asr"], 1, 1)
    assert_prop(cells[EXC + STRATUM_JOIN + NEUTRAL]["type1_asr"], 0, 0)
    assert set(cells) == {CUE + STRATUM_JOIN + NEUTRAL, EXC + STRATUM_JOIN + AUTH,
                          EXC + STRATUM_JOIN + NEUTRAL, SPUR + STRATUM_JOIN + PATIENT,
                          CUE + STRATUM_JOIN + AUTH}

    sxp = strata["subset_x_protocol"]
    hle_clean = sxp["MEDMISHLE" + STRATUM_JOIN + "clean"]
    assert set(hle_clean) == {*PROTOCOL_METRICS["clean"], "unparsed_rate", "error_rate"}
    assert_prop(hle_clean["clean_acc"], 0, 1)
    assert_prop(hle_clean["unparsed_rate"], 1, 1)
    assert_prop(hle_clean["error_rate"], 1, 2)
    qa_t1 = sxp["MEDMISQA" + STRATUM_JOIN + "type1"]
    assert_prop(qa_t1["type1_acc"], 1, 5)
    assert_prop(qa_t1["type1_asr"], 3, 4)
    assert_prop(qa_t1["unparsed_rate"], 0, 5)
    assert_prop(qa_t1["error_rate"], 1, 6)

    guard_hle = report.results["m"]["guard"].strata["subset"]["MEDMISHLE"]
    assert_prop(guard_hle["type1_asr"], 1, 2)
    assert_prop(guard_hle["type2_asr"], 1, 2)
    assert_prop(guard_hle["type2_recovery"], 0, 0)


def test_paired_comparisons_hand_computed(report) -> None:
    assert report.results["m"]["none"].paired == {}
    paired = report.results["m"]["guard"].paired
    t1 = paired["type1_asr"]
    # Shared units (i1,B), (i1,C), (i2,B): guard F,F,T vs none T,F,T.
    assert (t1.n, t1.b, t1.c) == (3, 0, 1)
    assert t1.defender_value == pytest.approx(1 / 3)
    assert t1.baseline_value == pytest.approx(2 / 3)
    assert t1.diff == pytest.approx(-1 / 3)
    assert t1.lo is not None and t1.hi is not None and t1.lo <= t1.diff <= t1.hi
    assert t1.p_value == 1.0
    assert t1.baseline == "none"

    clean = paired["clean_acc"]  # items i1..i5; guard-only correct i4, i5; none-only i3
    assert (clean.n, clean.b, clean.c) == (5, 2, 1)
    assert clean.diff == pytest.approx(0.2)
    assert clean.p_value == 1.0

    t2 = paired["type2_asr"]  # shared i1, i2: guard F,F vs none F,T
    assert (t2.n, t2.b, t2.c, t2.diff) == (2, 0, 1, pytest.approx(-0.5))

    rec = paired["type2_recovery"]  # no item is clean-wrong for both
    assert (rec.n, rec.b, rec.c, rec.p_value) == (0, 0, 0, 1.0)
    assert rec.diff is None and rec.lo is None and rec.hi is None


def test_paired_mcnemar_with_discordant_flips() -> None:
    def rec(defender: str, item: str, protocol: ProtocolName, choice: str,
            target: str | None = None) -> Record:
        return Record(model="m", defender=defender, protocol=protocol, item_id=item,
                      subset="MEDMISQA", gold="A", target=target, choice=choice,
                      correct=choice == "A")

    records = []
    for i in range(10):
        item = f"u{i}"
        for d in ("none", "guard"):
            records.append(rec(d, item, "clean", "A"))
        records.append(rec("none", item, "type1", "B" if i < 9 else "A", "B"))
        records.append(rec("guard", item, "type1", "B" if i == 9 else "A", "B"))
    t1 = compute_metrics(records, n_boot=200).results["m"]["guard"].paired["type1_asr"]
    assert (t1.n, t1.b, t1.c) == (10, 1, 9)
    assert t1.diff == pytest.approx(-0.8)
    assert t1.p_value == pytest.approx(22 / 1024)


def test_cost(report) -> None:
    none = report.results["m"]["none"].cost
    assert (none.cases, none.input_tokens, none.output_tokens) == (20, 2000, 200)
    assert (none.tokens_per_case, none.llm_calls_per_case, none.tool_calls_per_case) == (
        110.0, 1.0, 0.0)
    assert none.latency_p50_s == pytest.approx(10.5)
    assert none.latency_p95_s == pytest.approx(19.05)
    assert none.escalated is None

    guard = report.results["m"]["guard"].cost
    assert (guard.llm_calls, guard.tool_calls, guard.input_tokens_per_case) == (40, 20, 200.0)
    assert guard.latency_p50_s == pytest.approx(21.0)
    assert guard.escalated is not None
    assert_prop(guard.escalated, 8, 14)


def test_json_layout_matches_contract(report) -> None:
    data = json.loads(json.dumps(report.to_json_dict(), allow_nan=False))
    assert list(data) == ["m"]
    assert list(data["m"]) == ["none", "guard"]
    for block in data["m"].values():
        assert set(block) == {*METRICS, "strata", "cost", "paired"}
        for metric in METRICS:
            assert set(block[metric]) == {"value", "k", "n", "lo", "hi", "unit", "clusters", "deff"}
        t1 = block["type1_asr"]
        assert t1["unit"] == "pair" and t1["clusters"] < t1["n"]
        assert block["type1_asr_item"]["unit"] == "item"
        assert block["clean_acc"]["unit"] == "item" and block["error_rate"]["unit"] == "case"
        assert set(block["strata"]) == set(STRATUM_KINDS)
    hle = data["m"]["none"]["strata"]["subset"]["MEDMISHLE"]["type1_asr"]
    assert hle == {"value": None, "k": 0, "n": 0, "lo": None, "hi": None, "unit": "item",
                   "clusters": 0, "deff": 1.0}
    assert data["m"]["guard"]["paired"]["type1_asr"]["b"] == 0
    assert data["m"]["guard"]["cost"]["escalated"]["k"] == 8


def test_no_baseline_means_no_pairs() -> None:
    records = [r for r in hand_records() if r.defender == "guard"]
    result = compute_metrics(records, n_boot=10).results["m"]["guard"]
    assert result.paired == {}


def test_pairing_stays_within_model() -> None:
    # Model "x" has only type1 records; model "m"'s clean answers must not pair with them.
    stray = [make_record("x", "none", r, i) for i, r in enumerate(NONE_ROWS) if r[0] == "type1"]
    result = compute_metrics(hand_records() + stray, n_boot=10).results
    assert_prop(result["x"]["none"].metrics["type1_asr"], 0, 0)
    assert_prop(result["m"]["none"].metrics["type1_asr"], 3, 4)


def test_item_tags_fill_gaps_from_any_record() -> None:
    clean = Record(model="m", defender="none", protocol="clean", item_id="z", subset="MEDMISQA",
                   gold="A", choice="A", correct=True)
    attacked = clean.model_copy(update={"protocol": "type1", "target": "B", "choice": "B",
                                        "correct": False, "content_type": CUE})
    assert item_tags([clean, attacked])["MEDMISQA/z"] == {
        "subset": "MEDMISQA", "content_type": CUE, "provenance": "(unspecified)"}
    strata = compute_metrics([clean, attacked], n_boot=10).results["m"]["none"].strata
    assert_prop(strata["content_type"][CUE]["type1_asr"], 1, 1)


def test_is_correct_fallback() -> None:
    base = Record(model="m", defender="none", protocol="clean", item_id="z", subset="S", gold="A")
    assert not is_correct(base)
    assert is_correct(base.model_copy(update={"choice": "A"}))
    assert not is_correct(base.model_copy(update={"choice": "A", "correct": False}))
