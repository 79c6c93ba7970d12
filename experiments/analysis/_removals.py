"""What a sanitizing defender removed, judged with the case labels it never saw.

``sanitize`` records the positions of the context sentences it removed
(``extra["removed"]``); each trace row also holds the delivered context with its labels
(``truthful`` per sentence). Set side by side on Type 2 cases (one true sentence among false
ones), they give the two rates that say whether removal helps: the share of false sentences
removed and the share of true sentences removed. Only rows that declare ``removed`` count, so
the same function serves any defender that records removals.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any


def removal_rates(rows: Iterable[Mapping[str, Any]], protocol: str = "type2") -> dict[str, dict[str, float | int]]:
    """Per defender label: sentences seen and removed, false and true, and the two rates.

    Args:
        rows: Trace rows (``traces/*.jsonl``): ``defender``, ``protocol``, ``context`` (each
            with ``truthful``) and ``extra["removed"]`` (positions in that context).
        protocol: The protocol counted (Type 2 by default: it mixes true and false sentences).

    Returns:
        ``{label: {"cases", "false", "false_removed", "true", "true_removed",
        "false_removed_rate", "true_removed_rate"}}`` (a rate is NaN with nothing to count).
    """
    out: dict[str, dict[str, float | int]] = {}
    for row in rows:
        extra = row.get("extra") or {}
        removed = extra.get("removed") if isinstance(extra, Mapping) else None
        if row.get("protocol") != protocol or not isinstance(removed, list) or row.get("error"):
            continue
        cell = out.setdefault(str(row.get("defender")), {"cases": 0, "false": 0, "false_removed": 0,
                                                         "true": 0, "true_removed": 0})
        cell["cases"] += 1
        gone = set(removed)
        for i, sentence in enumerate(row.get("context") or []):
            kind = "true" if sentence.get("truthful") else "false"
            cell[kind] += 1
            cell[f"{kind}_removed"] += int(i in gone)
    for cell in out.values():
        for kind in ("false", "true"):
            cell[f"{kind}_removed_rate"] = cell[f"{kind}_removed"] / cell[kind] if cell[kind] else float("nan")
    return out


def run_removal_rates(run_dir: str | Path, protocol: str = "type2") -> dict[str, dict[str, float | int]]:
    """:func:`removal_rates` over every trace file of a run folder."""
    rows: list[dict[str, Any]] = []
    for path in sorted(Path(run_dir, "traces").glob("*.jsonl")):
        rows.extend(json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    return removal_rates(rows, protocol)
