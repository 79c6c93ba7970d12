"""Delivery sensitivity: Type 2 ASR in option order vs a seeded shuffle of the sentence order.

The shuffled re-run lives in ``DIR/type2_shuffled``; :func:`delivery_sensitivity` pairs its rows
with the main run's, and the rows render as a markdown section for ``report.md``
(:func:`sensitivity_markdown`), which report.html renders too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from medmis.tools import json_file

from ._cells import pct

SHUFFLED_DIR = "type2_shuffled"

_SENSITIVITY_NOTE = (
    "Same items and defenders; only the order of the Type 2 sentences changes (seeded). "
    "Δ is shuffled minus option order, in points, with an unpaired Newcombe 95% interval; "
    "a large Δ means the result depends on where the true sentence sits."
)


def _load_metrics(run_dir: Path) -> dict[str, Any] | None:
    """A run's ``metrics.json``, computed from its records when the file is missing."""
    path = run_dir / "metrics.json"
    if path.exists():
        try:
            data = json_file(path)
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None
    if not (run_dir / "records.jsonl").exists():
        return None
    # A sub-run that was never reported (write_report=False): compute, do not write.
    from medmis.experiments.analysis import compute_run_metrics

    return compute_run_metrics(run_dir).to_json_dict()


def _defined(block: Any) -> dict[str, Any] | None:
    if not isinstance(block, Mapping) or block.get("value") is None or not block.get("n"):
        return None
    return dict(block)


def _newcombe(p1: Mapping[str, Any], p2: Mapping[str, Any]) -> tuple[float, float, float] | None:
    """``p1 - p2`` with Newcombe's hybrid-score 95% CI built from the two Wilson intervals."""
    try:
        v1, l1, h1 = float(p1["value"]), float(p1["lo"]), float(p1["hi"])
        v2, l2, h2 = float(p2["value"]), float(p2["lo"]), float(p2["hi"])
    except (KeyError, TypeError, ValueError):
        return None
    d = v1 - v2
    return d, d - math.hypot(v1 - l1, h2 - v2), d + math.hypot(h1 - v1, v2 - l2)


def delivery_sensitivity(run_dir: Path) -> list[dict[str, Any]]:
    """Type 2 ASR in option order vs a shuffled order (``run_dir/type2_shuffled``).

    Args:
        run_dir: The main run directory; its ``type2_shuffled`` sub-run is the re-run of
            type2 with a seeded shuffle of the sentence order. A missing ``metrics.json`` in
            either is computed from that run's records.

    Returns:
        One row per model × defender present in both runs, in the main run's order, with
        ``model``, ``defender``, ``original`` and ``shuffled`` (the ``type2_asr`` blocks
        ``{"value", "k", "n", "lo", "hi"}``, or None when undefined) and ``diff``,
        ``diff_lo``, ``diff_hi`` (shuffled minus original as proportions, with an unpaired
        Newcombe 95% CI; None unless both are defined). Empty without a shuffled sub-run.
    """
    run_dir = Path(run_dir)
    if not (run_dir / SHUFFLED_DIR).is_dir():
        return []
    main = _load_metrics(run_dir)
    shuffled = _load_metrics(run_dir / SHUFFLED_DIR)
    if not main or not shuffled:
        return []
    rows = []
    for model, defenders in main.items():
        if not isinstance(defenders, Mapping):
            continue
        for defender, block in defenders.items():
            other = (shuffled.get(model) or {}).get(defender)
            if not isinstance(block, Mapping) or not isinstance(other, Mapping):
                continue
            original = _defined(block.get("type2_asr"))
            shuf = _defined(other.get("type2_asr"))
            diff = _newcombe(shuf, original) if original and shuf else None
            rows.append({"model": model, "defender": defender, "original": original,
                         "shuffled": shuf, "diff": diff[0] if diff else None,
                         "diff_lo": diff[1] if diff else None,
                         "diff_hi": diff[2] if diff else None})
    return rows


def _fmt_diff(row: Mapping[str, Any]) -> str:
    if row.get("diff") is None or row.get("diff_lo") is None or row.get("diff_hi") is None:
        return "—"
    # + 0.0 turns -0.0 into 0.0 so that no change never prints as "-0.0"
    d, lo, hi = (100 * float(row[k]) + 0.0 for k in ("diff", "diff_lo", "diff_hi"))
    return f"{d:+.1f} [{lo:+.1f}, {hi:+.1f}]"


def _pct_n(block: Mapping[str, Any] | None) -> str:
    text = pct(block)
    return text if text == "—" or block is None else f"{text} ({block['k']}/{block['n']})"


def sensitivity_markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    """The delivery-sensitivity section for ``report.md`` (heading, note, table).

    Args:
        rows: Output of :func:`delivery_sensitivity`.

    Returns:
        Markdown text, or "" when there are no rows (no shuffled sub-run).
    """
    if not rows:
        return ""

    def code(text: Any) -> str:
        return "`" + str(text).replace("|", "\\|") + "`"

    lines = ["## Delivery sensitivity: Type 2 with shuffled sentence order", "",
             _SENSITIVITY_NOTE, "",
             "| Model | Defender | T2 ASR (option order) | T2 ASR (shuffled) | Δ (pts) [95% CI] |",
             "| --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {code(r['model'])} | {code(r['defender'])} | {_pct_n(r.get('original'))} "
                     f"| {_pct_n(r.get('shuffled'))} | {_fmt_diff(r)} |")
    return "\n".join(lines)
