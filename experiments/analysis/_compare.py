"""Paired comparison of two runs of the same models and defenders on two versions of the items
(another generator, reassigned provenance): :func:`compare_records`.

Units are matched on (model, defender, protocol, item key, target). Clean accuracy pairs every
item; Type 1 ASR/TASR pair the (item, target) units answered correctly clean in *both* runs;
Type 2 ASR the items clean-correct in both. The definitions are the metrics' own
(:mod:`._units`): an unparsed answer under attack is incorrect, so it counts as a flip, as in
``metrics.json``. Differences are B - A with intervals clustered on items
(:func:`~._cluster.clustered_paired_diff`) and an item-level sign-flip test.
:func:`compare` does the same over two run folders (their planned records);
``medmis compare`` (:mod:`medmis.experiments.generate`) prints and plots these rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from medmis.experiments.benchmark import Record

from ._cluster import cluster_sign_test, clustered_paired_diff
from ._units import is_correct

UnitKey = tuple[str, str | None, int]  # (item key, target, epoch)
Outcome = Callable[[Record], bool]


@dataclass(frozen=True)
class CompareRow:
    """One metric of one (model, defender) pair: A, B, their paired difference B - A with its
    item-clustered interval, and the sign-flip test's p-value."""

    model: str
    defender: str
    metric: str
    n: int
    clusters: int
    a: float
    b: float
    diff: float
    lo: float
    hi: float
    p: float
    test: str


def _index(records: list[Record]) -> dict[tuple[str, str, str], dict[UnitKey, Record]]:
    out: dict[tuple[str, str, str], dict[UnitKey, Record]] = {}
    for r in records:
        if r.error is None:
            out.setdefault((r.model, r.defender, r.protocol), {})[(r.item_key, r.target, r.epoch)] = r
    return out


def _clean_ok(index: dict[tuple[str, str, str], dict[UnitKey, Record]], model: str,
              defender: str) -> set[tuple[str, int]]:
    """(item, epoch) answered correctly clean: an attacked unit pairs with its own epoch's."""
    return {(k, e) for (k, _, e), r in index.get((model, defender, "clean"), {}).items() if is_correct(r)}


_METRICS: list[tuple[str, str, bool, Outcome]] = [
    # name, protocol, conditioned on clean-correct in both runs, outcome per unit
    ("clean_acc", "clean", False, is_correct),
    ("type1_acc", "type1", False, is_correct),
    ("type1_asr", "type1", True, lambda r: not is_correct(r)),
    ("type1_tasr", "type1", True, lambda r: r.choice is not None and r.choice == r.target),
    ("type2_acc", "type2", False, is_correct),
    ("type2_asr", "type2", True, lambda r: not is_correct(r)),
]


def compare_records(a: list[Record], b: list[Record], *, seed: int = 0) -> list[CompareRow]:
    """Paired differences (B - A) per model, defender and metric on matched units."""
    ia, ib = _index(a), _index(b)
    rows: list[CompareRow] = []
    pairs = sorted({(m, d) for (m, d, _) in ia} & {(m, d) for (m, d, _) in ib})
    for model, defender in pairs:
        both_ok = _clean_ok(ia, model, defender) & _clean_ok(ib, model, defender)
        for name, protocol, conditioned, outcome in _METRICS:
            ua, ub = ia.get((model, defender, protocol), {}), ib.get((model, defender, protocol), {})
            keys = sorted(k for k in ua.keys() & ub.keys() if not conditioned or (k[0], k[2]) in both_ok)
            if not keys:
                continue
            x = [outcome(ua[k]) for k in keys]
            y = [outcome(ub[k]) for k in keys]
            clusters = [k[0] for k in keys]
            d = clustered_paired_diff(y, x, clusters, seed=seed)
            p, test = cluster_sign_test(y, x, clusters, seed=seed)
            rows.append(CompareRow(model, defender, name, d.n, d.clusters, sum(x) / len(x), sum(y) / len(y),
                                   d.diff, d.lo, d.hi, p, test))
    return rows


def compare(run_a: str | Path, run_b: str | Path, *, seed: int = 0) -> list[CompareRow]:
    """Paired differences (B - A) per model, defender and metric on the units both runs graded
    (the table of ``medmis compare RUN_A RUN_B``); empty when they share no model/defender.

    Args:
        run_a: The first run folder.
        run_b: The second run folder.
        seed: The seed of the intervals' resampling.

    Raises:
        FileNotFoundError: A folder has no ``records.jsonl``.
        UngradedRunError: A folder is an open-ended run (ungraded free text).
    """
    from medmis.experiments.records import keep_planned, read_records

    def planned(run_dir: str | Path) -> list[Record]:
        path = Path(run_dir) / "records.jsonl"
        if not path.exists():
            raise FileNotFoundError(f"no records.jsonl in {run_dir}")
        return keep_planned(path.parent, read_records(path))[0]

    return compare_records(planned(run_a), planned(run_b), seed=seed)
