"""What the simulated examinee "knows": questions and their answers, from an answer key.

The examinee's knowledge is a list of :class:`Known` entries (a question, its option texts and
the text of its correct option). Nothing else of a benchmark row is read: the injected
sentences, their content and provenance labels and every truth flag stay out of the
examinee, so no decision can key on them.

The answer key is a data file or a folder of them in the benchmark's released flattened
schema (``question``, ``answer``, ``opa``..``opz``; JSON Lines, JSON lists, CSV, or Parquet
when ``pyarrow`` is installed). This module reads only those three kinds of columns itself,
so that the agents layer does not depend on the benchmark loader (agents sit below the core
types). Rows it cannot read are skipped: a question it does not know is simply answered
from general principles, as a real model would.

Questions are matched on their text with case, whitespace and punctuation ignored
(:func:`squash`); several entries with one question are told apart by their option texts.
"""

from __future__ import annotations

import csv
import hashlib
import io
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from medmis.tools import UserFileError, json_value

DATA_SUFFIXES: tuple[str, ...] = (".jsonl", ".json", ".csv", ".parquet")
_LETTERS = "abcdefghijklmnopqrstuvwxyz"
_GOLD = re.compile(r"[(\[]?\s*(?:option\s*)?([A-Za-z]|\d+)\s*[)\]]?\s*[.:]?", re.I)


def squash(text: str) -> str:
    """Lower-case letters and digits only: survives datamarking, delimiters and spacing."""
    return "".join(ch for ch in text.casefold() if ch.isalnum())


@dataclass(frozen=True)
class Known:
    """One question the examinee has seen, and the text of its correct option."""

    question: str
    options: tuple[str, ...]
    answer: str


def known_from_items(items: Iterable[Any]) -> list[Known]:
    """Knowledge from item-like objects (``question``, ``options`` mapping, ``gold`` key).

    Only those three attributes are read (duck-typed, so this layer needs no benchmark types).
    """
    out = []
    for item in items:
        options = dict(item.options)
        known = Known(item.question, tuple(options.values()), options[item.gold])
        out.append(known)
        # the paper preset shows a stem with embedded options as released
        released = getattr(item, "released_question", None)
        if released:
            out.append(Known(released, known.options, known.answer))
    return out


def _cell(value: Any) -> str | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, float):
        if value != value:  # NaN
            return None
        value = str(int(value)) if value.is_integer() else repr(value)
    text = str(value).strip()
    return text if text and text.casefold() not in {"nan", "none", "null", '"'} else None


def _embedded(question: str, numeric: bool) -> tuple[str, list[str]] | None:
    """``stem (A) x (B) y`` split into the stem and the option texts (markers in order)."""
    keys = [str(i) for i in range(1, 27)] if numeric else [c.upper() for c in _LETTERS]
    start = question.find(f"({keys[0]})")
    while start != -1:
        at = [start]
        for key in keys[1:]:
            nxt = question.find(f"({key})", at[-1] + 1)
            if nxt == -1:
                break
            at.append(nxt)
        if len(at) >= 2:
            ends = [*at[1:], len(question)]
            texts = [question[a + len(f"({keys[i]})") : ends[i]].strip() for i, a in enumerate(at)]
            return question[:start].strip(), texts
        start = question.find(f"({keys[0]})", start + 1)
    return None


def known_from_row(row: Any) -> Known | None:
    """One released-schema row as knowledge, or None when it cannot be read."""
    if not isinstance(row, dict):
        return None
    question, raw = _cell(row.get("question")), _cell(row.get("answer"))
    if question is None or raw is None:
        return None
    m = _GOLD.fullmatch(raw)
    gold = m.group(1).upper() if m else None
    numeric = gold is not None and gold.isdigit()
    texts = [t for t in (_cell(row.get(f"op{c}")) for c in _LETTERS) if t is not None]
    if not texts:
        found = _embedded(question, numeric)
        if found is None:
            return None
        question, texts = found
    keys = [str(i + 1) if numeric else _LETTERS[i].upper() for i in range(len(texts))]
    by_key = dict(zip(keys, texts, strict=True))
    answer = by_key.get(gold or "") or next((t for t in texts if t.casefold() == raw.casefold()), None)
    return Known(question, tuple(texts), answer) if answer else None


def data_files(path: Path) -> list[Path]:
    """The data files of an answer key: the file itself, or a folder's files in path order."""
    if path.is_file():
        return [path]
    return sorted(
        p
        for p in path.rglob("*")
        if p.is_file()
        and p.suffix.lower() in DATA_SUFFIXES
        and not any(part.startswith(".") for part in p.relative_to(path).parts)
    )


def _rows(file: Path) -> list[Any]:
    data = file.read_bytes()
    suffix = file.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq  # optional: only an answer key in Parquet needs it

        return list(pq.read_table(io.BytesIO(data)).to_pylist())
    text = data.decode("utf-8", errors="replace").removeprefix("\ufeff")
    if suffix == ".csv":
        return list(csv.DictReader(io.StringIO(text)))
    if text.lstrip().startswith("["):
        loaded = json_value(text, file)
        return loaded if isinstance(loaded, list) else []
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json_value(line, file, number))
            except UserFileError as exc:
                if exc.kind != "json":  # nested too deep, a key twice: never skipped silently
                    raise
    return rows


def load_knowledge(path: Path) -> list[Known]:
    """Every readable row of an answer key file or folder.

    Raises:
        FileNotFoundError: When ``path`` does not exist.
    """
    if not path.exists():
        raise FileNotFoundError(f"simulated examinee: answer key {path} not found")
    out: list[Known] = []
    for file in data_files(path):
        out.extend(k for k in map(known_from_row, _rows(file)) if k is not None)
    return out


def answer_key_digest(path: Path) -> str:
    """A digest of an answer key's files, so a cache never serves one key's answers for another."""
    if path.is_file():
        return f"{path.name}:{hashlib.sha256(path.read_bytes()).hexdigest()[:16]}"
    if not path.is_dir():
        return f"{path.name}:missing"
    digest = hashlib.sha256()
    for f in data_files(path):  # a folder of subset files, e.g. the whole release
        digest.update(f.relative_to(path).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(f.read_bytes()).digest())
    return f"{path.name}:{digest.hexdigest()[:16]}"


class Knowledge:
    """Known questions indexed by squashed question text."""

    def __init__(self, known: Sequence[Known]) -> None:
        self.by_question: dict[str, list[Known]] = {}
        for k in known:
            self.by_question.setdefault(squash(k.question), []).append(k)
            # a released stem that also embeds its options "(A) x (B) y" is shown without them
            # under the toolkit preset: know it by its bare stem too
            if "(" in k.question:
                for numeric in (False, True):
                    split = _embedded(k.question, numeric)
                    if split and split[0] and [squash(t) for t in split[1]] == [squash(o) for o in k.options]:
                        self.by_question.setdefault(squash(split[0]), []).append(k)

    def __len__(self) -> int:
        return len({id(k) for found in self.by_question.values() for k in found})

    def lookup(self, question: str, options: Sequence[str]) -> Known | None:
        """The entry for a question as shown, told apart by its option texts; None if unknown."""
        found = self.by_question.get(squash(question), [])
        if not found:
            return None
        shown = {squash(o) for o in options}
        best = max(found, key=lambda k: sum(squash(o) in shown for o in k.options))
        return best if squash(best.answer) in shown or not shown else None
