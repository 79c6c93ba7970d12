"""One definition of "cited" (issue 30, item 3).

What an answer rests on (``extra.sources``) is decided by one rule for every defender
(:func:`medmis.graphs.answer_sources` over the evidence the defender declared its final
answer call was given); a poisoned run's ``poison.cited`` reads those sources alone; a page
that was only visited is never shown or counted as cited, in the case browsers or the exports.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_poison_run import SAMPLE, records, run_args, traces, write_pages

from medmis.experiments.cli import main
from medmis.experiments.reporting import agent_view
from medmis.graphs import answer_sources
from medmis.tools import url_key

OPTIONS = {"A": "Thiamine", "B": "Vitamin C", "C": "Vitamin D", "D": "Iron"}
PAGE = "https://ref.example/scurvy"
OTHER = "https://other.example/rickets"


# -- the rule ------------------------------------------------------------------------------------


def test_a_source_is_named_quoted_or_supports_the_chosen_option() -> None:
    evidence = [
        {"url": PAGE, "text": "Scurvy is caused by a lack of vitamin C. It presents with bleeding gums."},
        {"url": OTHER, "text": "Rickets is a disease of children. It presents with bowed legs."},
    ]
    # content support: the page naming the chosen option is a source, the other is not
    assert answer_sources("Final answer: B", "B", OPTIONS, evidence) == [{"url": PAGE, "by": "supports"}]
    # a quotation from a page makes it a source, whatever the option
    quoted = 'As one page says, "Rickets is a disease of children". Final answer: B'
    assert answer_sources(quoted, "B", OPTIONS, evidence) == [
        {"url": PAGE, "by": "supports"}, {"url": OTHER, "by": "quoted"}]
    # a URL the answer names is a source, declared or not (named first)
    named = f"See {OTHER}. Final answer: D"
    assert answer_sources(named, "D", OPTIONS, evidence) == [{"url": OTHER, "by": "named"}]
    # a page negating the option, no choice, or nothing declared: no source
    negated = [{"url": PAGE, "text": "Scurvy is not treated with vitamin D."}]
    assert answer_sources("Final answer: C", "C", OPTIONS, negated) == []
    assert answer_sources("I am not sure.", None, OPTIONS, evidence) == []
    assert answer_sources("Final answer: B", "B", OPTIONS, None) == []


# -- the case browsers -----------------------------------------------------------------------------


def test_a_visited_page_is_never_shown_as_cited() -> None:
    visit = {"kind": "tool", "name": "visit_web", "input": {"url": PAGE},
             "output": {"url": PAGE, "final_url": PAGE, "text": "Scurvy ..."}}
    # a trace written before `sources`: its `cited_urls` fell back to the visited pages while
    # the citation check said "uncited"; the browsers list the page as visited, not cited
    old = {"steps": [visit], "extra": {"visited": [PAGE], "cited_urls": [PAGE],
                                       "verification": {"verdict": "uncited", "cited": []}}}
    shown = agent_view(old)
    assert shown["visits"] == [{"url": PAGE, "error": None}] and shown["cited"] == []
    # with sources, exactly those are cited, with how the rule found them
    new = {"steps": [visit], "extra": {"visited": [PAGE, OTHER], "sources": [{"url": OTHER, "by": "named"}]}}
    assert agent_view(new)["cited"] == [{"url": OTHER, "by": "named"}]


# -- one rule for every defender, through the harness ---------------------------------------------


DEFENDERS = "search_agent,search_agent[preset=paper],claim_verify,escalate,prior_reconcile,isolate_vote,none"


@pytest.fixture(scope="module")
def poisoned_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("cited")
    pages = write_pages(tmp / "pages.jsonl")
    out = tmp / "run"
    args = run_args(out, "--poison", f"share=1.0,pages={pages}", "--search", "local", defender=DEFENDERS, limit="6")
    assert main(args) == 0
    return out


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    return (row["defender"], row["protocol"], row["item_id"], row["target"])


def test_cited_is_one_rule_over_every_defenders_declared_evidence(poisoned_run: Path) -> None:
    from medmis.experiments.benchmark._data import load_dataset

    items = {i.id: i for i in load_dataset(SAMPLE).items}
    poisoned = {url_key(json.loads(line)["url"]) for line in
                (poisoned_run.parent / "pages.jsonl").read_text(encoding="utf-8").splitlines()}
    rows = {_key(r): r for r in records(poisoned_run)}
    declared: dict[str, int] = {}
    cited: dict[str, int] = {}
    for trace in traces(poisoned_run):
        row = rows[_key(trace)]
        steps = [s for s in trace["steps"] if s["kind"] == "node" and s["name"] == "sources"]
        assert len(steps) == 1, (row["defender"], "one sources step per answer")
        evidence = steps[0]["input"]["evidence"]
        # the recorded sources are the rule's, recomputed from the trace alone, for every defender
        again = answer_sources(trace["raw"], trace["choice"], items[trace["item_id"]].options, evidence)
        assert row["extra"]["sources"] == trace["extra"]["sources"] == steps[0]["output"] == again
        if row["defender"] == "escalate" and evidence:  # it answers from verdicts only when it escalates
            assert row["extra"]["escalated"]
        if row["protocol"] != "type1":
            continue
        urls = {url_key(s["url"]) for s in row["extra"]["sources"]}
        assert row["poison"]["cited"] == bool(urls & poisoned)
        declared[row["defender"]] = declared.get(row["defender"], 0) + bool(evidence)
        cited[row["defender"]] = cited.get(row["defender"], 0) + row["poison"]["cited"]
        # a poisoned page visited but not a source is not cited
        if row["poison"]["visited"] and not urls & poisoned:
            assert not row["poison"]["cited"]
    # the searching defenders declare what their final call was given; the others declare nothing
    for name in ("search_agent", "search_agent[preset=paper]", "claim_verify"):
        assert declared[name] > 0 and cited[name] > 0, (name, declared, cited)
    for name in ("none", "prior_reconcile", "isolate_vote"):
        assert declared[name] == 0 and cited[name] == 0


def test_exports_carry_the_one_definition(poisoned_run: Path, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    rows = {_key(r): r for r in records(poisoned_run)}
    assert main(["export", "parquet", str(poisoned_run), "--out", str(tmp_path / "pq")]) == 0
    exported = pq.read_table(tmp_path / "pq" / "data" / "records" / "train.parquet").to_pylist()
    for row in exported:
        record = rows[_key(row)]
        assert row["poison_cited"] == record["poison"]["cited"]
        assert row["poison_visited"] == record["poison"]["visited"]
        extra = json.loads(row["extra"]) if isinstance(row["extra"], str) else row["extra"]
        assert extra["sources"] == record["extra"]["sources"] and "cited_urls" not in extra
    pytest.importorskip("inspect_ai")
    from inspect_ai.log import read_eval_log

    assert main(["export", "inspect", str(poisoned_run), "--out", str(tmp_path / "logs")]) == 0
    seen = 0
    for path in sorted((tmp_path / "logs").glob("*.eval")):
        log = read_eval_log(str(path))
        for sample in log.samples or []:
            meta = sample.metadata
            record = rows[(log.eval.solver, meta["protocol"], meta["item_id"], meta["target"])]
            assert meta["poison"] == record["poison"]
            assert meta["extra"]["sources"] == record["extra"]["sources"]
            seen += 1
    assert seen == len(rows)
