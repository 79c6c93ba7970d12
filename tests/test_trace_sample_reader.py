"""The report's trace reader skips lines by their head only where a full parse would drop them.

Against a reference that parses every line of a text-mode read: the runner's lines, legacy
lines without ``subset``, escaped and non-ASCII ids, ids that are suffixes of others, other
key orders, carriage returns, invalid UTF-8, blank, torn and non-object lines, and lines
longer than the read block.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from medmis.experiments.reporting import _cases
from medmis.experiments.reporting._cases import _read_jsonl


def _reference(path: Path, items: set[str] | None) -> list[dict[str, Any]]:
    out = []
    with path.open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not (isinstance(obj, dict) and obj.get("item_id") and obj.get("protocol") in _cases._PROTOCOLS):
                continue
            key = f"{obj.get('subset') or ''}/{obj['item_id']}"
            if items is None or key in items or (not obj.get("subset") and any(k.endswith("/" + str(obj["item_id"])) for k in items)):
                out.append(obj)
    return out


def _line(item_id: Any, subset: str | None = "MEDMISQA", *, legacy: bool = False, pad: int = 0, **kw: Any) -> str:
    head: dict[str, Any] = {"model": "m/a", "defender": 'de"f\\', "protocol": kw.pop("protocol", "type1"),
                            "item_id": item_id}
    if not legacy:
        head["subset"] = subset
    return json.dumps({**head, "target": "B", "raw": "x" * pad, **kw}, ensure_ascii=kw.pop("ascii", False))


def _lines() -> list[bytes]:
    lines = [_line(f"q{i}", pad=i * 7) for i in range(40)]
    lines += [_line("q3", "MEDMISHLE"), _line("q3", legacy=True), _line("x/q5", legacy=True),
              _line("é-ü", "MEDMISHLE"), json.dumps(json.loads(_line("é-ü", "MEDMISHLE")), ensure_ascii=True),
              _line('it"s\\', "MEDMISQA"), _line("q7", legacy=True, pad=300_000), _line("q1", ""),
              _line(12, legacy=True), _line("q8", protocol="other"), "[1, 2]", "", "   ",
              json.dumps({"item_id": "q9", "protocol": "clean", "model": "m/a"}),
              json.dumps({"model": "m/a", "defender": "d", "protocol": "clean", "item_id": "q9",
                          "subset": "MEDMISXPERTQA"})]
    raw = [s.encode() for s in lines]
    raw.insert(5, b'{"model": "m/a", "defender": "d", "protocol": "clean", "item_id": "q2", "subset": "\xff\xfe"}')
    raw.insert(9, _line("q4").encode().replace(b'"raw": "', b'"raw": "a\rb'))  # text mode splits here
    raw.insert(12, _line("q10", legacy=True).encode() + b"\r")
    raw.append(_line("q11").encode()[:30])  # torn last line
    return raw


@pytest.mark.parametrize("block", [64, 1000, 8 << 20])
@pytest.mark.parametrize("items", [
    {"MEDMISQA/q3", "MEDMISHLE/q3", "MEDMISQA/q12"},
    {"MEDMISHLE/é-ü", 'MEDMISQA/it"s\\', "MEDMISXPERTQA/q9", "A/x/q5"},
    {"MEDMISQA/q4", "MEDMISQA/q10", "MEDMISQA/q7", "/q1", "MEDMISQA/q2", "MEDMISQA/q11", "MEDMISQA/12"},
    set(),
])
def test_reader_equals_a_full_parse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int,
                                    items: set[str]) -> None:
    monkeypatch.setattr(_cases, "_BLOCK", block)
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\n".join(_lines()))
    got = _read_jsonl(path, items)
    assert got == _reference(path, items)
    if items:
        assert got
    assert _read_jsonl(path) == _reference(path, None)
