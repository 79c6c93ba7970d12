"""Label tables: every spelling of a content type, provenance or subset maps to one canonical
name (the names in ``_types``: ``CONTENT_TYPES``, ``PROVENANCES``, ``SUBSETS``)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from ._types import CONTENT_TYPES, PROVENANCES, SUBSETS


def _label_key(text: str) -> str:
    # Compare labels on their words only, so "A & B", "A/B", "A / B", "a and b" and
    # "Self-Diagnosis" vs "SelfDiagnosis" all meet on the same key.
    words = [w for w in re.findall(r"[a-z0-9]+", text.lower()) if w != "and"]
    return "".join(words)


def _alias_table(canonical: Iterable[str], aliases: Mapping[str, str]) -> dict[str, str]:
    table = {_label_key(name): name for name in canonical}
    for alias, name in aliases.items():
        table[_label_key(alias)] = name
    return table


# Where the spellings come from (keep this the only alias table in the toolkit):
# - the dataset card of AI4HealthResearch/MedMisBench (mirrored as HongjianZhou/MedMisBench)
#   lists the content types by their canonical names and the provenances as "Neutral False
#   Statement", "Patient Self-Claim" and "Authority";
# - the generator notebook (AI-in-Health/MedMisBench, InjectionGeneration.ipynb) writes the
#   keys of its MISINFO_TYPES and PROVENANCE_TYPES tables, and "Not Applicable" for a
#   question it found no viable corruption for;
# - the paper's prose uses plurals ("patient self-claims", "authority framing").
# Comparison is on words only (see _label_key), so case, "&"/"and", "/" and "-" variants of
# every entry below are accepted too.
_CONTENT = _alias_table(
    CONTENT_TYPES,
    {
        # generator
        "Relationship & Sequence Inversion": "Relationship / Sequence Inversion",
        "Parameter & Threshold Shift": "Threshold / Reference Corruption",
        "Spurious Cue Anchoring": "Spurious Anchoring",
        # short forms seen in hand-made files and the paper's figures
        "Relationship Inversion": "Relationship / Sequence Inversion",
        "Sequence Inversion": "Relationship / Sequence Inversion",
        "Threshold Shift": "Threshold / Reference Corruption",
        "Threshold Corruption": "Threshold / Reference Corruption",
        "Reference Corruption": "Threshold / Reference Corruption",
        "Cue Remap": "Cue Remapping",
        "Exception": "Exception Poisoning",
    },
)
_PATIENT = "Patient Self-Diagnosis / Belief / Claim"
_AUTHORITY = "Authority (Guideline / Discharge Note / SOP)"
_PROVENANCE = _alias_table(
    PROVENANCES,
    {
        # dataset card
        "Patient Self-Claim": _PATIENT,
        "Authority": _AUTHORITY,
        # generator
        "Authority (Guideline, Discharge Note, SOP)": _AUTHORITY,
        # paper prose
        "Neutral False Statements": "Neutral False Statement",
        "Patient Self-Claims": _PATIENT,
        "Authority Framing": _AUTHORITY,
        # short forms
        "Neutral": "Neutral False Statement",
        "Neutral Statement": "Neutral False Statement",
        "Patient": _PATIENT,
        "Patient Self-Diagnosis": _PATIENT,
        "Patient Claim": _PATIENT,
        "Patient Belief": _PATIENT,
    },
)
_SUBSET = _alias_table(SUBSETS, {s.removeprefix("MEDMIS"): s for s in SUBSETS})

# Values that mean "no label": the generator's marker for a question it did not corrupt, the
# reference evaluation notebook's default for a missing column, and pandas' text for NaN.
_NO_LABEL = frozenset(_label_key(t) for t in ("Not Applicable", "N/A", "NA", "nan", "None"))


def _canonical(label: str | None, table: Mapping[str, str], kind: str) -> str | None:
    if label is None or not str(label).strip() or _label_key(str(label)) in _NO_LABEL:
        return None
    found = table.get(_label_key(str(label)))
    if found is None:
        raise ValueError(f"unknown {kind} label {label!r}")
    return found


def canonical_content(label: str | None) -> str | None:
    """Map a content-corruption label (canonical name, alias or spelling variant) to its
    canonical name.

    Args:
        label: e.g. ``"Parameter & Threshold Shift"`` or ``"cue remapping"``.

    Returns:
        The canonical name from ``CONTENT_TYPES``, or None when the label is blank or says
        there is none (``"Not Applicable"``, ``"N/A"``, ``"nan"``).

    Raises:
        ValueError: The label is not a known content type or alias.
    """
    return _canonical(label, _CONTENT, "content type")


def canonical_provenance(label: str | None) -> str | None:
    """Map a provenance label (canonical name, alias or spelling variant) to its canonical
    name.

    Args:
        label: e.g. ``"Patient Self-Claim"`` (dataset card) or ``"Authority (Guideline,
            Discharge Note, SOP)"`` (generator).

    Returns:
        The canonical name from ``PROVENANCES``, or None when the label is blank or says
        there is none (``"Not Applicable"``, ``"N/A"``, ``"nan"``).

    Raises:
        ValueError: The label is not a known provenance or alias.
    """
    return _canonical(label, _PROVENANCE, "provenance")


def canonical_subset(name: str) -> str:
    """Canonical subset name (``"medmis-hle"``, ``"HLE"`` -> ``"MEDMISHLE"``); names that
    match no known subset are returned stripped, so custom data sets keep their own name."""
    return _SUBSET.get(_label_key(name), name.strip())


def subset_from_path(path: Path) -> str | None:
    """The subset named by a file's stem or one of its folders (``medmishle.jsonl``,
    ``MEDMISJOURNEY/part-0.jsonl``), or None."""
    # Longest names first so that a name containing another can never be mis-read.
    for part in (path.stem, *(p.name for p in path.parents)):
        key = re.sub(r"[^A-Z0-9]", "", part.upper())
        for name in sorted(SUBSETS, key=len, reverse=True):
            if name in key:
                return name
    return None
