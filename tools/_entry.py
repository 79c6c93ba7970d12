"""What one record/replay store entry is on disk: its key, its text and the checks on reading it.

An entry is stored under the disk key ``"<kind>:<sha256 of the canonical key JSON>"`` as the
canonical JSON text of ``{"created", "key", "kind", "sha256", "value"}``, where ``sha256`` is the
hash of the value's canonical JSON. :func:`decode_entry` refuses any text that does not check out,
so a value edited on disk, or moved under another entry's disk key, is never taken for a
recording.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

KIND_RE = re.compile(r"[a-z][a-z0-9_.-]*")
_FIELDS = frozenset({"kind", "key", "value", "created", "sha256"})


def canonical_json(obj: Any) -> str:
    """The one JSON spelling of ``obj``: sorted keys, no spaces, UTF-8 kept as is.

    Raises:
        TypeError: ``obj`` is not JSON-able.
    """
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def key_digest(kind: str, key: dict[str, Any]) -> str:
    """The store key for a call: ``"<kind>:<sha256 of canonical key JSON>"``."""
    return f"{kind}:{hashlib.sha256(canonical_json(key).encode('utf-8')).hexdigest()}"


def value_hash(value: Any) -> str:
    """The content hash stored with a value: SHA-256 of its canonical JSON, in hex."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Entry:
    """One stored call: its kind, the original key arguments, the value and when it was stored."""

    kind: str
    key: dict[str, Any]
    value: Any
    created: float

    def to_json(self) -> str:
        """The stored text: canonical JSON of the four fields plus ``sha256`` of the value."""
        return canonical_json(
            {
                "kind": self.kind,
                "key": self.key,
                "value": self.value,
                "created": self.created,
                "sha256": value_hash(self.value),
            }
        )


def decode_entry(disk_key: str, raw: Any) -> Entry:
    """Parse and check the stored text found at ``disk_key``.

    Raises:
        ValueError: The text is not a sound entry for this disk key; the message is the reason
            in a few words.
    """
    if not isinstance(raw, str):
        raise ValueError(f"stored {type(raw).__name__}, not JSON text")
    try:
        data = json.loads(raw)
    except ValueError:
        raise ValueError("stored text is not valid JSON") from None
    if not isinstance(data, dict):
        raise ValueError("stored JSON is not an entry object")
    if set(data) == _FIELDS - {"sha256"}:
        # stores written before entries carried hashes: nothing vouches for these values
        raise ValueError("entry has no content hash (stored by an older medmis)")
    if set(data) != _FIELDS:
        raise ValueError(f"entry fields are {sorted(data)}")
    kind, key, value, created = data["kind"], data["key"], data["value"], data["created"]
    if not (isinstance(kind, str) and isinstance(key, dict)):
        raise ValueError("entry kind or key has the wrong type")
    if not isinstance(created, int | float) or isinstance(created, bool):
        raise ValueError("entry timestamp is not a number")
    if value_hash(value) != data["sha256"]:
        raise ValueError("value does not match its content hash")
    if key_digest(kind, key) != disk_key:
        raise ValueError("stored key does not hash to this entry's disk key")
    return Entry(kind, key, value, float(created))
