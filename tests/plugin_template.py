"""Template: copy this file into your plug-in's test suite and set DEFENDER.

It runs your registered defender through the same contract as every built-in one
(clean / type1 / type2; working, failing and absent web tools; traced, costed answers;
provider errors stop the case), giving it a ``CaseView`` per case as a run does: question,
options and context sentences, never the gold key or the target. Needs
``pip install medmis[test]`` in your environment. The tests are plain functions (the contract
runs in ``asyncio.run``), so they need no pytest-asyncio and no pytest configuration.
"""

from __future__ import annotations

import asyncio

from medmis.defenses import get_spec
from medmis.defenses.testing import check_defender

DEFENDER = "second_opinion"  # the name you passed to @defender(...)
OPTIONS: dict[str, object] = {}  # options to test with (defaults when empty)


def test_defender_is_registered_through_the_entry_point() -> None:
    spec = get_spec(DEFENDER)
    assert spec.description, "give your defender a description (shown by `medmis defenders`)"


def test_defender_meets_the_contract() -> None:
    answers = asyncio.run(check_defender(DEFENDER, OPTIONS))
    assert answers
