"""A run folder as the exporters read it: its planned records by (model, defender), their
traces, its manifest and metrics."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from medmis.tools import ConfigError, json_file, json_value

if TYPE_CHECKING:
    from medmis.experiments.records import Record

__all__ = ["RunFolder", "read_run"]


@dataclass
class RunFolder:
    """The records of a run's plan (records outside it are left out, as the metrics do)."""

    dir: Path
    manifest: dict[str, Any]
    records: list[Record]
    _metrics: dict[str, Any] | None = field(default=None, repr=False)

    def cells(self) -> dict[tuple[str, str], list[Record]]:
        """The records of each (model, defender), in the order the run wrote them."""
        out: dict[tuple[str, str], list[Record]] = {}
        for r in self.records:
            out.setdefault((r.model, r.defender), []).append(r)
        return out

    def traces(self, model: str, defender: str) -> dict[tuple[str, str, str, str, str | None, int], dict[str, Any]]:
        """The trace of each record key of one (model, defender) (the last line of a key wins)."""
        files = {r.trace_file for r in self.records if r.model == model and r.defender == defender and r.trace_file}
        out: dict[tuple[str, str, str, str, str | None, int], dict[str, Any]] = {}
        for name in sorted(files):
            path = self.dir / name
            if not path.is_file():
                continue
            with path.open(encoding="utf-8") as fh:
                for line in fh:
                    try:
                        obj = json_value(line, path, None)
                    except ValueError:
                        continue  # a torn last line of a killed run (or one no reader accepts)
                    if isinstance(obj, dict) and obj.get("model") == model and obj.get("defender") == defender:
                        key = (model, defender, str(obj.get("protocol")),
                               f"{obj.get('subset')}/{obj.get('item_id')}", obj.get("target"),
                               int(obj.get("epoch") or 0))  # as Record.key: a later epoch's line
                        out[key] = obj
        return out

    def all_metrics(self) -> dict[str, Any]:
        """``metrics.json``, as the run's report wrote it."""
        if self._metrics is None:
            path = self.dir / "metrics.json"
            try:
                self._metrics = json_file(path)
            except FileNotFoundError:
                raise ConfigError(f"{self.dir}: no metrics.json yet; `medmis report {self.dir}` writes it") from None
            except (OSError, ValueError) as exc:
                raise ConfigError(f"{path}: unreadable ({exc})") from None
        return self._metrics

    def metrics(self, model: str, defender: str) -> Mapping[str, Any]:
        return (self.all_metrics().get(model) or {}).get(defender) or {}


def read_run(run_dir: str | Path) -> RunFolder:
    """Read a run folder's planned records and manifest.

    Raises:
        ConfigError: No ``records.jsonl`` (or no record) in the folder.
    """
    from medmis.experiments.records import keep_planned, read_records

    d = Path(run_dir)
    if not (d / "records.jsonl").is_file():
        raise ConfigError(f"{d}: no records.jsonl here (not a run folder)")
    records, _ = keep_planned(d, read_records(d / "records.jsonl"))
    if not records:
        raise ConfigError(f"{d}: the run has no records yet")
    manifest_path = d / "manifest.json"
    manifest = json_file(manifest_path) if manifest_path.is_file() else {}
    return RunFolder(d, manifest, records)
