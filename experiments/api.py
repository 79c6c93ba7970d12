"""The public Python API: run a grid, load a run folder, compare two runs, load the release.

Everything here is re-exported from :mod:`medmis.experiments` (``from medmis.experiments import
run, load_run, compare, load_dataset``). The CLI commands do the same work: ``run`` is
``medmis run`` without the argument parsing, :class:`RunFolder` reads what ``medmis report``
wrote, ``compare`` is the table of ``medmis compare``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from medmis.tools import json_file

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

    from medmis.experiments.analysis import CompareRow
    from medmis.experiments.harness._config import RunConfig, RunResult


def run(config: RunConfig) -> RunResult:
    """Run (or resume) ``config``'s grid of models x defenders x protocols; blocks until done.

    With ``config.write_report`` (the default) the report files are (re)written afterwards, as
    ``medmis run`` does; ``RunResult.report`` maps their names to paths. Call it outside a
    running event loop (inside one, ``await run_experiment(config)`` instead).
    """
    from medmis.experiments.harness import run_experiment
    from medmis.experiments.reporting import write_report

    result = asyncio.run(run_experiment(config, argv=["medmis.experiments.run"]))
    if config.write_report and not (result.nothing_to_do and (result.out / "report.md").exists()):
        result.report = write_report(result.out)
    return result


@dataclass
class RunFolder:
    """A run folder opened by :func:`load_run`.

    ``records`` is a DuckDB relation over the run's records (its plan's records, one row per
    case key, the last line of a key winning: what the metrics count); ``arrow()`` is the same
    as an Arrow table. ``metrics``, ``verdict`` and ``manifest`` are the parsed
    ``metrics.json``, ``verdict.json`` and ``manifest.json`` (empty when the file is absent:
    ``medmis report DIR`` writes the first two).
    """

    path: Path
    manifest: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    verdict: dict[str, Any] = field(default_factory=dict)
    connection: duckdb.DuckDBPyConnection | None = field(default=None, repr=False)

    @property
    def records(self) -> duckdb.DuckDBPyRelation:
        assert self.connection is not None, "closed"
        return self.connection.table("records")

    def arrow(self) -> pa.Table:
        """The records as an Arrow table."""
        return self.records.to_arrow_table()

    def sql(self, query: str) -> duckdb.DuckDBPyRelation:
        """Run ``query`` on the folder's connection (the records are the view ``records``)."""
        assert self.connection is not None, "closed"
        return self.connection.sql(query)

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None

    def __enter__(self) -> RunFolder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _json(path: Path) -> dict[str, Any]:
    return json_file(path) if path.exists() else {}


def load_run(run_dir: str | Path) -> RunFolder:
    """Open a run folder: its records (DuckDB / Arrow), metrics, verdict and manifest.

    Raises:
        FileNotFoundError: If ``run_dir/records.jsonl`` does not exist.
    """
    from medmis.experiments.records import connect, planned_records_view

    d = Path(run_dir)
    if not (d / "records.jsonl").exists():
        raise FileNotFoundError(f"no records.jsonl in {d}")
    con = connect()
    try:
        planned_records_view(con, d)
    except BaseException:
        con.close()
        raise
    return RunFolder(d, _json(d / "manifest.json"), _json(d / "metrics.json"),
                     _json(d / "verdict.json"), con)


def compare(run_a: str | Path, run_b: str | Path, *, seed: int = 0) -> list[CompareRow]:
    """Paired differences (B - A) per model, defender and metric on the units both runs graded
    (the table of ``medmis compare RUN_A RUN_B``); empty when they share no model/defender."""
    from medmis.experiments.analysis import compare_records
    from medmis.experiments.records import keep_planned, read_records

    def planned(run_dir: str | Path) -> list[Any]:
        path = Path(run_dir) / "records.jsonl"
        if not path.exists():
            raise FileNotFoundError(f"no records.jsonl in {run_dir}")
        return keep_planned(path.parent, read_records(path))[0]

    return compare_records(planned(run_a), planned(run_b), seed=seed)
