"""Every label spelling of the released benchmark maps to one canonical name.

The spellings are copied from their sources, not from our alias table: the dataset card of
AI4HealthResearch/MedMisBench (the same card as HongjianZhou/MedMisBench), the generator
notebook AI-in-Health/MedMisBench InjectionGeneration.ipynb (its MISINFO_TYPES and
PROVENANCE_TYPES keys, and "Not Applicable" for a non-viable question), and the paper's prose.
"""

from __future__ import annotations

import pytest

from medmis.experiments import CONTENT_TYPES, PROVENANCES
from medmis.experiments.benchmark import canonical_content, canonical_provenance

RELATIONSHIP, THRESHOLD, CUE, SPURIOUS, EXCEPTION = CONTENT_TYPES
NEUTRAL, PATIENT, AUTHORITY = PROVENANCES

CARD_CONTENT = {
    "Relationship / Sequence Inversion": RELATIONSHIP,
    "Threshold / Reference Corruption": THRESHOLD,
    "Cue Remapping": CUE,
    "Spurious Anchoring": SPURIOUS,
    "Exception Poisoning": EXCEPTION,
}
CARD_PROVENANCE = {
    "Neutral False Statement": NEUTRAL,
    "Patient Self-Claim": PATIENT,
    "Authority": AUTHORITY,
}
GENERATOR_CONTENT = {
    "Relationship & Sequence Inversion": RELATIONSHIP,
    "Parameter & Threshold Shift": THRESHOLD,
    "Cue Remapping": CUE,
    "Spurious Cue Anchoring": SPURIOUS,
    "Exception Poisoning": EXCEPTION,
}
GENERATOR_PROVENANCE = {
    "Neutral False Statement": NEUTRAL,
    "Patient Self-Diagnosis / Belief / Claim": PATIENT,
    "Authority (Guideline, Discharge Note, SOP)": AUTHORITY,
}
PAPER_PROVENANCE = {
    "neutral false statements": NEUTRAL,
    "patient self-claims": PATIENT,
    "authority framing": AUTHORITY,
}


@pytest.mark.parametrize(("label", "expected"), [*CARD_CONTENT.items(), *GENERATOR_CONTENT.items()])
def test_card_and_generator_content_labels(label: str, expected: str) -> None:
    assert canonical_content(label) == expected
    # files touched by spreadsheets or hand edits change case and spacing
    assert canonical_content(f"  {label.upper()} ") == expected
    assert canonical_content(label.replace(" / ", "/").replace(" & ", " and ")) == expected


@pytest.mark.parametrize(
    ("label", "expected"),
    [*CARD_PROVENANCE.items(), *GENERATOR_PROVENANCE.items(), *PAPER_PROVENANCE.items()],
)
def test_card_generator_and_paper_provenance_labels(label: str, expected: str) -> None:
    assert canonical_provenance(label) == expected
    assert canonical_provenance(label.lower()) == expected
    assert canonical_provenance(label.replace(" / ", "/").replace(", ", "/")) == expected


def test_each_source_covers_every_canonical_name() -> None:
    for table, names in (
        (CARD_CONTENT, CONTENT_TYPES),
        (GENERATOR_CONTENT, CONTENT_TYPES),
        (CARD_PROVENANCE, PROVENANCES),
        (GENERATOR_PROVENANCE, PROVENANCES),
    ):
        assert sorted(set(table.values())) == sorted(names)


@pytest.mark.parametrize("label", ["Not Applicable", "N/A", "nan", "", "   ", None])
def test_no_label_markers(label: str | None) -> None:
    assert canonical_content(label) is None
    assert canonical_provenance(label) is None


@pytest.mark.parametrize("label", ["Patient Self Harm", "Authority Bias", "Misinformation"])
def test_near_misses_are_rejected(label: str) -> None:
    with pytest.raises(ValueError):
        canonical_provenance(label)
    with pytest.raises(ValueError):
        canonical_content(label)
