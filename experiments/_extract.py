"""Answer extraction: find the option key a model committed to, or None.

Minimal first version (explicit "Final answer: X" lines); hardened in the extraction work.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from pydantic import BaseModel


class Extraction(BaseModel):
    choice: str | None
    method: str


_FINAL = re.compile(r"final\s+answer\s*[:：]\s*\(?\[?([A-Za-z0-9]+)\]?\)?", re.IGNORECASE)


def extract_answer(text: str, options: Mapping[str, str]) -> Extraction:
    keys = {k.upper(): k for k in options}
    matches = list(_FINAL.finditer(text or ""))
    for m in reversed(matches):
        key = keys.get(m.group(1).upper())
        if key is not None:
            return Extraction(choice=key, method="final_answer")
    return Extraction(choice=None, method="none")
