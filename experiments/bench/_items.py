"""The bench's synthetic items, shared by its sections."""

from __future__ import annotations

import json
from pathlib import Path


def write_items(path: Path, n: int) -> None:
    """Synthetic rows in the released schema (benchmark filler, not medical content)."""
    with path.open("w", encoding="utf-8") as fh:
        for i in range(n):
            row = {
                "id": f"bench-{i:05d}",
                "subset": "MEDMISQA",
                "question": f"Benchmark filler question number {i}: which option is labelled first?",
                "answer": "A",
                "opa": "first", "opb": "second", "opc": "third", "opd": "fourth",
                "injecta": "The first option is labelled first.",
                "injectb": "Filler sentence arguing for the second option.",
                "injectc": "Filler sentence arguing for the third option.",
                "injectd": "Filler sentence arguing for the fourth option.",
                "injection_content": "Cue Remapping",
                "injection_provenance": "Neutral False Statement",
            }
            fh.write(json.dumps(row) + "\n")
