"""The ``medmis view`` parser (light: the CLI builds it without loading the engine)."""

from __future__ import annotations

from typing import Any


def add_parser(sub: Any) -> None:
    """Register ``medmis view``."""
    p = sub.add_parser("view", help="browse a run's cases in the browser (local server)")
    p.add_argument("run_dir", help="run folder holding records.jsonl")
    p.add_argument("--port", type=int, default=7860, help="port on 127.0.0.1 (0: any free port)")
    p.add_argument("--baseline", default="none", help="defender the 'differs' filter compares with")
