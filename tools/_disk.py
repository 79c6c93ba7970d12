"""The disk side of the record/replay store: one diskcache, read only through checks.

:class:`DiskStore` owns the diskcache and everything that touches it directly: opening it,
turning SQLite's "cannot read" into :class:`~medmis.tools._types.StoreCorruptError`, reading an
entry and checking it (:func:`~medmis.tools._entry.decode_entry`), writing one, and listing
disk keys. :class:`~medmis.tools._store.RecordStore` adds the modes and maintenance on top.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import diskcache

from medmis.tools._entry import KIND_RE, Entry, decode_entry
from medmis.tools._types import StoreCorruptError

_MISSING = object()
# SQLite's primary result codes for "busy" and "locked": contention, not damage
_CONTENTION_CODES = frozenset({5, 6})

log = logging.getLogger("medmis.tools._store")


class DiskStore:
    """The checked diskcache under a :class:`~medmis.tools._store.RecordStore`.

    Args:
        directory: Where the diskcache lives (created on first use).
        size_limit: Bytes on disk past which a write logs a warning (once per object).
            Nothing is ever evicted.
        expire_s: Seconds an entry lives after it is written; ``None`` keeps it until pruned.
    """

    def __init__(
        self, directory: str | Path, *, size_limit: int = 2**30, expire_s: float | None = None
    ) -> None:
        self.directory = Path(directory)
        self.size_limit = size_limit
        self.expire_s = expire_s
        self._cache: diskcache.Cache | None = None
        self._lock = threading.Lock()
        self._size_warned = False

    @property
    def cache(self) -> diskcache.Cache:
        """The underlying diskcache, opened on first use (live runs never create a directory)."""
        if self._cache is None:
            with self._lock, self._guard():
                if self._cache is None:
                    self._cache = diskcache.Cache(
                        str(self.directory),
                        # SQLite busy timeout: how long a writer waits for another process
                        timeout=60,
                        size_limit=self.size_limit,
                        # recordings are fixtures, not a cache to trim: never evict silently
                        # (and an LRU policy would turn every read into a write)
                        eviction_policy="none",
                        statistics=False,
                    )
        return self._cache

    @contextmanager
    def _guard(self, disk_key: str | None = None) -> Iterator[None]:
        """Turn SQLite's "I cannot read this" into :class:`StoreCorruptError`."""
        try:
            yield
        except sqlite3.DatabaseError as exc:
            code = getattr(exc, "sqlite_errorcode", None)
            if isinstance(code, int) and code & 0xFF in _CONTENTION_CODES:
                raise  # another process holds the lock past the timeout: not damage
            raise self._corrupt(disk_key, f"SQLite cannot read the store ({exc})") from exc
        except UnicodeDecodeError as exc:  # a value file that is no longer UTF-8
            raise self._corrupt(disk_key, "value file is not UTF-8 text") from exc

    def _corrupt(self, disk_key: str | None, reason: str) -> StoreCorruptError:
        return StoreCorruptError(str(self.directory), disk_key, reason)

    def close(self) -> None:
        """Close this thread's database connection (the store reopens on next use)."""
        if self._cache is not None:
            self._cache.close()


    @staticmethod
    def check_kind(kind: str) -> None:
        """Raise ``ValueError`` unless ``kind`` is a lower-case word (``visit``, ``model``)."""
        # the kind is the prefix of every disk key and the unit of stats/prune/export
        if not KIND_RE.fullmatch(kind):
            raise ValueError(f"store kinds are lower-case words like 'visit'; got {kind!r}")


    def _read(self, disk_key: str) -> Entry | None:
        """The checked entry at a disk key; ``None`` when there is none.

        Raises:
            StoreCorruptError: The entry is there but unreadable or fails its checks.
        """
        with self._guard(disk_key):
            raw = self.cache.get(disk_key, _MISSING)
            if raw is _MISSING:
                # diskcache answers "missing" when the row exists but its value file cannot
                # be opened. A writer replacing the entry removes the old file only after the
                # new row is committed, so read once more before calling it damage.
                if disk_key not in self.cache:
                    return None
                raw = self.cache.get(disk_key, _MISSING)
                if raw is _MISSING:
                    if disk_key not in self.cache:
                        return None  # deleted meanwhile
                    raise self._corrupt(disk_key, "value file is missing or unreadable")
        return self._decode(disk_key, raw)

    def _decode(self, disk_key: str, raw: Any) -> Entry:
        try:
            return decode_entry(disk_key, raw)
        except ValueError as exc:
            raise self._corrupt(disk_key, str(exc)) from None

    def _set(self, disk_key: str, text: str) -> None:
        with self._guard(disk_key):
            self.cache.set(disk_key, text, expire=self.expire_s)
        self._check_size()

    def _check_size(self) -> None:
        if self._size_warned:
            return
        with self._guard():
            volume = int(self.cache.volume())
        if volume > self.size_limit:
            self._size_warned = True
            log.warning(
                "record/replay store %s holds %d bytes, past its size limit of %d; nothing is "
                "evicted: free space with `medmis cache prune`",
                self.directory,
                volume,
                self.size_limit,
            )

    def _all_keys(self) -> list[Any]:
        with self._guard():
            return list(self.cache.iterkeys())

    def _disk_keys(self, kinds: Sequence[str] | None = None) -> Iterator[str]:
        wanted = None if kinds is None else set(kinds)
        for disk_key in self._all_keys():
            if not isinstance(disk_key, str) or ":" not in disk_key:
                continue  # not ours; a store directory should hold nothing else
            if wanted is None or disk_key.split(":", 1)[0] in wanted:
                yield disk_key

