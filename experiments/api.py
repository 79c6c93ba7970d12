"""The public Python API: run a grid, load a run folder.

Everything here is re-exported from :mod:`medmis.experiments` (``from medmis.experiments import
run, load_run, compare, load_dataset``; ``compare``, the table of ``medmis compare``, is
:func:`medmis.experiments.analysis.compare`). The CLI commands do the same work: ``run`` is
``medmis run`` without the argument parsing, :class:`RunFolder` reads what ``medmis report``
wrote.
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

    from medmis.experiments.harness._config import RunConfig, RunOptions, RunResult, RunSpec


def run(config: RunConfig | RunSpec, options: RunOptions | None = None) -> RunResult:
    """Run (or resume) ``config``'s grid of models x defenders x protocols; blocks until done.

    Args:
        config: The whole run (:class:`RunConfig`), or its :class:`RunSpec` with ``options``.
        options: How to carry the spec out (where to write, concurrency, timeouts, ...);
            only with a bare spec.

    With ``write_report`` (the default) the report files are (re)written afterwards, as
    ``medmis run`` does; ``RunResult.report`` maps their names to paths. Call it outside a
    running event loop (inside one, ``await run_experiment(config)`` instead).

    Raises:
        TypeError: ``options`` given with a whole :class:`RunConfig`, or missing for a bare spec.
    """
    from medmis.experiments.harness import RunConfig, run_experiment
    from medmis.experiments.reporting import finish_run

    if isinstance(config, RunConfig):
        if options is not None:
            raise TypeError("run(config, options): a RunConfig holds its options already")
    elif options is None:
        raise TypeError("run(spec, options): a RunSpec needs RunOptions (at least out=...)")
    else:
        config = RunConfig.of(config, options)
    result = asyncio.run(run_experiment(config, argv=["medmis.experiments.run"]))
    finish_run(result, report=config.write_report)
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
