"""On/off switches read from the environment (``MEDMIS_REPORT_WORKER``, ``MEDMIS_FAST_EXIT``, ...)."""

from __future__ import annotations

import os

OFF = ("0", "false", "no", "off")


def switched_on(variable: str) -> bool:
    """Whether the switch ``variable`` is on: unset, or set to anything but 0/false/no/off."""
    return os.environ.get(variable, "1").strip().lower() not in OFF
