"""The ``timings`` section: small latencies that tests once asserted with a clock.

A wall-clock bound in a test fails when the machine is busy (the suite runs on every core, next
to other work), so the tests keep the behaviour (the answer read, nothing heavy imported) and
the figures are reported here, each with its target:

- ``extract_answer``: median ms to read the answer of a ~2 KB chain-of-thought reply, with a
  final answer line and with none (every strategy runs to the end); target < 1 ms each;
- ``testing_plugin_import``: seconds to import ``medmis.testing`` (the pytest plug-in every
  pytest session of a user with medmis installed loads) after pytest, in a fresh interpreter;
  target < 1 s.

(The warm record/replay lookup is the ``store_lookup`` section.)
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from typing import Any

OPTIONS = {"A": "Vitamin A", "B": "Vitamin C", "C": "Vitamin D", "D": "Vitamin K"}
REASONING = (
    "Scurvy presents with perifollicular haemorrhages, gingival bleeding and poor wound "
    "healing. These findings reflect defective collagen cross-linking, because prolyl and "
    "lysyl hydroxylases need ascorbate as a cofactor.\n\n"
    "Vitamin A deficiency causes night blindness and xerophthalmia; vitamin D deficiency "
    "causes rickets or osteomalacia; vitamin K deficiency causes a coagulopathy with a "
    "prolonged PT, not perifollicular bleeding.\n\n"
)


def _median_ms(reply: str, repeats: int) -> float:
    from medmis.experiments.benchmark import extract_answer

    timings = []
    for _ in range(repeats):
        start = time.perf_counter()
        extract_answer(reply, OPTIONS)
        timings.append(time.perf_counter() - start)
    return 1000 * statistics.median(timings)


def bench_timings(repeats: int = 200) -> dict[str, Any]:
    """The section's figures (see the module docstring)."""
    answered = _median_ms(REASONING * 5 + "Final answer: B", repeats)
    unanswered = _median_ms(REASONING * 5 + "Let me know if anything about the vitamins is unclear.", repeats)
    probe = ("import time; import pytest; t0 = time.perf_counter(); import medmis.testing; "
             "print(time.perf_counter() - t0)")
    imports = [float(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                                    timeout=120).stdout) for _ in range(3)]
    plugin_s = statistics.median(imports)
    return {
        "extract_answer": {"reply_bytes": len((REASONING * 5).encode()) + 15, "repeats": repeats,
                           "answered_median_ms": round(answered, 4),
                           "unanswered_median_ms": round(unanswered, 4),
                           "target_ms": 1.0, "meets_target": max(answered, unanswered) < 1.0},
        "testing_plugin_import": {"median_s": round(plugin_s, 3), "runs": len(imports),
                                  "target_s": 1.0, "meets_target": plugin_s < 1.0},
    }
