"""Sampling keys and defaults, kept free of heavy imports so the command line can name them
without loading the analysis stack."""

from __future__ import annotations

STRATA: dict[str, str] = {
    "subset": "benchmark subset",
    "content": "content corruption",
    "provenance": "provenance framing",
    "model": "model",
    "defender": "defender",
    "outcome": "flipped / held / clean_wrong / no_clean",
}
"""Keys ``--stratify`` accepts."""

DEFAULT_STRATIFY = ("subset", "content", "provenance")
DEFAULT_REVIEWERS = ("reviewer-1", "reviewer-2")
