"""A run folder as the reports read it: its records and its manifest."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medmis.experiments.benchmark._types import Record
from medmis.experiments.harness._io import read_records

SIMULATED_PREFIX = "mock/examinee"
"""Model specs starting with this are the offline demo's simulated examinee."""


@dataclass(frozen=True)
class RunData:
    """A run directory's records and manifest (empty when ``manifest.json`` is absent)."""

    run_dir: Path
    records: list[Record]
    manifest: dict[str, Any] = field(default_factory=dict)

    @property
    def models(self) -> list[str]:
        """Model specs from the records, then any only named in the manifest."""
        seen = dict.fromkeys(r.model for r in self.records)
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


def load_run(run_dir: str | Path) -> RunData:
    """Read ``DIR/records.jsonl`` (torn last line tolerated) and optional ``DIR/manifest.json``.

    Raises:
        FileNotFoundError: If ``DIR/records.jsonl`` does not exist.
    """
    d = Path(run_dir)
    records_path = d / "records.jsonl"
    if not records_path.exists():
        raise FileNotFoundError(f"no records.jsonl in {d}")
    manifest_path = d / "manifest.json"
    manifest = json.loads(manifest_path.read_text("utf-8")) if manifest_path.exists() else {}
    return RunData(run_dir=d, records=read_records(records_path), manifest=manifest)
