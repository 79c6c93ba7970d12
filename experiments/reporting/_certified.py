"""The report's "Certified answers" section: how many answers carry a robustness certificate.

A defender that certifies its answers (``robustrag``, Xiang et al. 2024, arXiv 2405.15556)
writes ``certified`` (at its ``corruption_size`` k'), ``certified_k`` (the largest k' it holds
for) and ``corruption_size`` in each record's ``extra``. This section counts them per model,
defender and protocol, and per poison share for the share runs of a poisoned grid, beside the
paper's *certifiable robust accuracy*: the share of cases whose answer is both correct and
certified (the reference's ``certify_cnt``). Records of other defenders carry no such field and
are left out; a case that ended in an error counts as neither certified nor correct, as the
report's failure rates count it.

Proportions and intervals are :class:`~medmis.experiments.analysis.Proportion` over the
records' units (item, target), clustered by item as every rate of the report is.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from medmis.experiments.analysis import (
    Proportion,
    is_correct,
    item_key,
    planned_shares,
    share_label,
)
from medmis.experiments.benchmark import Record

from ._format import fmt_ci, md_table

CERTIFIED_KEY = "certified_k"
_PROTOCOL_ORDER = {"clean": 0, "type1": 1, "type2": 2}


def _certifying(run_dir: Path) -> list[Record]:
    from medmis.experiments.records import read_records

    path = run_dir / "records.jsonl"
    try:
        if f'"{CERTIFIED_KEY}"' not in path.read_text(encoding="utf-8"):
            return []  # the common case: no certifying defender in the run, nothing to parse
    except OSError:
        return []
    by_defender: dict[tuple[str, str], list[Record]] = defaultdict(list)
    for r in read_records(path):
        by_defender[(r.model, r.defender)].append(r)
    # a defender certifies when any of its completed records carries the field; its error
    # records stay in (they have no extra) and count as not certified
    return [r for rs in by_defender.values() if any(CERTIFIED_KEY in x.extra for x in rs) for r in rs]


def _rows(records: Sequence[Record], lead: Sequence[str] = ()) -> list[list[str]]:
    groups: dict[tuple[str, str, str], list[Record]] = defaultdict(list)
    for r in records:
        groups[(r.model, r.defender, r.protocol)].append(r)
    rows = []
    for (model, defender, protocol), rs in sorted(
        groups.items(), key=lambda kv: (kv[0][0], kv[0][1], _PROTOCOL_ORDER.get(kv[0][2], 9))
    ):
        clusters = [item_key(r) for r in rs]
        certified = [r.error is None and bool(r.extra.get("certified")) for r in rs]
        robust = [c and is_correct(r) for c, r in zip(certified, rs, strict=True)]
        ks = sorted({int(r.extra["corruption_size"]) for r in rs if "corruption_size" in r.extra})
        p_cert = Proportion.clustered(certified, clusters)
        p_rob = Proportion.clustered(robust, clusters)
        rows.append([
            *lead, model, defender, protocol, ", ".join(map(str, ks)) or "—",
            _cell(p_cert), _cell(p_rob),
        ])
    return rows


def _cell(p: Proportion) -> str:
    # as the headline table writes a rate: interval, then the counts
    return f"{fmt_ci(p)} ({p.k}/{p.n})" if p.value is not None else "—"


_HEADER = ["model", "defender", "protocol", "k'", "certified at k'", "certified and correct"]


def certified_markdown(run_dir: str | Path) -> str:
    """The section's markdown for a run folder (and its poison share runs); "" when no record
    of the run carries a certificate."""
    run_dir = Path(run_dir)
    main = _certifying(run_dir)
    shares = [(share, _certifying(folder)) for share, folder in planned_shares(run_dir)[0]]
    shares = [(s, rs) for s, rs in shares if rs]
    if not main and not shares:
        return ""
    out = [
        "## Certified answers",
        "",
        "Answers certified not to change while an attacker controls at most k' of the passages "
        "the defender answered from (the record's `extra.certified`, at the defender's "
        "`corruption_size` k'), and the paper's certifiable robust accuracy: correct *and* "
        "certified (Xiang et al. 2024, arXiv 2405.15556). A certificate is a property of the "
        "votes, not of the examinee: with the simulated examinee it shows how often the vote "
        "margin is wide enough, not how a real model behaves. A case without passages (clean, "
        "no retrieval) is never certified.",
    ]
    if main:
        out += ["", md_table(_HEADER, _rows(main))]
    if shares:
        rows = [row for share, rs in shares for row in _rows(rs, lead=[share_label(share)])]
        out += ["", "Per poison share (the share runs under `poison/`):", "",
                md_table(["share", *_HEADER], rows)]
    return "\n".join(out)
