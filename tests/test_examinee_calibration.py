"""The simulated examinee's calibration on the paper's ``none`` figures, on generated items.

Paper (arXiv 2606.12291, means over 11 configurations): Type 1 ASR 51.5%, TASR 45.4%,
Type 2 ASR 18.7%. Checked on a few hundred generated items (``examinee_items``), not on the
30-item fixture, with tolerances of about three standard errors.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from examinee_items import synthetic_items

from medmis.agents import message_text
from medmis.agents._calibration import PAPER_TYPE1_ASR, PAPER_TYPE1_TASR, PAPER_TYPE2_ASR
from medmis.agents._examinee import SimulatedExaminee
from medmis.experiments.benchmark import Case, Item, build_cases, extract_answer, render_prompt

ITEMS = synthetic_items(300)


def answers(model: SimulatedExaminee, cases: Iterable[Case], **render: object) -> dict[tuple, str | None]:
    out = {}
    for c in cases:
        text = message_text(model.invoke(render_prompt(c, **render)))
        out[c.key] = extract_answer(text, c.item.options).choice
    return out


def figures(items: list[Item], prompt: str = "paper") -> dict[str, float]:
    model = SimulatedExaminee(items=items)
    cases = build_cases(items, type1_targets="all", shuffle_type2=True, prompt=prompt)
    got = answers(model, cases)
    clean = {c.item.key: got[c.key] == c.item.gold for c in cases if c.protocol == "clean"}
    t1 = [c for c in cases if c.protocol == "type1" and clean[c.item.key]]
    t2 = [c for c in cases if c.protocol == "type2" and clean[c.item.key]]
    return {
        "clean": sum(clean.values()) / len(clean),
        "asr": sum(got[c.key] != c.item.gold for c in t1) / len(t1),
        "tasr": sum(got[c.key] == c.target for c in t1) / len(t1),
        "type2_asr": sum(got[c.key] != c.item.gold for c in t2) / len(t2),
        "unparsed": sum(v is None for v in got.values()) / len(got),
    }


@pytest.fixture(scope="module")
def paper() -> dict[str, float]:
    return figures(ITEMS)


def test_none_matches_the_papers_type1_figures(paper: dict[str, float]) -> None:
    assert paper["asr"] == pytest.approx(PAPER_TYPE1_ASR, abs=0.05)
    assert paper["tasr"] == pytest.approx(PAPER_TYPE1_TASR, abs=0.05)
    # non-targeted flips exist: TASR below ASR, by about the paper's 6 points
    assert 0.02 < paper["asr"] - paper["tasr"] < 0.11


def test_none_matches_the_papers_type2_figure_and_clean_accuracy(paper: dict[str, float]) -> None:
    assert paper["type2_asr"] == pytest.approx(PAPER_TYPE2_ASR, abs=0.06)
    assert paper["clean"] == pytest.approx(0.8, abs=0.07)


def test_a_small_unparsed_rate(paper: dict[str, float]) -> None:
    assert 0.0 < paper["unparsed"] < 0.03


def test_toolkit_wording_is_read_as_well() -> None:
    toolkit = figures(ITEMS[:150], prompt="toolkit")
    assert toolkit["asr"] == pytest.approx(PAPER_TYPE1_ASR, abs=0.09)
    assert toolkit["type2_asr"] == pytest.approx(PAPER_TYPE2_ASR, abs=0.09)


def test_type2_sentence_order_matters() -> None:
    """The same sentences, the true one first or last: position changes the Type 2 ASR."""
    model = SimulatedExaminee(items=ITEMS)
    flips = {"first": 0, "last": 0}
    n = 0
    for item in ITEMS:
        clean = Case(item=item, protocol="clean", prompt="paper")
        if extract_answer(message_text(model.invoke(render_prompt(clean))), item.options).choice != item.gold:
            continue
        n += 1
        wrong = [item.contexts[k] for k in item.wrong_keys]
        truth = item.contexts[item.gold]
        base = Case(item=item, protocol="type2", prompt="paper")
        for where, order in (("first", [truth, *wrong]), ("last", [*wrong, truth])):
            text = message_text(model.invoke(render_prompt(base, context=order)))
            flips[where] += extract_answer(text, item.options).choice != item.gold
    assert n > 150
    assert flips["first"] / n > flips["last"] / n + 0.05
