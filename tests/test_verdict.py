"""The verdict rules on hand-built runs: ties, intervals that include zero, rate gaps, controls."""

from __future__ import annotations

from medmis.experiments import Record, Usage
from medmis.experiments.analysis import compute_metrics
from medmis.experiments.analysis._verdict import decide, same_answers, usd


def run(flips: dict[str, int], *, items: int = 80, tokens: dict[str, int] | None = None,
        errors: dict[str, int] | None = None, blind: set[str] = frozenset()) -> list[Record]:  # type: ignore[assignment]
    """One model; every defender correct on every clean question; ``flips[d]`` Type 1 cases
    flipped (the first ones), ``errors[d]`` Type 1 cases errored (the last ones). Defenders in
    ``blind`` answer "A" everywhere, like a context-blind control."""
    out: list[Record] = []
    for d, k in flips.items():
        cost = Usage(input_tokens=(tokens or {}).get(d, 100), output_tokens=10)
        n_err = (errors or {}).get(d, 0)
        for i in range(items):
            base = {"model": "m", "defender": d, "item_id": f"q{i}", "subset": "MEDMISQA",
                    "gold": "A", "usage": cost}
            out.append(Record(protocol="clean", choice="A", correct=True, **base))
            choice = "A" if d in blind else ("B" if i < k else "A")
            err = "timeout" if i >= items - n_err else None
            out.append(Record(protocol="type1", target="B", choice=None if err else choice,
                              correct=None if err else choice == "A", error=err, **base))
    return out


def test_ties_are_named_together_cheapest_first() -> None:
    records = run({"none": 40, "claim_verify": 0, "escalate": 0, "warning": 38},
                  tokens={"claim_verify": 900, "escalate": 450})
    v = decide(compute_metrics(records, n_boot=300))
    (mv,) = v.models
    assert mv.winners == ["escalate", "claim_verify"]  # tied at 0/80, escalate costs half
    assert not mv.findings["warning"].better  # -2 points: the interval includes zero


def test_dollars_order_ties_when_prices_are_known() -> None:
    records = run({"none": 40, "a_def": 0, "b_def": 0}, tokens={"a_def": 500, "b_def": 100})
    report = compute_metrics(records, n_boot=300)
    v = decide(report, prices={"m": (1.0, 100.0)})
    assert v.models[0].winners == ["b_def", "a_def"]
    cost = report.results["m"]["a_def"].cost
    dollars = usd(cost, (1.0, 100.0))
    assert dollars["usd"] == (160 * 500 * 1.0 + 160 * 10 * 100.0) / 1e6
    assert dollars["usd_per_1k_cases"] == 1000 * dollars["usd"] / 160  # type: ignore[operator]


def test_interval_including_zero_names_nobody() -> None:
    v = decide(compute_metrics(run({"none": 10, "warning": 7}), n_boot=300))
    assert v.models[0].winners == []
    assert not v.models[0].findings["warning"].better


def test_error_gap_is_stated_and_controls_never_win() -> None:
    records = run({"none": 40, "flaky": 2, "context_blind": 0}, errors={"flaky": 30},
                  blind={"context_blind"})
    report = compute_metrics(records, n_boot=300)
    v = decide(report, controls={"context_blind"},
               agreement=same_answers(records, {"context_blind"}))
    mv = v.models[0]
    assert "error_rate" in mv.findings["flaky"].rate_gaps
    assert mv.findings["flaky"].rate_gaps["error_rate"] > 0.02
    assert "context_blind" not in mv.winners
    assert mv.winners == ["flaky"]


def test_a_defender_identical_to_the_control_is_not_a_winner() -> None:
    records = run({"none": 40, "filter": 0, "context_blind": 0}, blind={"filter", "context_blind"})
    agreement = same_answers(records, {"context_blind"})
    assert agreement[("m", "filter")]["context_blind"].k == agreement[("m", "filter")]["context_blind"].n
    v = decide(compute_metrics(records, n_boot=300), controls={"context_blind"}, agreement=agreement)
    assert v.models[0].findings["filter"].equivalent_to == ["context_blind"]
    assert v.models[0].winners == []


def test_incomplete_run_draws_no_verdict() -> None:
    v = decide(compute_metrics(run({"none": 40, "escalate": 0}), n_boot=100),
               incomplete="stopped by the budget cap")
    assert v.incomplete and v.models == []
