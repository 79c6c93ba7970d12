"""``medmis data validate``: check a source and print its counts."""

from __future__ import annotations

import sys
from typing import TextIO

from ._data import load_dataset
from ._dataset import DataError, Dataset
from ._types import SUBSETS


def _count_table(ds: Dataset) -> list[tuple[str, str, str, str]]:
    rows: list[tuple[str, str, str, str]] = []
    counts = ds.counts()
    order = {name: i for i, name in enumerate(SUBSETS)}
    for sub in sorted(counts, key=lambda s: (order.get(s, len(order)), s)):
        total = 0
        for content in sorted(counts[sub]):
            for prov in sorted(counts[sub][content]):
                n = counts[sub][content][prov]
                total += n
                rows.append((sub, content, prov, str(n)))
        rows.append((sub, "(all)", "(all)", str(total)))
    rows.append(("TOTAL", "", "", str(len(ds.items))))
    return rows


def validate_command(
    path: str,
    *,
    subset: str | None = None,
    hub_repo: str | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Validate a data source and print its counts (backs ``medmis data validate PATH``).

    Prints a table of item counts per subset x content type x provenance with per-subset and
    grand totals to ``out``; every problem is printed as one ``file:line: id=X: field:
    message`` line to ``err``, every warning (a row loaded with a part left out) as the same
    line prefixed with ``WARNING``, each kind followed by a one-line count.

    Args:
        path: Anything ``load_dataset`` accepts.
        subset: Passed to ``load_dataset``.
        hub_repo: Passed to ``load_dataset`` (the repository for ``hub:`` addresses).
        out: Stream for the table (default ``sys.stdout``).
        err: Stream for problems (default ``sys.stderr``).

    Returns:
        0 when every row loads (warnings included), 2 (a data error, as for every command)
        when any row has an error or the source cannot be read at all.
    """
    out = out if out is not None else sys.stdout
    err = err if err is not None else sys.stderr
    try:
        ds = load_dataset(path, subset=subset, mode="skip", hub_repo=hub_repo)
    except DataError as exc:
        print(f"error: {exc.summary()}", file=err)
        return 2

    header = ("subset", "content type", "provenance", "items")
    table = [header, *_count_table(ds)]
    widths = [max(len(r[i]) for r in table) for i in range(4)]
    print(f"{ds.source}  sha256={ds.sha256}", file=out)
    for r in table:
        print(
            "  ".join(c.ljust(w) for c, w in zip(r[:3], widths[:3], strict=True))
            + "  "
            + r[3].rjust(widths[3]),
            file=out,
        )
    if ds.ids_assigned:
        print(
            f"{ds.ids_assigned} row(s) without an id were named <SUBSET>-<index> "
            "(0-based row index within the subset)",
            file=out,
        )
    if ds.warnings:
        for warning in ds.warnings:
            print(f"WARNING {warning}", file=err)
        rows = len({(w.file, w.line) for w in ds.warnings})
        print(
            f"WARNING: {len(ds.warnings)} warning(s) in {rows} loaded row(s); a wrong option "
            "without a false sentence is never a Type 1 target",
            file=err,
        )
    if ds.issues:
        for issue in ds.issues:
            print(str(issue), file=err)
        bad_rows = len({(i.file, i.line) for i in ds.issues})
        print(
            f"{len(ds.issues)} problem(s) in {bad_rows} row(s); {len(ds)} valid item(s)", file=err
        )
        return 2
    warned = f", {len(ds.warnings)} warning(s)" if ds.warnings else ""
    print(f"OK: {len(ds)} valid item(s){warned}", file=out)
    return 0
