"""The report of a run that Ctrl-C or SIGTERM stopped: written at once, and saying so.

The run notes the stop in its manifest before it gives up the folder; the report reads it from
there, so its first line (report.md, report.html) and ``verdict.json``'s ``incomplete`` say the
run is incomplete and why. Both ``medmis run`` and ``medmis ablate`` write it in-process
when the stop reaches them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any


def report_interrupted(write: Callable[[Path], Mapping[str, Any]], out: str | Path,
                       notice: Callable[[str], None]) -> None:
    """Write the stopped run ``out``'s report with ``write`` (a folder with no record yet gets
    none); a failure to write it is one line, and the stop goes on."""
    out = Path(out)
    records = out / "records.jsonl"
    try:
        if not records.is_file() or records.stat().st_size == 0:
            return
        paths = write(out)
    except Exception as exc:  # the stop is what the user asked for: say it, do not mask it
        notice(f"the stopped run's report was not written ({type(exc).__name__}: {exc}); "
               f"`medmis report {out}` writes it")
        return
    print(f"report (incomplete run): {paths.get('report.md', out / 'report.md')}")
