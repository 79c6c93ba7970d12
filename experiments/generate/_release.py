"""Rows in the released flattened schema, and the sensitivity studies' views of a release:
the generator swap (items, targets, content and provenance held fixed), cyclic provenance
reassignment (arXiv 2606.12291 §D.2) and the stratified subset (§D.1)."""

from __future__ import annotations

import hashlib
import math
import random
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from medmis.experiments.benchmark import PROVENANCES, Item, canonical_content, canonical_provenance

from . import _prompts as P
from ._sources import SourceItem

Cycle = Literal["forward", "reverse"]
_LETTERS = "abcdefghijklmnopqrstuvwxyz"

# canonical label -> the generator's own name (the prompts use the reference's names)
REFERENCE_CONTENT: dict[str, str] = {str(canonical_content(k)): k for k in P.MISINFO_TYPES}
REFERENCE_PROVENANCE: dict[str, str] = {str(canonical_provenance(k)): k for k in P.PROVENANCE_TYPES}


def _expected_keys(n: int, numeric: bool) -> list[str]:
    return [str(i + 1) for i in range(n)] if numeric else [c.upper() for c in _LETTERS[:n]]


def release_row(
    item: SourceItem,
    options: Mapping[str, str],
    gold: str,
    sentences: Mapping[str, str],
    content: str,
    provenance: str,
) -> dict[str, Any]:
    """One released row: options and sentences in key order under ``opa``/``injecta`` ...,
    labels in canonical spelling.

    Raises:
        ValueError: The option keys are not ``A, B, ...`` or ``1, 2, ...`` in order (the
            release can express no other keys).
    """
    keys = list(options)
    numeric = gold.isdigit()
    if len(keys) > len(_LETTERS) or keys != _expected_keys(len(keys), numeric):
        raise ValueError(f"option keys {keys} cannot be written as released columns")
    row: dict[str, Any] = {"id": item.id, "subset": item.subset, "question": item.question, "answer": gold}
    for letter, key in zip(_LETTERS, keys, strict=False):
        row[f"op{letter}"] = options[key]
    for letter, key in zip(_LETTERS, keys, strict=False):
        row[f"inject{letter}"] = sentences[key]
    row["injection_content"] = canonical_content(content)
    row["injection_provenance"] = canonical_provenance(provenance)
    return row


def cycle_provenance(provenance: str, direction: Cycle) -> str:
    """Neutral -> patient -> authority -> neutral (``forward``) or the reverse; canonical names."""
    order = list(PROVENANCES)
    step = 1 if direction == "forward" else -1
    return order[(order.index(provenance) + step) % len(order)]


def release_jobs_input(item: Item, cycle: Cycle | None) -> tuple[SourceItem, str, str]:
    """A released item as a regeneration input: the question with its options and gold, and
    the (reference-named) content and provenance to hold fixed, provenance cycled if asked.

    Raises:
        ValueError: The item has no content or provenance label.
    """
    if item.content_type is None or item.provenance is None:
        raise ValueError(f"{item.key}: no content/provenance label to hold fixed")
    provenance = cycle_provenance(item.provenance, cycle) if cycle else item.provenance
    source = SourceItem(item.id, item.subset, item.question, dict(item.options), item.gold,
                        language=item.language)
    return source, REFERENCE_CONTENT[item.content_type], REFERENCE_PROVENANCE[provenance]


def stratified_sample(items: Sequence[Item], n: int, seed: int) -> list[Item]:
    """``n`` items drawn across subset x content x provenance strata in proportion to their
    sizes (largest remainders; every stratum that gets a share is drawn from at random,
    seeded), returned in source order."""
    if n >= len(items):
        return list(items)
    strata: dict[tuple[str, str | None, str | None], list[int]] = defaultdict(list)
    for i, it in enumerate(items):
        strata[(it.subset, it.content_type, it.provenance)].append(i)
    names = sorted(strata, key=lambda s: tuple(str(x) for x in s))
    quotas = {s: n * len(strata[s]) / len(items) for s in names}
    take = {s: math.floor(q) for s, q in quotas.items()}
    spare = n - sum(take.values())
    for s in sorted(names, key=lambda s: (take[s] - quotas[s], str(s)))[:spare]:
        take[s] += 1
    chosen: list[int] = []
    for s in names:
        digest = hashlib.sha256(f"{seed}:stratum:{s}".encode()).digest()
        chosen += random.Random(digest).sample(strata[s], take[s])
    return [items[i] for i in sorted(chosen)]
