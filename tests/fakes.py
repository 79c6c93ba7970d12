"""The defender test doubles live in ``defenses.testing`` (public, for plug-in authors too)."""

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
    "check_defender",
    "toy_case",
    "toy_item",
]
