"""The multiple-choice run of the same items beside an open-ended one (``medmis report OPEN
--mcq-run MCQ``, ``mcq_run`` in an ablation's ``[grading]`` table).

No new statistic: each figure is the MCQ definition on each run (:func:`compute_run_metrics` on
the MCQ folder, :func:`compute_metrics` on the jury-graded open-ended records, as the open-ended
section already does), put side by side:

- ``clean``: ``clean_acc`` of the MCQ run beside the share of clean answers scored correct (jury
  score at or above the threshold);
- ``type1`` / ``type2``: ``type1_asr`` / ``type2_asr`` of each run.

Beside them, counts only, per model x defender x protocol: the answers both runs graded (same
record key, neither an error nor unparsed), and how many of them each run got right (the 2 x 2
table of the open-ended reading against the MCQ one).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from medmis.experiments.records import Record

BESIDE_KEY = "mcq_beside"
"""The key of ``open_ended.json`` that holds the MCQ run's figures beside the open-ended ones."""

FIGURES = {"clean": "clean_acc", "type1": "type1_asr", "type2": "type2_asr"}
"""Per protocol, the metric shown for both runs (the same definition on each)."""


def _cells(records: Iterable[Record]) -> tuple[set[str], set[str], set[str]]:
    records = list(records)
    return {r.model for r in records}, {r.defender for r in records}, {r.item_key for r in records}


def _names(values: Iterable[str], limit: int = 3) -> str:
    values = sorted(values)
    return ", ".join(values[:limit]) + (f" (+{len(values) - limit} more)" if len(values) > limit else "")


def check_mcq_run(open_run: str | Path, mcq_run: str | Path, open_records: list[Record] | None = None) -> list[Record]:
    """The MCQ run's records, after checking it can stand beside ``open_run``: a run folder, of
    multiple-choice answers, with the same models and items, and every defender of the
    open-ended run (it may hold more, e.g. the multiple-choice-only ones the open protocol skips).

    Raises:
        ConfigError: One line naming what does not match (exit 2).
    """
    from medmis.experiments.records import answer_format_of, read_records
    from medmis.tools import ConfigError

    mcq = Path(mcq_run)
    where = f"--mcq-run {mcq}"
    if not (mcq / "records.jsonl").is_file():
        raise ConfigError(f"{where}: no run folder here (no records.jsonl)")
    if answer_format_of(mcq) != "mcq":
        raise ConfigError(f"{where}: not a multiple-choice run (its answers are free text)")
    if answer_format_of(open_run) != "open":
        raise ConfigError(f"{where}: {open_run} is not an open-ended run; the MCQ run stands beside one")
    if open_records is None:
        open_records = read_records(Path(open_run) / "records.jsonl")
    mcq_records = read_records(mcq / "records.jsonl")
    (om, od, oi), (mm, md, mi) = _cells(open_records), _cells(mcq_records)
    if om != mm:
        raise ConfigError(f"{where}: other models ({_names(mm ^ om)} in one run only)")
    if not od <= md:
        raise ConfigError(f"{where}: defenders of the open-ended run missing from it: {_names(od - md)}")
    if oi != mi:
        raise ConfigError(f"{where}: other items ({len(oi ^ mi)} in one run only, e.g. {_names(oi ^ mi, 2)})")
    return mcq_records


def agreement(graded: Iterable[Record], mcq: Iterable[Record]) -> dict[tuple[str, str, str], dict[str, int]]:
    """Per (model, defender, protocol): the answers both runs graded (same record key, each with a
    ``correct``), and the counts of the 2 x 2 table ``open_*`` x ``mcq_*`` of who got them right.
    ``graded``: the open-ended records as :func:`graded_records` reads them."""
    def by_key(records: Iterable[Record]) -> dict[Any, bool]:
        return {r.key: bool(r.correct) for r in records if r.error is None and r.correct is not None}

    a, b = by_key(graded), by_key(mcq)
    out: dict[tuple[str, str, str], Counter[str]] = {}
    for key in sorted(a.keys() & b.keys(), key=str):
        c = out.setdefault((key[0], key[1], key[2]), Counter())
        c["both_graded"] += 1
        c[("open_correct" if a[key] else "open_incorrect") + ("_mcq_correct" if b[key] else "_mcq_incorrect")] += 1
    names = ("both_graded", "open_correct_mcq_correct", "open_correct_mcq_incorrect",
             "open_incorrect_mcq_correct", "open_incorrect_mcq_incorrect")
    return {cell: {n: c[n] for n in names} for cell, c in out.items()}


def mcq_beside(open_report: Any, graded: list[Record], mcq_run: str | Path, mcq_records: list[Record], *,
               baseline: str = "none", seed: int = 0) -> dict[str, Any]:
    """The ``mcq_beside`` block of ``open_ended.json``: ``{"run": MCQ folder, "metrics": {model:
    {defender: {protocol: {"metric", "open", "mcq", "agreement"}}}}}`` (``open`` and ``mcq`` are
    ``metrics.json`` blocks; ``agreement`` the counts of :func:`agreement`, None when no answer
    was graded by both)."""
    from medmis.experiments.analysis import compute_run_metrics

    mcq_report = compute_run_metrics(mcq_run, baseline=baseline, seed=seed)
    pairs = agreement(graded, mcq_records)
    out: dict[str, dict[str, Any]] = {}
    for model, defenders in open_report.results.items():
        for defender, dm in defenders.items():
            other = mcq_report.results.get(model, {}).get(defender)
            cell: dict[str, Any] = {}
            for protocol, metric in FIGURES.items():
                mine = dm.metrics.get(metric)
                theirs = other.metrics.get(metric) if other is not None else None
                counts = pairs.get((model, defender, protocol))
                if (mine is None or mine.n == 0) and counts is None:
                    continue
                cell[protocol] = {"metric": metric, "open": mine.model_dump() if mine is not None else None,
                                  "mcq": theirs.model_dump() if theirs is not None else None, "agreement": counts}
            out.setdefault(model, {})[defender] = cell
    return {"run": str(mcq_run), "metrics": out}
