"""The record/replay store for web fetches and model calls.

Every tool call and model call can pass through one :class:`RecordStore`, a
:class:`diskcache.Cache` keyed by ``kind`` (``"search"``, ``"visit"``, ``"model"``, …) plus the
SHA-256 of the canonical JSON of the call's arguments. The store has four modes:

* ``live``: never touch the store; call through.
* ``record``: read-through; a hit returns the stored value, a miss calls and writes.
* ``replay``: store only; a miss raises :class:`~medmis.tools._types.ReplayMissError`, so a test can
  never reach the network by accident.
* ``refresh``: always call and overwrite.

Values are stored as canonical JSON text next to the original key arguments and the SHA-256
of the value (:mod:`medmis.tools._entry`), so replay returns exactly what was recorded and the
store exports as a diffable cassette (:mod:`medmis.tools._cassette`). Failed calls are never
stored.

The store never lies: every read checks the value against its hash and the stored key against
the disk key. A mismatch, a missing or unreadable value file, an unhashed entry or a database
SQLite cannot read raises :class:`~medmis.tools._types.StoreCorruptError` in every mode: never
a miss, never a re-fetch, never served. ``medmis cache verify`` lists damaged entries;
``--cache refresh`` re-records them, ``medmis cache prune --corrupt`` drops them. Recordings
never expire (unless ``expire_s`` is given) and are never evicted (``size_limit`` only warns);
``medmis cache prune`` is how entries leave.

:class:`~medmis.tools._llm_cache.StoreCache` plugs the same store into LangChain as a chat-model
cache (kind ``"model"``); :func:`~medmis.tools._llm_cache.attach_cache` puts it on a model.

Lookups and writes run inline on the calling thread, the event loop included: measured on a
warm SQLite page cache a read takes ~10 µs and a write ~70 µs, while a hop through
``asyncio.to_thread`` alone costs ~90 µs. diskcache opens one SQLite connection per thread and
reopens it after a fork, and SQLite's write-ahead log lets readers proceed while another
process writes, so one store may be shared by threads and tasks and opened by many processes.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, get_args

from medmis.tools._disk import DiskStore
from medmis.tools._entry import Entry, canonical_json, key_digest
from medmis.tools._probe import mark_cache
from medmis.tools._types import ReplayMissError, StoreCorruptError

CacheMode = Literal["live", "record", "replay", "refresh"]
CACHE_MODES: tuple[str, ...] = get_args(CacheMode)

MODEL_KIND = "model"

_RECORD_HINT = "run once with --cache record"

# Entry, canonical_json and key_digest live in medmis.tools._entry and are re-exported here
__all__ = [
    "CACHE_MODES", "MODEL_KIND", "CacheMode", "Entry", "RecordStore", "canonical_json",
    "key_digest",
]


def _short_repr(obj: Any, limit: int = 300) -> str:
    text = repr(obj)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class RecordStore(DiskStore):
    """A process-safe record/replay store for JSON values.

    Args:
        directory: Where the diskcache lives (created if missing).
        mode: ``live``, ``record``, ``replay`` or ``refresh`` (see the module docstring).
        size_limit: Bytes on disk past which a write logs a warning (once per store
            object). Nothing is ever evicted: recordings leave only through :meth:`prune`.
        expire_s: Seconds an entry lives after it is written; ``None`` (the default) keeps it
            until pruned, so a recorded run replays however long ago it was recorded.

    Example::

        with RecordStore(".cache/medmis", "record") as store:
            page = await store.through("visit", {"url": url}, lambda: fetch(url))
    """

    def __init__(
        self,
        directory: str | Path,
        mode: CacheMode = "record",
        *,
        size_limit: int = 2**30,
        expire_s: float | None = None,
    ) -> None:
        if mode not in CACHE_MODES:
            raise ValueError(f"cache mode must be one of {', '.join(CACHE_MODES)}; got {mode!r}")
        super().__init__(directory, size_limit=size_limit, expire_s=expire_s)
        self.mode: CacheMode = mode
        self._hits: Counter[str] = Counter()
        self._misses: Counter[str] = Counter()

    # -- plumbing (the disk side, checks included, is medmis.tools._disk.DiskStore) -----

    def __enter__(self) -> RecordStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RecordStore({str(self.directory)!r}, mode={self.mode!r})"

    def _count(self, kind: str, hit: bool) -> None:
        with self._lock:
            (self._hits if hit else self._misses)[kind] += 1
        mark_cache(hit)

    # -- sync helpers ---------------------------------------------------------------------

    def get_entry(self, kind: str, key: dict[str, Any]) -> Entry | None:
        """The stored entry for a call, or ``None`` (ignores the mode; no stats, no probe).

        Raises:
            StoreCorruptError: The entry is there but damaged.
        """
        self.check_kind(kind)
        return self._read(key_digest(kind, key))

    def get(self, kind: str, key: dict[str, Any], default: Any = None) -> Any:
        """The stored value for a call, or ``default`` (ignores the mode; no stats, no probe)."""
        entry = self.get_entry(kind, key)
        return default if entry is None else entry.value

    def put(
        self, kind: str, key: dict[str, Any], value: Any, *, created: float | None = None
    ) -> Any:
        """Store ``value`` for a call, overwriting any entry (ignores the mode).

        Returns:
            The value as a replay will return it (round-tripped through JSON).

        Raises:
            TypeError: ``key`` or ``value`` is not JSON-able.
        """
        self.check_kind(kind)
        if not isinstance(key, dict):
            raise TypeError(f"store keys are dicts of call arguments; got {type(key).__name__}")
        stamp = round(time.time() if created is None else created, 3)
        entry = Entry(kind, key, value, stamp)
        text = entry.to_json()  # serialise before touching the disk so a bad value writes nothing
        self._set(key_digest(kind, key), text)
        return json.loads(text)["value"]

    def delete(self, kind: str, key: dict[str, Any]) -> bool:
        """Remove one call's entry; ``True`` when there was one."""
        self.check_kind(kind)
        disk_key = key_digest(kind, key)
        with self._guard(disk_key):
            return bool(self.cache.delete(disk_key))

    def lookup(self, kind: str, key: dict[str, Any]) -> Entry | None:
        """A mode-aware lookup: counts a hit or miss and marks the cache probe.

        ``record`` and ``replay`` read the store; ``refresh`` reports a miss without reading
        (the caller then produces and calls :meth:`put`). ``live`` returns ``None`` without
        touching the store or the probe.

        Raises:
            ReplayMissError: ``replay`` mode and nothing stored for the call.
            StoreCorruptError: ``record`` or ``replay`` mode and the stored entry is damaged.
        """
        self.check_kind(kind)
        if self.mode == "live":
            return None
        digest = key_digest(kind, key)
        entry = self._read(digest) if self.mode in ("record", "replay") else None
        self._count(kind, entry is not None)
        if entry is None and self.mode == "replay":
            raise ReplayMissError(f"replay miss: {kind} {_short_repr(key)}: {_RECORD_HINT}")
        return entry

    # -- the main entry point -------------------------------------------------------------

    async def through(
        self, kind: str, key: dict[str, Any], produce: Callable[[], Awaitable[Any]]
    ) -> Any:
        """Return the value for a call, from the store or from ``produce`` per the mode.

        Args:
            kind: What is being called (``"search"``, ``"visit"``, …); part of the key.
            key: Everything that changes the result, and nothing else (no timeouts, no
                retry counts). Must be JSON-able.
            produce: Makes the value when the store cannot; its exceptions propagate and are
                never stored.

        Returns:
            The value. In ``record``/``replay``/``refresh`` it is the JSON round trip of what
            ``produce`` returned, so a hit and the miss that recorded it return equal data.

        Raises:
            ReplayMissError: ``replay`` mode and the call was never recorded.
            StoreCorruptError: The stored entry is damaged (``produce`` is not called).
            TypeError: ``key`` or the produced value is not JSON-able.
        """
        if self.mode == "live":
            return await produce()
        entry = self.lookup(kind, key)
        if entry is not None:
            return entry.value
        value = await produce()
        return self.put(kind, key, value)

    # -- maintenance ----------------------------------------------------------------------

    def entries(self, kinds: Sequence[str] | None = None) -> Iterator[Entry]:
        """Every live entry (optionally of some kinds), in disk-key order, each one checked.

        Raises:
            StoreCorruptError: At the first damaged entry.
        """
        for disk_key in self._disk_keys(kinds):
            entry = self._read(disk_key)
            if entry is not None:  # expired or deleted since the key listing
                yield entry

    def verify(self, kinds: Sequence[str] | None = None) -> tuple[int, list[StoreCorruptError]]:
        """Read and check every entry (optionally of some kinds).

        Returns:
            How many entries were checked, and one error per damaged entry (in disk-key order).

        Raises:
            StoreCorruptError: The store as a whole cannot be read (no entry to blame).
        """
        checked, problems = 0, []
        for disk_key in self._disk_keys(kinds):
            try:
                entry = self._read_shaped(disk_key)
            except StoreCorruptError as exc:
                checked += 1
                problems.append(exc)
                continue
            checked += entry is not None
        return checked, problems

    def _read_shaped(self, disk_key: str) -> Entry | None:
        """:meth:`_read`, and a value of the wrong shape for its kind is damage too (see
        :mod:`medmis.tools._shapes`; maintenance only, never on a run's reads)."""
        from medmis.tools._shapes import value_problem

        entry = self._read(disk_key)
        problem = None if entry is None else value_problem(entry.kind, entry.value)
        if problem is not None:
            raise self._corrupt(disk_key, problem)
        return entry

    def stats(self) -> dict[str, Any]:
        """Entries per kind, bytes on disk, and this process's hits and misses per kind.

        Counts keys only; :meth:`verify` reads and checks every entry.
        """
        per_kind: Counter[str] = Counter(k.split(":", 1)[0] for k in self._disk_keys())
        with self._lock:
            hits, misses = dict(self._hits), dict(self._misses)
        with self._guard():
            size = int(self.cache.volume())
        return {
            "directory": str(self.directory),
            "mode": self.mode,
            "entries": dict(sorted(per_kind.items())),
            "total_entries": sum(per_kind.values()),
            "size_bytes": size,
            "size_limit": self.size_limit,
            "over_size_limit": size > self.size_limit,
            "expire_s": self.expire_s,
            "hits": sum(hits.values()),
            "misses": sum(misses.values()),
            "hits_by_kind": dict(sorted(hits.items())),
            "misses_by_kind": dict(sorted(misses.items())),
        }

    def prune(
        self, older_than_s: float | None = None, kind: str | None = None, *, corrupt: bool = False
    ) -> int:
        """Remove entries; returns how many went.

        Expired entries (only ever written with an explicit ``expire_s``) always go. Beyond
        that: with ``corrupt``, every damaged entry; with ``older_than_s``, entries stored
        more than that many seconds ago; both limited to ``kind`` when given. With ``kind``
        alone, every entry of that kind. With none of these, nothing else is removed, so a
        bare prune is never a wipe.

        Raises:
            StoreCorruptError: ``older_than_s`` meets a damaged entry (prune with
                ``corrupt=True`` to drop those).
        """
        if kind is not None:
            self.check_kind(kind)
        kinds = None if kind is None else [kind]
        with self._guard():
            removed = int(self.cache.expire())
        if corrupt:
            for disk_key in list(self._disk_keys(kinds)):
                try:
                    self._read_shaped(disk_key)
                except StoreCorruptError:
                    with self._guard(disk_key):
                        removed += int(bool(self.cache.delete(disk_key)))
        if older_than_s is not None or (kind is not None and not corrupt):
            cutoff = None if older_than_s is None else time.time() - older_than_s
            for disk_key in list(self._disk_keys(kinds)):
                if cutoff is not None:
                    entry = self._read(disk_key)
                    if entry is None or entry.created >= cutoff:
                        continue
                with self._guard(disk_key):
                    removed += int(bool(self.cache.delete(disk_key)))
        return removed
