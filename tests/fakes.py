"""The defender test doubles live in ``defenses.testing`` (public, for plug-in authors too);
:func:`available` turns defender names into test parameters this installation can run."""

from collections.abc import Iterable
from typing import Any

import pytest

from medmis.defenses import defender_unavailable
from medmis.defenses.testing import (
    SCURVY_CORPUS,
    FakeDoc,
    FakeExaminee,
    FakeToolset,
    check_defender,
    toy_case,
    toy_item,
)

__all__ = [
    "SCURVY_CORPUS",
    "FakeDoc",
    "FakeExaminee",
    "FakeToolset",
    "available",
    "check_defender",
    "toy_case",
    "toy_item",
]


def available(names: Iterable[str]) -> list[Any]:
    """Each defender name as a test parameter, skipped (with the reason) when this installation
    lacks what it needs, e.g. ``trustrag`` without the ``trustrag`` extra: the README's test
    command installs only ``.[test]``."""
    return [
        pytest.param(n, marks=pytest.mark.skipif(bool(why := defender_unavailable(n)), reason=f"{n}: {why}"))
        for n in names
    ]
