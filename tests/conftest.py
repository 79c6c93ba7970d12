"""Shared test fixtures. Tests never reach the network: live-API tests are marked ``live``."""

from __future__ import annotations

from pathlib import Path

import pytest

from defenses import testing as defenses_testing
from experiments import Item

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture
def toy_item() -> Item:
    """A small hand-written item (not from the benchmark) for unit tests."""
    return defenses_testing.toy_item()
