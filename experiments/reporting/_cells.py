"""The cell formatter of the delivery-sensitivity section.

It reads blocks of ``metrics.json`` (``{"value", "k", "n", "lo", "hi"}``), not the typed metrics.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def pct(block: Mapping[str, Any] | None) -> str:
    """A proportion block as ``"12.5% [8.1, 18.7]"`` (with its interval if any); "—" if undefined."""
    if not block or block.get("value") is None:
        return "—"
    lo, hi = block.get("lo"), block.get("hi")
    ci = f" [{100 * lo:.1f}, {100 * hi:.1f}]" if lo is not None and hi is not None else ""
    return f"{100 * block['value']:.1f}%{ci}"
