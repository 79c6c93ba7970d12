"""Trace lines of one case, found through a per-file index of byte offsets.

A trace file holds one JSON line per case of a (model, defender), hundreds of megabytes for
the full release. The first look-up in a file reads its key fields line by line (a regex on
the line's head, ``json.loads`` when the head has another layout) and keeps
``key -> (offset, length)`` of the latest line per key; later look-ups read one line.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

from medmis.experiments.reporting import RAW_LIMIT, agent_view, clip_text, question_from_trace
from medmis.tools import json_value

TraceKey = tuple[str, str, str, str, str | None, int]

_STR = r'"((?:[^"\\]|\\.)*)"'
# The runner writes the key fields first, in this order (json.dumps default separators).
_HEAD = re.compile(
    rb'\{"model": ' + _STR.encode() + rb', "defender": ' + _STR.encode() + rb', "protocol": '
    + _STR.encode() + rb', "item_id": ' + _STR.encode() + rb', "subset": ' + _STR.encode()
    + rb', "target": (?:' + _STR.encode() + rb'|null),(?: "epoch": (\d+),)?')

_indexes: dict[Path, tuple[int, dict[TraceKey, tuple[int, int]]]] = {}
_lock = threading.Lock()


def _unquote(raw: bytes) -> str:
    return str(json.loads(b'"' + raw + b'"'))


def _key_of(line: bytes) -> TraceKey | None:
    m = _HEAD.match(line)
    if m:
        model, defender, protocol, item_id, subset, target, epoch = m.groups()
        return (_unquote(model), _unquote(defender), _unquote(protocol),
                f"{_unquote(subset)}/{_unquote(item_id)}",
                None if target is None else _unquote(target), int(epoch or 0))
    try:
        obj = json_value(line, "trace", None)
    except ValueError:
        return None  # a torn last line of a killed run (or a line no reader accepts)
    if not isinstance(obj, dict) or not obj.get("item_id"):
        return None
    return (str(obj.get("model")), str(obj.get("defender")), str(obj.get("protocol")),
            f"{obj.get('subset') or ''}/{obj['item_id']}", obj.get("target"), int(obj.get("epoch") or 0))


def _index(path: Path) -> dict[TraceKey, tuple[int, int]]:
    size = path.stat().st_size
    with _lock:
        cached = _indexes.get(path)
        if cached and cached[0] == size:
            return cached[1]
        index: dict[TraceKey, tuple[int, int]] = {}
        offset = 0
        with path.open("rb") as fh:
            for line in fh:
                key = _key_of(line)
                if key is not None:
                    index[key] = (offset, len(line))  # the latest line of a key wins
                offset += len(line)
        _indexes[path] = (size, index)
        return index


def read_trace(run_dir: Path, trace_file: str, key: TraceKey) -> dict[str, Any] | None:
    """The latest trace line of ``key`` in ``run_dir/trace_file``, or None."""
    path = (run_dir / trace_file).resolve()
    if run_dir.resolve() not in path.parents or not path.is_file():
        return None  # a record naming a file outside the run folder is not followed
    at = _index(path).get(key)
    if at is None:
        return None
    with path.open("rb") as fh:
        fh.seek(at[0])
        try:
            obj = json_value(fh.read(at[1]), path, None)
        except ValueError:
            return None
    return obj if isinstance(obj, dict) else None


def trace_view(run_dir: Path, rec: dict[str, Any]) -> dict[str, Any]:
    """Question, options, injected sentences, raw answer and agent steps of one case."""
    trace = None
    if rec.get("trace_file"):
        key = (rec["model"], rec["defender"], rec["protocol"], rec["item_key"], rec["target"], int(rec.get("epoch") or 0))
        trace = read_trace(run_dir, str(rec["trace_file"]), key)
    if trace is None:
        return {"trace": False}
    found = question_from_trace(trace)
    context = [{"text": clip_text(c.get("text", ""), RAW_LIMIT), "option": c.get("option"),
                "truthful": c.get("truthful")}
               for c in trace.get("context") or [] if isinstance(c, dict)]
    return {"trace": True, "question": found[0] if found else "",
            "options": found[1] if found else {}, "context": context,
            "raw": clip_text(trace.get("raw")), "agent": agent_view(trace)}
