"""Shared test fixtures. Tests never reach the network: live-API tests are marked ``live``."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments import Item

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture
def toy_item() -> Item:
    """A small hand-written item (not from the benchmark) for unit tests."""
    return Item(
        id="toy-1",
        subset="MEDMISQA",
        question="Which vitamin deficiency causes scurvy?",
        options={"A": "Vitamin A", "B": "Vitamin C", "C": "Vitamin D", "D": "Vitamin K"},
        gold="B",
        contexts={
            "A": "Scurvy is caused by a lack of vitamin A, which is needed for collagen.",
            "B": "Scurvy results from vitamin C deficiency, which impairs collagen synthesis.",
            "C": "Scurvy is a manifestation of vitamin D deficiency in adults.",
            "D": "Scurvy's bleeding is due to vitamin K deficiency.",
        },
        content_type="Cue Remapping",
        provenance="Neutral False Statement",
    )
