"""What a resumed run and its outcome need from ``records.jsonl``: keys, progress figures,
record count and error texts, read columnar (never one Python object per record)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from medmis.experiments.records import (
    KEY,
    PARQUET_NAME,
    Outside,
    Plan,
    connect,
    has_plan,
    load_records_table,
    parquet_is_fresh,
    records_view,
    restrict_view,
)

from ._config import clean_key

if TYPE_CHECKING:
    import duckdb

    from medmis.defenses._base import Defender
    from medmis.experiments.benchmark._types import Case, Item
    from medmis.experiments.records import ProtocolName

    from ._config import RunConfig


class CaseJob(NamedTuple):
    """One case to run: the model (a name of the run's ``models``), the defender, the case."""

    model: str
    defender: Defender
    case: Case


@dataclass(frozen=True)
class CasePlan:
    """The cases a run is to have: every planned case key for every (model, defender).

    ``cases`` are ``(protocol, item_key, target)`` in the run's order; the grid is
    ``models`` x ``defenders`` (labels). Each case is run ``epochs`` times (``--epochs``):
    a case index ``ci`` of :attr:`ResumeState.missing` is case ``ci % len(cases)`` in epoch
    ``ci // len(cases)``: within each phase (clean, then the rest) the cases run epoch by
    epoch, so a run stopped early has the earlier epochs rather than a few items sampled many
    times.
    """

    models: Sequence[str]
    defenders: Sequence[str]
    cases: Sequence[tuple[str, str, str | None]]
    epochs: int = 1


@dataclass
class ResumeState:
    """What a resumed run needs from the records already written.

    ``missing`` are the planned ``(model index, defender index, case index)`` still to run,
    in plan order: keys without a record, and with ``retry_errors`` keys whose last record
    is an error. The remaining fields are the live-progress figures over the records kept;
    ``clean`` (the clean answers, for the live flip rate) is filled only when something is
    missing.
    """

    missing: list[tuple[int, int, int]] = field(default_factory=list)
    records: int = 0
    errors: int = 0
    graded: dict[str, list[int]] = field(default_factory=dict)
    flips: list[int] = field(default_factory=lambda: [0, 0])
    input_tokens: int = 0
    output_tokens: int = 0
    by_model_tokens: dict[str, list[int]] = field(default_factory=dict)
    clean: dict[tuple[str, str, str], bool] = field(default_factory=dict)
    outside: Outside = field(default_factory=Outside)
    """Records outside the folder's plan (left out of every figure)."""

    def apply(self, stats: Any, clean_state: dict[tuple[str, str, str], bool]) -> None:
        """Add these figures to the runner's ``RunStats`` and clean-answer map."""
        stats.errors += self.errors
        for proto, (k, n) in self.graded.items():
            stats.graded[proto][0] += k
            stats.graded[proto][1] += n
        stats.flips[0] += self.flips[0]
        stats.flips[1] += self.flips[1]
        stats.input_tokens += self.input_tokens
        stats.output_tokens += self.output_tokens
        for model, (tin, tout) in self.by_model_tokens.items():
            tok = stats.by_model_tokens.setdefault(model, [0, 0])
            tok[0] += tin
            tok[1] += tout
        clean_state.update(self.clean)


_RESUME_COLUMNS = (*KEY, "correct", "error", "usage")


def resume_state(path: str | Path, plan: CasePlan, *, retry_errors: bool = False,
                 keep: Plan | Path | None = None) -> ResumeState:
    """The planned cases still to run and the progress figures of ``records.jsonl``.

    Reads only the columns needed (from the Parquet compaction when it is fresh) and lets
    DuckDB answer which planned keys have no record (an anti-join), so that a resume with
    nothing to do builds no Python object per key.

    Args:
        path: The run's ``records.jsonl`` (absent or empty: nothing done).
        plan: The run's planned cases.
        retry_errors: Count keys whose last record is an error as missing.
        keep: The run folder's plan (``._plan``: a ``Plan`` or the folder holding
            ``plan.json``): records outside it are left out of the figures and counted in
            ``outside``.
    """
    p = Path(path)
    state = ResumeState()
    if not p.exists() or p.stat().st_size == 0:
        # a fresh folder: every planned key is missing, in plan order (no DuckDB, no numpy)
        n_d, n_c = len(plan.defenders), len(plan.cases) * plan.epochs
        state.missing = [(mi, di, ci) for mi in range(len(plan.models)) for di in range(n_d) for ci in range(n_c)]
        return state
    con = connect()
    try:
        parquet = p.with_name(PARQUET_NAME)
        name = "records" if keep is None else "records__all"
        if parquet_is_fresh(con, parquet, p):
            con.execute("SET memory_limit='512MB'")  # scans and one join: no table to hold
            records_view(con, parquet, name)
        else:
            load_records_table(con, p, table=name, columns=_RESUME_COLUMNS)
        if keep is not None:
            state.outside = restrict_view(con, keep, name, "records")
        done_if = "true" if not retry_errors else "error IS NULL"
        con.execute(f"CREATE TEMP VIEW done AS SELECT * FROM records WHERE {done_if}")
        state.missing = _missing(con, plan)
        count = con.execute("SELECT count(*) FROM records").fetchone()
        state.records = int(count[0]) if count else 0
        _progress_figures(con, state, clean_map=bool(state.missing))
    finally:
        con.close()
    return state


def _missing(con: duckdb.DuckDBPyConnection, plan: CasePlan) -> list[tuple[int, int, int]]:
    n_m, n_d, n_c = len(plan.models), len(plan.defenders), len(plan.cases)
    if not n_m or not n_d or not n_c:
        return []
    # each epoch repeats the plan: case index ci of epoch e is e * n_c + ci
    protocols, items, targets = zip(*plan.cases, strict=True)
    # a target is an option key, never "": coalescing lets a hash join match clean/type2.
    # The plan goes in as list parameters (unnest), not Arrow tables: pyarrow's array
    # conversion imports pandas, more than half a second of every run's start. The answer
    # comes back as tuples, not numpy arrays: numpy's import is more start-up a run need not pay.
    con.execute(
        "CREATE TEMP TABLE __plan AS SELECT (e.epoch * $4 + c.ci)::INTEGER AS ci, c.protocol, c.item_key, c.t, "
        "e.epoch::INTEGER AS epoch FROM (SELECT (generate_subscripts($1, 1) - 1)::INTEGER AS ci, "
        "unnest($1) AS protocol, unnest($2) AS item_key, unnest($3) AS t) c CROSS JOIN range($5) e(epoch)",
        [list(protocols), list(items), [t or "" for t in targets], n_c, plan.epochs])
    con.execute(
        "CREATE TEMP TABLE __grid AS SELECT (generate_subscripts($1, 1) - 1)::INTEGER AS cell, "
        "unnest($1) AS model, unnest($2) AS defender",
        [[m for m in plan.models for _ in plan.defenders], [d for _ in plan.models for d in plan.defenders]])
    try:
        # every planned (cell, case) without a record: one anti-join, no string per key in Python
        rows = con.execute("""
            SELECT g.cell, p.ci FROM __grid g CROSS JOIN __plan p
            ANTI JOIN done d ON d.model = g.model AND d.defender = g.defender
             AND d.protocol = p.protocol AND d.item_key = p.item_key AND coalesce(d.target, '') = p.t
             AND d.epoch = p.epoch
            ORDER BY g.cell, p.ci""").fetchall()
    finally:
        con.execute("DROP TABLE __plan")
        con.execute("DROP TABLE __grid")
    # ascending: model, then defender, then plan order
    return [(cell // n_d, cell % n_d, ci) for cell, ci in rows]


def _progress_figures(con: duckdb.DuckDBPyConnection, state: ResumeState, *, clean_map: bool) -> None:
    for model, tin, tout in con.execute(
            "SELECT model, sum(input_tokens), sum(output_tokens) FROM done GROUP BY model "
            "ORDER BY min(pos)").fetchall():
        state.by_model_tokens[model] = [int(tin), int(tout)]
        state.input_tokens += int(tin)
        state.output_tokens += int(tout)
    errors = con.execute("SELECT count(*) FROM done WHERE error IS NOT NULL").fetchone()
    state.errors = int(errors[0]) if errors else 0
    for proto, k, n in con.execute(
            "SELECT protocol, sum(coalesce(correct, false)::INT), count(*) FROM done "
            "WHERE error IS NULL GROUP BY protocol").fetchall():
        state.graded[proto] = [int(k), int(n)]
    if clean_map:  # only a run with work to do updates the live flip rate
        for model, defender, item, epoch, ok in con.execute(
                "SELECT model, defender, item_key, epoch, coalesce(correct, false) FROM done "
                "WHERE error IS NULL AND protocol = 'clean' ORDER BY pos").fetchall():
            state.clean[(model, defender, clean_key(item, epoch))] = bool(ok)
    flips = con.execute("""
        SELECT sum((NOT coalesce(t.correct, false))::INT), count(*) FROM done t
        JOIN (SELECT model, defender, item_key, epoch, coalesce(correct, false) AS ok FROM done
              WHERE error IS NULL AND protocol = 'clean') c
        USING (model, defender, item_key, epoch)
        WHERE t.error IS NULL AND t.protocol = 'type1' AND c.ok""").fetchone()
    if flips and flips[1]:
        state.flips = [int(flips[0] or 0), int(flips[1])]


def error_texts(path: str | Path) -> tuple[int, list[str]]:
    """Distinct record keys and the error text of every key whose latest record is an error
    (what the run's outcome needs), without a Python object per record."""
    p = Path(path)
    if not p.exists() or p.stat().st_size == 0:
        return 0, []
    con = connect()
    try:
        parquet = p.with_name(PARQUET_NAME)
        keep = p.parent if has_plan(p.parent) else None  # records outside the plan are no case of the run
        name = "records" if keep is None else "records__all"
        if parquet_is_fresh(con, parquet, p):
            records_view(con, parquet, name)
        else:
            load_records_table(con, p, table=name, columns=(*KEY, "error"))
        if keep is not None:
            restrict_view(con, keep, name, "records")
        row = con.execute("SELECT count(*) FROM records").fetchone()
        n = int(row[0]) if row else 0
        errors = [str(e) for (e,) in con.execute("SELECT error FROM records WHERE error IS NOT NULL").fetchall()]
    finally:
        con.close()
    return n, errors


def jobs_for_missing(config: RunConfig, defenders: Sequence[Defender], missing: list[tuple[int, int, int]],
                     planned: list[tuple[int, ProtocolName, str | None]],
                     items: Sequence[Item]) -> list[list[CaseJob]]:
    """The missing cases (model, defender, planned-case indexes) as jobs, clean first; an
    item's cases are built once, when needed."""
    from medmis.experiments.benchmark import cases_for_item

    built: dict[int, dict[tuple[str, str | None], Case]] = {}
    todo: list[list[CaseJob]] = [[], []]
    for mi, di, cei in missing:
        epoch, ci = divmod(cei, len(planned))
        i, protocol, target = planned[ci]
        by_key = built.get(i)
        if by_key is None:
            by_key = built[i] = {(c.protocol, c.target): c for c in cases_for_item(
                items[i], config.protocols, seed=config.seed, type1_targets=config.type1_targets,
                shuffle_type2=config.shuffle_type2, prompt=config.prompt,
                answer_format=config.answer_format)}
        case = by_key[(protocol, target)]
        todo[0 if protocol == "clean" else 1].append(
            CaseJob(config.models[mi], defenders[di], case.model_copy(update={"epoch": epoch}) if epoch else case))
    return todo
