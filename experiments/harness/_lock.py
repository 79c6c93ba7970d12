"""One process per run folder: an exclusive, non-blocking lock on ``OUT/.medmis.lock``.

The lock is an OS file lock (``filelock``), so it is released when its holder exits, even by
a crash or ``kill -9``; a stale lock file never blocks a later run. The holder writes its pid,
host and start time next to it (``.medmis.lock.owner``) so the refused process can say who
holds the folder.
"""

from __future__ import annotations

import json
import os
import socket
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType

from filelock import FileLock, Timeout

from medmis.tools import json_file

from ._config import RunSetupError

__all__ = ["LOCK_FILE", "OWNER_FILE", "RunLock"]

LOCK_FILE = ".medmis.lock"
OWNER_FILE = ".medmis.lock.owner"


class RunLock:
    """Hold ``out``'s run lock for the duration of a ``with`` block.

    Raises:
        RunSetupError: Another process holds the lock (one line naming it).
    """

    def __init__(self, out: Path) -> None:
        self.out = out
        self._lock = FileLock(str(out / LOCK_FILE), timeout=0, is_singleton=False)

    def _holder(self) -> str:
        try:
            owner = json_file(self.out / OWNER_FILE)
            return f"pid {owner['pid']} on {owner['host']}, since {owner['since']}"
        except (OSError, ValueError, KeyError, TypeError):
            return "another process"

    def acquire(self) -> None:
        try:
            self._lock.acquire()
        except Timeout:
            raise RunSetupError(
                f"{self.out} is in use by another medmis run ({self._holder()}); "
                "wait for it to finish or choose another --out"
            ) from None
        owner = {"pid": os.getpid(), "host": socket.gethostname(),
                 "since": datetime.now(UTC).isoformat(timespec="seconds")}
        (self.out / OWNER_FILE).write_text(json.dumps(owner) + "\n", encoding="utf-8")

    def release(self) -> None:
        if self._lock.is_locked:
            (self.out / OWNER_FILE).unlink(missing_ok=True)
            self._lock.release()

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()
