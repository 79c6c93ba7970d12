"""Template: copy this file into your plug-in's test suite and set DEFENDER.

It runs your registered defender through the same contract as every built-in one
(clean / type1 / type2; working, failing and absent web tools; traced, costed answers;
provider errors stop the case), giving it a ``CaseView`` per case as a run does: question,
options and context sentences, never the gold key or the target. Needs
``pip install medmis[test]`` in your environment. The tests are plain functions (the contract
runs in ``asyncio.run``), so they need no pytest-asyncio and no pytest configuration; the
``medmis_*`` fixtures come from medmis's pytest plug-in, registered when medmis is installed.
"""

from __future__ import annotations

import asyncio

from medmis.defenses import DefenderContext, create_defender, get_spec
from medmis.testing import check_defender

DEFENDER = "second_opinion"  # the name you passed to @defender(...)
OPTIONS: dict[str, object] = {}  # options to test with (defaults when empty)


def test_defender_is_registered_through_the_entry_point() -> None:
    spec = get_spec(DEFENDER)
    assert spec.description, "give your defender a description (shown by `medmis defenders`)"


def test_defender_meets_the_contract() -> None:
    answers = asyncio.run(check_defender(DEFENDER, OPTIONS))
    assert answers


def test_defender_answers_a_view_offline(medmis_case_view, medmis_scripted_model, medmis_no_network) -> None:
    # one type1 case of the toy item, a scripted examinee, no tools and no network
    view = medmis_case_view("type1")
    model = medmis_scripted_model()
    ctx = DefenderContext(model=model, model_spec="mock/fake", tools=None)
    answer = asyncio.run(create_defender(DEFENDER, OPTIONS)(view, ctx))
    assert answer.error is None and answer.choice in view.options
    assert answer.llm_calls == len(model.calls) > 0
