"""Identical answers to a control: for every (model, defender), the share of shared graded
cases with context answered exactly like each control defender (the verdict's "behaves like a
control" rule, :mod:`._verdict`), from records or from the columnar ``records`` view."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from medmis.experiments.benchmark import Record

from ._units import Proportion, item_key

if TYPE_CHECKING:
    import duckdb

CONTEXT_PROTOCOLS = ("type1", "type2")
"""Identical-answer shares are taken over these: clean cases carry no context to ignore."""


def same_answers(records: Iterable[Record], controls: Iterable[str]) -> dict[tuple[str, str], dict[str, Proportion]]:
    """For every (model, defender), the share of shared graded cases with context (Type 1 and
    Type 2) answered exactly like each control defender of the same model (same choice,
    including no choice), with a 95% interval clustered on items."""
    records = list(records)
    control_set = set(controls)
    choices: dict[tuple[str, str], dict[tuple[object, ...], str | None]] = {}
    for r in records:
        if r.error is None and r.protocol in CONTEXT_PROTOCOLS:
            key = (item_key(r), r.protocol, r.target or "", r.epoch)
            choices.setdefault((r.model, r.defender), {})[key] = r.choice
    cells = sorted({(r.model, r.defender) for r in records if r.error is None})
    out: dict[tuple[str, str], dict[str, Proportion]] = {}
    for model, defender in cells:
        mine = choices.get((model, defender), {})
        for control in sorted(control_set):
            if control == defender or (model, control) not in cells:
                continue
            theirs = choices.get((model, control), {})
            shared = sorted(mine.keys() & theirs.keys(), key=lambda k: (str(k[0]), str(k[1]), str(k[2]), k[3]))
            out.setdefault((model, defender), {})[control] = _share(
                [mine[k] == theirs[k] for k in shared], [str(k[0]) for k in shared])
    return out


def _share(outcomes: Sequence[bool], items: Sequence[str]) -> Proportion:
    if not outcomes:
        return Proportion.of(0, 0, unit="case", clusters=0)
    return Proportion.clustered(outcomes, items, unit="case")


def same_answers_sql(con: duckdb.DuckDBPyConnection,
                     controls: Iterable[str]) -> dict[tuple[str, str], dict[str, Proportion]]:
    """:func:`same_answers` over the ``records`` view of ``con`` (one join, no object per record)."""
    import numpy as np

    from ._cluster import clustered_from_totals

    control_list = sorted(set(controls))
    if not control_list:
        return {}
    marks = ", ".join("?" for _ in control_list)
    protocols = ", ".join(f"'{p}'" for p in CONTEXT_PROTOCOLS)
    con.execute("CREATE OR REPLACE TEMP TABLE __graded AS SELECT model, defender, protocol, item_key, "
                "coalesce(target, '') AS t, epoch, choice FROM records WHERE error IS NULL")
    try:
        cells = con.execute(f"""
            WITH cells AS (SELECT DISTINCT model, defender FROM __graded)
            SELECT a.model, a.defender, c.defender FROM cells a JOIN cells c
              ON a.model = c.model AND c.defender IN ({marks}) AND c.defender <> a.defender
            ORDER BY 1, 2, 3""", control_list).fetchall()
        # per item: identical answers and shared cases, items in key order within each cell
        arr = con.execute(f"""
            SELECT a.model, a.defender, c.defender AS control, a.item_key,
              count(*) FILTER (WHERE a.choice IS NOT DISTINCT FROM c.choice) AS k, count(*) AS n
            FROM __graded a JOIN __graded c ON a.model = c.model AND a.protocol = c.protocol
              AND a.item_key = c.item_key AND a.t = c.t AND a.epoch = c.epoch
            WHERE c.defender IN ({marks}) AND c.defender <> a.defender
              AND a.protocol IN ({protocols})
            GROUP BY ALL ORDER BY 1, 2, 3, 4""", control_list).fetchnumpy()
    finally:
        con.execute("DROP TABLE IF EXISTS __graded")
    keys = list(zip(arr["model"], arr["defender"], arr["control"], strict=True))
    ks = np.asarray(arr["k"], dtype=np.float64)
    ns = np.asarray(arr["n"], dtype=np.float64)
    spans: dict[tuple[str, str, str], list[int]] = {}
    for i, key in enumerate(keys):
        spans.setdefault(key, [i, i])[1] = i + 1
    out: dict[tuple[str, str], dict[str, Proportion]] = {}
    for model, defender, control in cells:
        span = spans.get((model, defender, control))
        if span is None:
            prop = Proportion.of(0, 0, unit="case", clusters=0)
        else:
            lo, hi = span
            totals, sizes = ks[lo:hi], ns[lo:hi]
            if len(sizes) == int(sizes.sum()):
                prop = Proportion.of(int(totals.sum()), int(sizes.sum()), unit="case")
            else:
                cp = clustered_from_totals(totals, sizes)
                prop = Proportion(value=cp.value, k=cp.k, n=cp.n, lo=cp.lo, hi=cp.hi, unit="case",
                                  clusters=cp.clusters, deff=cp.deff)
        out.setdefault((model, defender), {})[control] = prop
    return out
