"""The line protocol of the report's helper processes (the report worker, the forked plotter)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


def serve_paths(requests: IO[str], answers: IO[str], handle: Callable[[dict[str, Any]], dict[str, Path]]) -> None:
    """Answer JSON requests, one per line, until ``requests`` ends: ``{"paths": {name: path}}``
    with what ``handle`` wrote, or ``{"error": "Type: message"}`` for the asker to redo itself."""
    for line in requests:
        try:
            paths = handle(json.loads(line))
            answer: dict[str, Any] = {"paths": {name: str(path) for name, path in paths.items()}}
        except Exception as exc:  # reported to the asker, which redoes the work in-process
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()
