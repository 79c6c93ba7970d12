"""Cell formatters shared by the HTML page and the delivery-sensitivity section.

Both read blocks of ``metrics.json`` (``{"value", "k", "n", "lo", "hi"}``), not the typed metrics.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any


def pct(block: Mapping[str, Any] | None) -> str:
    """A proportion block as ``"12.5% [8.1, 18.7]"`` (with its interval if any); "—" if undefined."""
    if not block or block.get("value") is None:
        return "—"
    lo, hi = block.get("lo"), block.get("hi")
    ci = f" [{100 * lo:.1f}, {100 * hi:.1f}]" if lo is not None and hi is not None else ""
    return f"{100 * block['value']:.1f}%{ci}"


def pct_n(block: Mapping[str, Any] | None) -> str:
    """A proportion with its count on a second line: ``"12.5% [8.1, 18.7]\n3/24"``."""
    text = pct(block)
    if text == "—" or not block:
        return text
    return f"{text}\n{block.get('k')}/{block.get('n')}"


def html_table(header: list[str], rows: list[list[str]], cls: str = "") -> str:
    """An HTML table with every header and cell escaped (cells are untrusted text)."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
