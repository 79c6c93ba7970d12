"""Source question banks -> :class:`SourceItem`, one reader per format (as the reference
notebook ``InjectionGeneration.ipynb`` reads them; AI-in-Health/MedMisBench).

* ``medqa``: JSONL with ``question``, ``options`` (dict or list) and the answer key
  (``answer_idx`` when present, else ``answer`` as a key or as an option's text).
* ``medmcqa``: ``question``, ``opa``..``opd``, ``cop`` 1-4.
* ``medxpertqa``: reasoning questions only, ``options`` (dict, or its Python literal), ``label``;
  options listed inside the stem are cut off as the reference does.
* ``medjourney``: a folder with ``dp.json``, ``ep.json``, ``mp.json``, ``tp.json`` (one JSON
  object per line, ``prompt`` and ``target``); options are extracted by a model call.
* ``hle``: Parquet (``category``, ``raw_subject``, ``question``, ``answer``, ``image``), keeping
  Biology/Medicine without agronomy, ecology, environmental contamination and veterinary
  medicine, text-only; options are extracted by a model call.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from medmis.experiments.benchmark import DataError
from medmis.tools import UserFileError, json_value

SOURCE_FORMATS: tuple[str, ...] = ("medqa", "medmcqa", "medxpertqa", "medjourney", "hle")
SUBSET_OF: dict[str, str] = {
    "medqa": "MEDMISQA",
    "medmcqa": "MEDMISMCQA",
    "medxpertqa": "MEDMISXPERTQA",
    "medjourney": "MEDMISJOURNEY",
    "hle": "MEDMISHLE",
}
MEDJOURNEY_FILES = ("dp.json", "ep.json", "mp.json", "tp.json")
HLE_CATEGORY = "biology/medicine"
HLE_EXCLUDED = frozenset({"agronomy", "ecology", "environmental contamination", "veterinary medicine"})
# the reference's cut of option lists out of MedXpertQA stems
_XPERT_SPLIT = re.compile(r"\n\s*(?:[Aa][.)]|[\(][Aa][\)]|Options?:|Answer Choices?:)", re.IGNORECASE)
_HAN = re.compile(r"[\u4e00-\u9fff]")


@dataclass(frozen=True)
class SourceItem:
    """A question before generation. ``options``/``gold`` are None until extracted."""

    id: str
    subset: str
    question: str
    options: dict[str, str] | None
    gold: str | None
    gold_text: str | None = None
    language: Literal["en", "zh"] = "en"


def _json_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    text = path.read_text(encoding="utf-8")
    try:
        whole = json_value(text, path)
    except UserFileError as exc:
        if exc.kind != "json":  # too deep or a key twice: JSON Lines would not read it either
            raise DataError(str(exc)) from None
        whole = None
    if isinstance(whole, list):
        yield from ((i, r) for i, r in enumerate(whole) if isinstance(r, dict))
        return
    if isinstance(whole, dict):
        yield 0, whole
        return
    for i, line in enumerate(text.splitlines()):
        if not line.strip():
            continue
        try:
            row = json_value(line, path, i + 1)
        except UserFileError as exc:
            raise DataError(str(exc)) from None
        if isinstance(row, dict):
            yield i, row


def _row_id(row: dict[str, Any], prefix: str, index: int) -> str:
    raw = row.get("id", row.get("question_id"))
    return str(raw).strip() if raw not in (None, "") else f"{prefix}-{index}"


def _medqa(path: Path, subset: str) -> Iterator[SourceItem]:
    for i, row in _json_rows(path):
        raw, question = row.get("options"), str(row.get("question") or "").strip()
        if isinstance(raw, dict):
            options = {str(k).strip().upper(): str(v).strip() for k, v in raw.items()}
        elif isinstance(raw, list):
            options = {chr(65 + j): str(v).strip() for j, v in enumerate(raw)}
        else:
            continue
        key = str(row.get("answer_idx") or row.get("answer") or "").strip()
        gold = key.upper() if key.upper() in options else next((k for k, v in options.items() if v == key), None)
        if question and gold:
            yield SourceItem(_row_id(row, "medqa", i), subset, question, options, gold)


def _medmcqa(path: Path, subset: str) -> Iterator[SourceItem]:
    for i, row in _json_rows(path):
        try:
            cop = int(row.get("cop"))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            continue
        options = {k: str(row.get(f"op{c}") or "").strip() for k, c in zip("ABCD", "abcd", strict=True)}
        question = str(row.get("question") or "").strip()
        if cop in (1, 2, 3, 4) and question and any(options.values()):
            yield SourceItem(_row_id(row, "medmcqa", i), subset, question, options, "ABCD"[cop - 1])


def _medxpertqa(path: Path, subset: str) -> Iterator[SourceItem]:
    for i, row in _json_rows(path):
        kind = row.get("question_type", row.get("type", ""))
        if kind and "reasoning" not in str(kind).lower():
            continue
        options = row.get("options")
        if isinstance(options, str):
            try:
                options = ast.literal_eval(options)
            except (ValueError, SyntaxError):
                continue
        if not isinstance(options, dict) or not options or not row.get("question") or "label" not in row:
            continue
        opts = {str(k).strip().upper(): str(v).strip() for k, v in options.items()}
        gold = str(row["label"]).strip().upper()
        question = _XPERT_SPLIT.split(str(row["question"]))[0].strip()
        if gold in opts:
            yield SourceItem(_row_id(row, "medxpertqa", i), subset, question, opts, gold)


def _medjourney(folder: Path, subset: str) -> Iterator[SourceItem]:
    found = [folder / n for n in MEDJOURNEY_FILES if (folder / n).exists()]
    if not found:
        raise DataError(f"{folder}: no MedJourney files ({', '.join(MEDJOURNEY_FILES)})")
    for path in found:
        for i, row in _json_rows(path):
            prompt, target = str(row.get("prompt") or "").strip(), str(row.get("target") or "").strip()
            if prompt and target:
                yield SourceItem(_row_id(row, f"medjourney-{path.stem}", i), subset, prompt, None, None,
                                 gold_text=target, language="zh" if _HAN.search(prompt) else "en")


def _hle(source: Path, subset: str) -> Iterator[SourceItem]:
    import pyarrow.parquet as pq

    files = sorted(source.glob("*.parquet")) if source.is_dir() else [source]
    if not files:
        raise DataError(f"{source}: no Parquet files")
    for path in files:
        for i, row in enumerate(pq.read_table(path).to_pylist()):
            if str(row.get("category", "")).strip().lower() != HLE_CATEGORY:
                continue
            if str(row.get("raw_subject", "")).strip().lower() in HLE_EXCLUDED or row.get("image"):
                continue
            question, answer = str(row.get("question") or "").strip(), str(row.get("answer") or "").strip()
            if question and answer:
                yield SourceItem(_row_id(row, "hle", i), subset, question, None, None, gold_text=answer)


_READERS = {"medqa": _medqa, "medmcqa": _medmcqa, "medxpertqa": _medxpertqa, "medjourney": _medjourney, "hle": _hle}


def detect_format(source: Path) -> str:
    """Guess a source's format from its layout and first row (``release`` for released rows)."""
    if source.is_dir():
        if any((source / n).exists() for n in MEDJOURNEY_FILES):
            return "medjourney"
        if any(source.glob("*.parquet")):
            return "hle"
        raise DataError(f"{source}: cannot tell the source format; pass --source-format")
    if source.suffix.lower() == ".parquet":
        import pyarrow.parquet as pq

        names = set(pq.read_schema(source).names)
        return "hle" if {"category", "raw_subject"} <= names else "release"
    first = next((row for _, row in _json_rows(source)), None)
    if first is None:
        raise DataError(f"{source}: no rows")
    keys = set(first)
    if "injecta" in keys or "injection_content" in keys:
        return "release"
    if "cop" in keys:
        return "medmcqa"
    if "label" in keys and "options" in keys:
        return "medxpertqa"
    if "options" in keys and ("answer" in keys or "answer_idx" in keys):
        return "medqa"
    raise DataError(f"{source}: cannot tell the source format from its columns; pass --source-format")


def read_source(source: Path, fmt: str, subset: str | None = None) -> list[SourceItem]:
    """All usable questions of a source, in file order. ``subset`` overrides the default name.

    Raises:
        DataError: Unknown format, unreadable file, or no usable question.
    """
    if fmt not in _READERS:
        raise DataError(f"unknown source format {fmt!r} (known: {', '.join(SOURCE_FORMATS)}, release)")
    if not source.exists():
        raise DataError(f"{source}: no such file or folder")
    items = list(_READERS[fmt](source, subset or SUBSET_OF[fmt]))
    ids = [i.id for i in items]
    if len(set(ids)) != len(ids):
        raise DataError(f"{source}: repeated question ids")
    if not items:
        raise DataError(f"{source}: no usable {fmt} questions")
    return items


def match_gold(options: dict[str, str], gold_text: str) -> str | None:
    """The key of the option that is the free-text answer: exact text, then a letter prefix
    (``"B"`` for ``"B) ..."``), then containment; None when nothing matches."""
    target = gold_text.strip().lower()
    texts = {k: v.strip().lower() for k, v in options.items()}
    for k, v in texts.items():
        if v == target:
            return k
    if len(target) == 1 and target.isalpha():
        hit = [k for k, v in texts.items() if re.match(rf"\(?{re.escape(target)}[).:]\s", v)]
        return hit[0] if len(hit) == 1 else None
    hits = [k for k, v in texts.items() if target and target in v]
    return hits[0] if len(hits) == 1 else None
