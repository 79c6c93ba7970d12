"""Human-diffable JSONL cassettes of a :class:`~medmis.tools._store.RecordStore`, and the cache CLI.

A cassette holds one stored call a line::

    {"kind":"visit","key":{"url":"https://…"},"value":{…},"created":1767225600.0}

Lines are sorted by kind and then by the canonical JSON of the key, and every nested object is
written as canonical JSON, so exporting the same store twice gives the same bytes and
re-recording one call changes one line. Cassettes are how recorded traces travel: commit one
under ``fixtures/``, import it into a fresh store, and replay offline.

Import is all or nothing: a line that is not an entry (not UTF-8, not JSON, a value of the wrong
shape for its kind), two lines that give one key different values, or a key the store already
holds with another value (unless ``overwrite``), is a :class:`CassetteError` naming
``file:line`` (and the key), and nothing is written.
Export refuses to write a line holding a configured credential (an API key from the
environment), so a cassette can be committed without reading it first.

The ``cache_*`` functions back ``medmis cache stats|verify|export|import|prune``.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from medmis.tools._entry import Entry, canonical_json, key_digest
from medmis.tools._redact import configured_secrets
from medmis.tools._shapes import value_problem
from medmis.tools._store import RecordStore
from medmis.tools._types import StoreCorruptError
from medmis.tools._userfile import UserFileError, json_value


class CassetteError(ValueError):
    """A cassette that cannot be imported or exported as asked; the message is one line."""


def _key_label(kind: str, key: dict[str, Any], limit: int = 120) -> str:
    text = canonical_json(key)
    shown = text if len(text) <= limit else text[: limit - 1] + "…"
    return f"{kind} {shown} (key {key_digest(kind, key).split(':', 1)[1][:16]})"


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
    secrets = configured_secrets()
    count = 0
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as out:
            for kind, key_text, _digest in order:
                entry = store.get_entry(kind, json.loads(key_text))
                if entry is None:  # expired between the listing and now
                    continue
                line = _line(entry)
                if any(secret in line for secret in secrets):
                    raise CassetteError(
                        f"{_key_label(entry.kind, entry.key)} holds a configured API key; "
                        "not exporting it (drop the entry with `medmis cache prune --kind`)"
                    )
                out.write(line + "\n")
                count += 1
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return count


def import_cassette(store: RecordStore, path: str | Path, *, overwrite: bool = False) -> int:
    """Load a JSONL cassette into the store (whatever its mode).

    Every line is checked before anything is written, so a bad cassette changes nothing: each
    line must be UTF-8 text holding one entry whose value has its kind's shape
    (:mod:`medmis.tools._shapes`). A key given twice with the same value is one entry (the
    first line's timestamp is kept); given twice with different values it is an error: replay
    could not know which is true. A key the store already holds with the same value is left
    as it is; with a different value (or a damaged one) the import is refused unless
    ``overwrite``, so a cassette never silently replaces a recording.

    Returns:
        The number of distinct entries in the cassette (all of them in the store afterwards).

    Raises:
        CassetteError: A line is not a cassette entry, two lines give one key different
            values, or the store holds a key with another value (one line naming
            ``file:line`` and the key).
        FileNotFoundError: No file at ``path``.
    """
    entries: dict[str, tuple[int, Entry]] = {}
    with open(path, "rb") as handle:
        number = 0
        try:
            for number, data in enumerate(handle, 1):
                raw = data.decode("utf-8")
                if not raw.strip():
                    continue
                entry = _parse_line(json_value(raw, path, number))
                problem = value_problem(entry.kind, entry.value)
                if problem is not None:
                    raise CassetteError(f"{path}:{number}: {_key_label(entry.kind, entry.key)}: {problem}")
                digest = key_digest(entry.kind, entry.key)
                first = entries.get(digest)
                if first is None:
                    entries[digest] = (number, entry)
                elif canonical_json(first[1].value) != canonical_json(entry.value):
                    raise CassetteError(
                        f"{path}:{number}: {_key_label(entry.kind, entry.key)} was already "
                        f"given a different value on line {first[0]}"
                    )
        except UnicodeDecodeError:
            raise CassetteError(f"{path}:{number}: not UTF-8 text") from None
        except (ValueError, KeyError, TypeError) as exc:
            if isinstance(exc, CassetteError):
                raise
            if isinstance(exc, UserFileError):
                raise CassetteError(f"{exc.file}:{exc.line}: not a cassette entry: {exc.cause}") from None
            reason = " ".join(str(exc).split()) or type(exc).__name__
            if isinstance(exc, KeyError):
                reason = f"missing field {reason}"
            raise CassetteError(f"{path}:{number}: not a cassette entry: {reason}") from None
    todo = [entry for _number, entry in entries.values()]
    if not overwrite:
        todo, clashes = [], []
        for number, entry in entries.values():
            try:
                held = store.get_entry(entry.kind, entry.key)
            except StoreCorruptError:
                clashes.append((number, entry, "a damaged entry"))
                continue
            if held is None:
                todo.append(entry)
            elif canonical_json(held.value) != canonical_json(entry.value):
                clashes.append((number, entry, "a different value"))
        if clashes:
            number, entry, what = min(clashes, key=lambda c: c[0])
            more = f" (and {len(clashes) - 1} more)" if len(clashes) > 1 else ""
            raise CassetteError(
                f"{path}:{number}: {_key_label(entry.kind, entry.key)} is already recorded in "
                f"{store.directory} with {what}{more}; nothing imported (--overwrite replaces them)"
            )
    for entry in todo:
        store.put(entry.kind, entry.key, entry.value, created=entry.created)
    return len(entries)


def _parse_line(data: Any) -> Entry:
    if not isinstance(data, dict) or not isinstance(data.get("key"), dict):
        raise ValueError("expected an object with a 'key' object")
    extra = set(data) - {"kind", "key", "value", "created"}
    if extra:
        raise ValueError(f"unknown field(s) {', '.join(sorted(extra))}")
    kind = data["kind"]
    if not isinstance(kind, str):
        raise ValueError("'kind' is not a string")
    RecordStore.check_kind(kind)
    if "value" not in data:
        raise KeyError("value")
    created = data.get("created")
    if created is not None and (isinstance(created, bool) or not isinstance(created, int | float)):
        raise ValueError("'created' is not a number")
    return Entry(kind, data["key"], data["value"], time.time() if created is None else float(created))


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


def cache_verify(
    cache_dir: str | Path, kinds: Sequence[str] | None = None
) -> tuple[int, list[StoreCorruptError]]:
    """``medmis cache verify``: read and check every entry.

    Returns:
        How many entries were checked and one error per damaged entry.

    Raises:
        StoreCorruptError: The store as a whole cannot be read.
    """
    with RecordStore(_existing(cache_dir), "replay") as store:
        return store.verify(kinds or None)


def cache_export(
    cache_dir: str | Path, path: str | Path, kinds: Sequence[str] | None = None
) -> int:
    """``medmis cache export``: write a cassette; returns the number of entries."""
    with RecordStore(_existing(cache_dir), "replay") as store:
        return export_cassette(store, path, kinds or None)


def cache_import(cache_dir: str | Path, path: str | Path, *, overwrite: bool = False) -> int:
    """``medmis cache import``: load a cassette (creating the store if needed)."""
    with RecordStore(cache_dir, "record") as store:
        return import_cassette(store, path, overwrite=overwrite)


def cache_prune(
    cache_dir: str | Path,
    older_than_days: float | None = None,
    kind: str | None = None,
    *,
    corrupt: bool = False,
) -> int:
    """``medmis cache prune``: drop expired entries, damaged ones, those older than N days / of a kind.

    Returns:
        The number of entries removed.
    """
    older_than_s = None if older_than_days is None else older_than_days * 86400
    with RecordStore(_existing(cache_dir), "record") as store:
        return store.prune(older_than_s, kind, corrupt=corrupt)
