"""A local-corpus snippet is the same in every process: the sentence weights are summed over a
set of terms, whose order follows Python's per-process string hashing; a near tie between two
sentences once went either way (claim_verify's recorded traces differed under PYTHONHASHSEED=4).
The tie is in an ambient misleading passage, so the search names that file (``ambient=``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

AMBIENT = Path(__file__).resolve().parents[1] / "fixtures" / "ambient" / "misleading.jsonl"
SCRIPT = f"""
import asyncio
from medmis.tools import LocalSearch
query = "Lithium causes nephrogenic diabetes insipidus, in which the kidney does not respond to desmopressin."
results = asyncio.run(LocalSearch(ambient={str(AMBIENT)!r}).search(query, max_results=3))
print(repr([r.snippet for r in results]))
"""


def test_snippets_do_not_depend_on_string_hashing() -> None:
    outputs = set()
    for seed in ("0", "4", "11"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                              timeout=120, check=True)
        outputs.add(done.stdout)
    assert len(outputs) == 1, outputs
    assert "central diabetes insipidus" in next(iter(outputs))
