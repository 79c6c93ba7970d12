"""A run folder as the reports read it: facts of its records (by a DuckDB scan) and its manifest."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from medmis.experiments.benchmark import Record
from medmis.experiments.records import Outside, read_records
from medmis.tools import json_file

from ._simulated import SIMULATED_PREFIX


@dataclass(frozen=True)
class RecordFacts:
    """What the report's run-facts section needs from the records, without the records."""

    count: int = 0
    models: tuple[str, ...] = ()
    prompts: tuple[tuple[str, str | None], ...] = ()
    errors: int = 0
    """Records whose (last) line is an error."""
    cells: tuple[tuple[str, str, int], ...] = ()
    """``(model, defender, records)`` of every pair that has records."""
    outside: Outside = field(default_factory=Outside)
    """Records outside the run's plan, left out of everything above (and of the metrics)."""


def record_facts(records_path: Path) -> RecordFacts:
    """Record count, models (first-seen order) and prompt presets, by a columnar scan."""
    from medmis.experiments.records import connect, planned_records_view

    if records_path.stat().st_size == 0:
        return RecordFacts()
    con = connect()
    try:
        # the compacted copy is what compute_run_metrics reads next, so the scan is paid once
        outside = planned_records_view(con, records_path.parent)
        count = con.execute("SELECT count(*), count(error) FROM records").fetchone()
        models = con.execute("SELECT model FROM records GROUP BY model ORDER BY min(pos)").fetchall()
        cells = con.execute("SELECT model, defender, count(*) FROM records GROUP BY ALL "
                            "ORDER BY min(pos)").fetchall()
        prompts = _prompts(con, records_path)
    finally:
        con.close()
    return RecordFacts(int(count[0]) if count else 0, tuple(m for (m,) in models), prompts,
                       errors=int(count[1]) if count else 0,
                       cells=tuple((str(m), str(d), int(n)) for m, d, n in cells), outside=outside)


def _prompts(con: Any, records_path: Path) -> tuple[tuple[str, str | None], ...]:
    from medmis.experiments.records import scan_jsonl

    # prompt fields are not in the compacted columns: a two-column scan of the JSON lines
    with scan_jsonl(records_path, {"prompt": "VARCHAR", "prompt_version": "VARCHAR"}) as source:
        rows = con.execute(
            "SELECT prompt, prompt_version FROM (SELECT prompt, prompt_version, "
            f"row_number() OVER () AS rn FROM {source}) "
            "WHERE prompt IS NOT NULL GROUP BY ALL ORDER BY min(rn)").fetchall()
    return tuple((str(p), v) for p, v in rows)


@dataclass(frozen=True)
class RunData:
    """A run directory's record facts and manifest (empty when ``manifest.json`` is absent).

    ``records`` parses every record into a :class:`Record` on first use; reports do not use it
    (they read ``facts`` and the metrics engine's scans), it is there for callers that want
    the objects of a small run.
    """

    run_dir: Path
    facts: RecordFacts
    manifest: dict[str, Any] = field(default_factory=dict)

    @cached_property
    def records(self) -> list[Record]:
        return read_records(self.run_dir / "records.jsonl")

    @property
    def record_count(self) -> int:
        return self.facts.count

    @property
    def prompts(self) -> tuple[tuple[str, str | None], ...]:
        """Distinct ``(prompt, prompt_version)`` of the records, in first-seen order."""
        return self.facts.prompts

    @property
    def models(self) -> list[str]:
        """Model specs from the records, then any only named in the manifest."""
        seen = dict.fromkeys(self.facts.models)
        listed = self.manifest.get("models") or []
        for m in [listed] if isinstance(listed, str) else listed:
            seen.setdefault(str(m))
        return list(seen)

    @property
    def simulated(self) -> bool:
        """Whether results come from the simulated examinee rather than a real model."""
        return bool(self.manifest.get("simulated")) or any(
            m.startswith(SIMULATED_PREFIX) for m in self.models
        )


def load_run_data(run_dir: str | Path) -> RunData:
    """Read the facts of ``DIR/records.jsonl`` (torn last line tolerated) and ``DIR/manifest.json``.

    Raises:
        FileNotFoundError: If ``DIR/records.jsonl`` does not exist.
    """
    d = Path(run_dir)
    records_path = d / "records.jsonl"
    if not records_path.exists():
        raise FileNotFoundError(f"no records.jsonl in {d}")
    manifest_path = d / "manifest.json"
    manifest = json_file(manifest_path) if manifest_path.exists() else {}
    return RunData(run_dir=d, facts=record_facts(records_path), manifest=manifest)
