"""Human-diffable JSONL cassettes of a :class:`~medmis.tools._store.RecordStore`, and the cache CLI.

A cassette holds one stored call a line::

    {"kind":"visit","key":{"url":"https://…"},"value":{…},"created":1767225600.0}

Lines are sorted by kind and then by the canonical JSON of the key, and every nested object is
written as canonical JSON, so exporting the same store twice gives the same bytes and
re-recording one call changes one line. Cassettes are how recorded traces travel: commit one
under ``fixtures/``, import it into a fresh store, and replay offline.

The ``cache_*`` functions back ``medmis cache stats|export|import|prune``.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from medmis.tools._store import Entry, RecordStore, canonical_json, key_digest


def _line(entry: Entry) -> str:
    # kind first and created last read better in a diff than the alphabetical order; the
    # fixed order is just as stable
    return (
        f'{{"kind":{canonical_json(entry.kind)},"key":{canonical_json(entry.key)},'
        f'"value":{canonical_json(entry.value)},"created":{canonical_json(entry.created)}}}'
    )


def export_cassette(
    store: RecordStore, path: str | Path, kinds: Sequence[str] | None = None
) -> int:
    """Write the store's entries (optionally only some kinds) to a JSONL cassette.

    The file is replaced atomically, so a failed export never leaves half a cassette.

    Returns:
        The number of entries written.
    """
    # sort on small (kind, canonical key, disk key) triples, then read values one by one,
    # so a large store is never held in memory whole
    order = sorted(
        (entry.kind, canonical_json(entry.key), key_digest(entry.kind, entry.key))
        for entry in store.entries(kinds)
    )
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as out:
            for kind, key_text, _digest in order:
                entry = store.get_entry(kind, json.loads(key_text))
                if entry is None:  # expired between the listing and now
                    continue
                out.write(_line(entry) + "\n")
                count += 1
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return count


def import_cassette(store: RecordStore, path: str | Path) -> int:
    """Load a JSONL cassette into the store (whatever its mode), overwriting equal keys.

    Every line is checked before anything is written, so a bad cassette changes nothing.

    Returns:
        The number of entries imported.

    Raises:
        ValueError: A line is not a cassette entry (the message gives the line number).
    """
    entries: list[Entry] = []
    with open(path, encoding="utf-8") as handle:
        for number, raw in enumerate(handle, 1):
            if not raw.strip():
                continue
            try:
                data = json.loads(raw)
                if not isinstance(data, dict) or not isinstance(data.get("key"), dict):
                    raise ValueError("expected an object with a 'key' object")
                kind = str(data["kind"])
                RecordStore.check_kind(kind)
                created = data.get("created")
                entries.append(
                    Entry(
                        kind,
                        data["key"],
                        data["value"],
                        time.time() if created is None else float(created),
                    )
                )
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{number}: not a cassette entry: {exc}") from None
    for entry in entries:
        store.put(entry.kind, entry.key, entry.value, created=entry.created)
    return len(entries)


def _existing(cache_dir: str | Path) -> Path:
    # maintenance commands must not conjure an empty store out of a mistyped path
    directory = Path(cache_dir)
    if not directory.is_dir():
        raise FileNotFoundError(f"no cache directory at {directory}")
    return directory


def cache_stats(cache_dir: str | Path) -> dict[str, Any]:
    """``medmis cache stats``: entries per kind and size on disk."""
    with RecordStore(_existing(cache_dir), "replay") as store:
        stats = store.stats()
    # hit/miss counters describe this process, which only just opened the store
    for field in ("mode", "hits", "misses", "hits_by_kind", "misses_by_kind"):
        stats.pop(field, None)
    return stats


def cache_export(
    cache_dir: str | Path, path: str | Path, kinds: Sequence[str] | None = None
) -> int:
    """``medmis cache export``: write a cassette; returns the number of entries."""
    with RecordStore(_existing(cache_dir), "replay") as store:
        return export_cassette(store, path, kinds or None)


def cache_import(cache_dir: str | Path, path: str | Path) -> int:
    """``medmis cache import``: load a cassette (creating the store if needed)."""
    with RecordStore(cache_dir, "record") as store:
        return import_cassette(store, path)


def cache_prune(
    cache_dir: str | Path, older_than_days: float | None = None, kind: str | None = None
) -> int:
    """``medmis cache prune``: drop expired entries, and those older than N days / of a kind.

    Returns:
        The number of entries removed.
    """
    older_than_s = None if older_than_days is None else older_than_days * 86400
    with RecordStore(_existing(cache_dir), "record") as store:
        return store.prune(older_than_s, kind)
