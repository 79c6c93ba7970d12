"""Loading and validating MedMisBench-style rows into ``Item`` objects.

Rows arrive in the benchmark's released flattened schema (``id``, ``question``, ``answer``,
``opa``..``opz``, ``injecta``..``injectz``, ``injection_content``, ``injection_provenance``)
from JSON Lines, JSON, CSV or Parquet files, a directory of such files, or the Hugging Face
hub. Every row is checked and *all* problems are collected before anything is returned, so a
malformed file never turns into a silently half-loaded dataset.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO

from ._types import CONTENT_TYPES, PROVENANCES, SUBSETS, Item

LoadMode = Literal["strict", "skip"]

HUB_REPO = "AI4HealthResearch/MedMisBench"
DATA_SUFFIXES: tuple[str, ...] = (".jsonl", ".json", ".csv", ".parquet")

_LETTERS = "abcdefghijklmnopqrstuvwxyz"
_UNLABELLED = "(none)"
_MAX_ISSUES_IN_MESSAGE = 50


# --------------------------------------------------------------------------- issues


@dataclass(frozen=True)
class RowIssue:
    """One problem found in a source row.

    Attributes:
        file: The file (or hub address) the row came from.
        line: 1-based physical line for JSONL/JSON/CSV, 1-based row number for Parquet and
            hub rows; None for problems that concern the whole file.
        item_id: The row's id when it could be read.
        field: The column at fault (e.g. ``answer``, ``injectb``) or ``row``/``file``.
        message: What is wrong, in a few words.
    """

    file: str
    line: int | None
    item_id: str | None
    field: str
    message: str

    def __str__(self) -> str:
        line = "?" if self.line is None else str(self.line)
        item = "?" if self.item_id is None else self.item_id
        return f"{self.file}:{line}: id={item}: {self.field}: {self.message}"


class DataError(ValueError):
    """A data source could not be loaded; ``issues`` lists every problem found (may be empty
    when the source itself could not be opened)."""

    def __init__(self, message: str, issues: Iterable[RowIssue] = ()) -> None:
        self.issues: list[RowIssue] = list(issues)
        if self.issues:
            shown = [str(i) for i in self.issues[:_MAX_ISSUES_IN_MESSAGE]]
            hidden = len(self.issues) - len(shown)
            if hidden:
                shown.append(f"... and {hidden} more")
            message = message + "\n" + "\n".join(shown)
        super().__init__(message)


# --------------------------------------------------------------------------- dataset


@dataclass
class Dataset:
    """Items loaded from one source, with the problems met on the way.

    Attributes:
        items: Valid items in source order.
        issues: Problems found (always empty after a strict load).
        source: The path or hub address that was loaded.
        sha256: SHA-256 of the file bytes (of every file for a directory, of the canonical
            item JSON for hub loads), so runs can record exactly which data they used.
    """

    items: list[Item]
    issues: list[RowIssue] = field(default_factory=list)
    source: str = ""
    sha256: str = ""

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[Item]:
        return iter(self.items)

    def counts(self) -> dict[str, dict[str, dict[str, int]]]:
        """Item counts nested as subset -> content type -> provenance.

        Missing labels are counted under ``"(none)"``.
        """
        out: dict[str, dict[str, dict[str, int]]] = {}
        for it in self.items:
            by_content = out.setdefault(it.subset, {})
            by_prov = by_content.setdefault(it.content_type or _UNLABELLED, {})
            prov = it.provenance or _UNLABELLED
            by_prov[prov] = by_prov.get(prov, 0) + 1
        return out


# --------------------------------------------------------------------------- label tables


def _label_key(text: str) -> str:
    # Compare labels on their words only, so "A & B", "A/B", "A / B", "a and b" and
    # "Self-Diagnosis" vs "SelfDiagnosis" all meet on the same key.
    words = [w for w in re.findall(r"[a-z0-9]+", text.lower()) if w != "and"]
    return "".join(words)


def _alias_table(canonical: Iterable[str], aliases: Mapping[str, str]) -> dict[str, str]:
    table = {_label_key(name): name for name in canonical}
    for alias, name in aliases.items():
        table[_label_key(alias)] = name
    return table


_CONTENT = _alias_table(
    CONTENT_TYPES,
    {
        "Relationship & Sequence Inversion": "Relationship / Sequence Inversion",
        "Relationship Inversion": "Relationship / Sequence Inversion",
        "Sequence Inversion": "Relationship / Sequence Inversion",
        "Parameter & Threshold Shift": "Threshold / Reference Corruption",
        "Threshold Shift": "Threshold / Reference Corruption",
        "Threshold Corruption": "Threshold / Reference Corruption",
        "Reference Corruption": "Threshold / Reference Corruption",
        "Cue Remap": "Cue Remapping",
        "Spurious Cue Anchoring": "Spurious Anchoring",
        "Exception": "Exception Poisoning",
    },
)
_PROVENANCE = _alias_table(
    PROVENANCES,
    {
        "Neutral": "Neutral False Statement",
        "Neutral Statement": "Neutral False Statement",
        "Patient": "Patient Self-Diagnosis / Belief / Claim",
        "Patient Self-Diagnosis": "Patient Self-Diagnosis / Belief / Claim",
        "Patient Claim": "Patient Self-Diagnosis / Belief / Claim",
        "Patient Belief": "Patient Self-Diagnosis / Belief / Claim",
        "Authority": "Authority (Guideline / Discharge Note / SOP)",
        "Authority (Guideline, Discharge Note, SOP)": "Authority (Guideline / Discharge Note / SOP)",
    },
)
_SUBSET = _alias_table(SUBSETS, {s.removeprefix("MEDMIS"): s for s in SUBSETS})


def _canonical(label: str | None, table: Mapping[str, str], kind: str) -> str | None:
    if label is None or not str(label).strip():
        return None
    found = table.get(_label_key(str(label)))
    if found is None:
        raise ValueError(f"unknown {kind} label {label!r}")
    return found


def canonical_content(label: str | None) -> str | None:
    """Map a content-corruption label (canonical name, alias or spelling variant) to its
    canonical name.

    Args:
        label: e.g. ``"Parameter & Threshold Shift"`` or ``"cue remapping"``.

    Returns:
        The canonical name from ``CONTENT_TYPES``, or None when the label is blank.

    Raises:
        ValueError: The label is not a known content type or alias.
    """
    return _canonical(label, _CONTENT, "content type")


def canonical_provenance(label: str | None) -> str | None:
    """Map a provenance label (canonical name, alias or spelling variant) to its canonical
    name.

    Args:
        label: e.g. ``"Neutral"`` or ``"Authority (Guideline, Discharge Note, SOP)"``.

    Returns:
        The canonical name from ``PROVENANCES``, or None when the label is blank.

    Raises:
        ValueError: The label is not a known provenance or alias.
    """
    return _canonical(label, _PROVENANCE, "provenance")


def canonical_subset(name: str) -> str:
    """Canonical subset name (``"medmis-hle"``, ``"HLE"`` -> ``"MEDMISHLE"``); names that
    match no known subset are returned stripped, so custom data sets keep their own name."""
    return _SUBSET.get(_label_key(name), name.strip())


def _subset_from_path(path: Path) -> str | None:
    # Longest names first so that a name containing another can never be mis-read.
    for part in (path.stem, *(p.name for p in path.parents)):
        key = re.sub(r"[^A-Z0-9]", "", part.upper())
        for name in sorted(SUBSETS, key=len, reverse=True):
            if name in key:
                return name
    return None


# --------------------------------------------------------------------------- row parsing

_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_LATIN = re.compile(r"[A-Za-z]")
_BAD_TEXT = re.compile("[\ufffd\ud800-\udfff]")
_GOLD = re.compile(r"[(\[]?\s*(?:option\s*)?([A-Za-z]|\d+)\s*[)\]]?\s*[.:]?", re.IGNORECASE)


def _language(text: str) -> Literal["en", "zh"]:
    han = len(_HAN.findall(text))
    latin = len(_LATIN.findall(text))
    return "zh" if han > latin else "en"


class _BadCell(Exception):
    pass


def _cell(value: Any) -> str | None:
    """A cell as stripped text; None for empty/missing (None, NaN, blank)."""
    if value is None:
        return None
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _BadCell("undecodable bytes (not valid UTF-8)") from exc
    if isinstance(value, bool):
        raise _BadCell(f"unexpected value type {type(value).__name__}")
    if isinstance(value, float):
        if math.isnan(value):
            return None
        # Parquet/CSV tooling turns digit answers and ids into floats; "2.0" must stay "2".
        value = str(int(value)) if value.is_integer() else repr(value)
    elif isinstance(value, int):
        value = str(value)
    if not isinstance(value, str):
        raise _BadCell(f"unexpected value type {type(value).__name__}")
    text = value.strip()
    return text or None


def _recover_embedded(question: str, numeric: bool) -> tuple[str, list[str]] | None:
    """Split ``stem (A) x (B) y`` into the stem and the option texts, or None.

    Markers must run in order from the first key, so a stray "(B)" inside a stem is not
    mistaken for an option list.
    """
    keys = [str(i) for i in range(1, 27)] if numeric else [c.upper() for c in _LETTERS]
    start = question.find(f"({keys[0]})")
    while start != -1:
        positions = [start]
        for key in keys[1:]:
            nxt = question.find(f"({key})", positions[-1] + 1)
            if nxt == -1:
                break
            positions.append(nxt)
        if len(positions) >= 2:
            bounds = [*positions, len(question)]
            texts = [
                question[a + len(f"({keys[i]})") : bounds[i + 1]].strip()
                for i, a in enumerate(positions)
            ]
            return question[:start].strip(), texts
        start = question.find(f"({keys[0]})", start + 1)
    return None


def _normalise_gold(raw: str) -> str | None:
    m = _GOLD.fullmatch(raw.strip())
    return m.group(1).upper() if m else None


@dataclass
class _Ctx:
    """Where rows come from and how their subset is decided."""

    file: str
    file_subset: str | None
    subset_arg: str | None


def _read_cells(
    row: Mapping[Any, Any], file: str, line: int | None
) -> tuple[dict[str, str | None], list[RowIssue]]:
    """Every cell of a row as stripped text, with a problem for each unreadable one."""
    issues: list[RowIssue] = []
    cells: dict[str, str | None] = {}
    for name, value in row.items():
        if not isinstance(name, str):  # csv.DictReader files surplus values under None
            issues.append(RowIssue(file, line, None, "row", "more fields than the header"))
            continue
        try:
            text = _cell(value)
        except _BadCell as exc:
            issues.append(RowIssue(file, line, None, name, str(exc)))
            continue
        if text is not None and _BAD_TEXT.search(text):
            issues.append(
                RowIssue(file, line, None, name, "undecodable text (invalid UTF-8 or U+FFFD)")
            )
        cells[name] = text
    return cells, issues


def _row_to_item(row: Any, line: int | None, ctx: _Ctx) -> tuple[Item | None, list[RowIssue]]:
    """Turn one raw row into an Item, or report why it cannot be one.

    Returns ``(None, [])`` for a row that belongs to a different subset than requested.
    """
    if not isinstance(row, Mapping):
        return None, [RowIssue(ctx.file, line, None, "row", "expected an object with named fields")]

    cells, issues = _read_cells(row, ctx.file, line)
    item_id = cells.get("id")
    if item_id is None and "id" not in {i.field for i in issues}:
        issues.append(RowIssue(ctx.file, line, None, "id", "missing or empty id"))
    # Issues raised before the id was known get it attached now.
    issues = [RowIssue(i.file, i.line, item_id, i.field, i.message) for i in issues]

    def bad(field_name: str, message: str) -> None:
        issues.append(RowIssue(ctx.file, line, item_id, field_name, message))

    # Subset: the row's own column, else the --subset argument, else the file name.
    row_subset = cells.get("subset")
    if row_subset is not None:
        subset: str | None = canonical_subset(row_subset)
        if ctx.subset_arg is not None and subset != ctx.subset_arg:
            return None, []
    else:
        subset = ctx.subset_arg or ctx.file_subset
    if subset is None:
        bad("subset", "no subset column, none in the file name and no subset= given")

    question = cells.get("question")
    if question is None and "question" not in {i.field for i in issues}:
        bad("question", "missing or empty question")

    raw_answer = cells.get("answer")
    gold = _normalise_gold(raw_answer) if raw_answer is not None else None
    numeric = gold is not None and gold.isdigit()

    # Options keep their column position so that injections stay aligned with them.
    columns = {c: cells.get(f"op{c}") for c in _LETTERS}
    positions = [i for i, c in enumerate(_LETTERS) if columns[c] is not None]
    texts: dict[int, str] = {i: columns[_LETTERS[i]] or "" for i in positions}
    if not positions and question is not None:
        recovered = _recover_embedded(question, numeric)
        if recovered is not None:
            question, found = recovered
            texts = dict(enumerate(found))
            if not question:
                bad("question", "question holds only options, no stem")
                question = None

    def key_of(pos: int) -> str:
        return str(pos + 1) if numeric else _LETTERS[pos].upper()

    options = {key_of(p): t for p, t in sorted(texts.items())}
    if len(options) < 2:
        bad("options", f"fewer than two options (found {len(options)})")

    if raw_answer is None:
        if "answer" not in {i.field for i in issues}:
            bad("answer", "missing or empty answer")
    elif gold is None:
        # Some generators store the gold option's text instead of its key.
        by_text = {t.casefold(): k for k, t in options.items()}
        gold = by_text.get(raw_answer.casefold())
        if gold is None:
            bad("answer", f"cannot read a gold key from {raw_answer!r}")
    if gold is not None and options and gold not in options:
        bad("answer", f"gold key {gold!r} is not among the options {', '.join(options)}")

    contexts: dict[str, str] = {}
    for i, c in enumerate(_LETTERS):
        sentence = cells.get(f"inject{c}")
        if i in texts:
            key = key_of(i)
            if sentence is not None:
                contexts[key] = sentence
            elif key != gold and f"inject{c}" not in {x.field for x in issues}:
                bad(f"inject{c}", f"wrong option {key} has no false sentence")
        elif sentence is not None:
            bad(f"inject{c}", f"sentence given for option {c.upper()}, which does not exist")

    labels: dict[str, str | None] = {}
    for column, convert in (
        ("injection_content", canonical_content),
        ("injection_provenance", canonical_provenance),
    ):
        try:
            labels[column] = convert(cells.get(column))
        except ValueError as exc:
            bad(column, str(exc))

    if issues:
        return None, issues
    assert item_id is not None and question is not None and gold is not None
    assert subset is not None
    item = Item(
        id=item_id,
        subset=subset,
        question=question,
        options=options,
        gold=gold,
        contexts=contexts,
        content_type=labels.get("injection_content"),
        provenance=labels.get("injection_provenance"),
        language=_language(" ".join([question, *options.values()])),
    )
    return item, []


# --------------------------------------------------------------------------- file readers

_Row = tuple[int | None, Any]


def _read_jsonl(data: bytes, file: str) -> tuple[list[_Row], list[RowIssue]]:
    rows: list[_Row] = []
    issues: list[RowIssue] = []
    for lineno, raw in enumerate(data.split(b"\n"), 1):
        # Decode with replacement: the U+FFFD then marks the exact field for the report.
        text = raw.decode("utf-8", errors="replace").strip()
        if lineno == 1:
            text = text.removeprefix("\ufeff")
        if not text:
            continue
        try:
            rows.append((lineno, json.loads(text)))
        except json.JSONDecodeError as exc:
            issues.append(RowIssue(file, lineno, None, "row", f"unparsable JSON: {exc.msg}"))
    return rows, issues


def _read_json(data: bytes, file: str) -> tuple[list[_Row], list[RowIssue]]:
    text = data.decode("utf-8", errors="replace").removeprefix("\ufeff")
    start = len(text) - len(text.lstrip())
    if text[start : start + 1] == "{":
        return _read_jsonl(data, file)  # a JSON Lines file saved as .json
    if text[start : start + 1] != "[":
        return [], [RowIssue(file, 1, None, "file", "expected a JSON list of row objects")]
    # Decode element by element so each row keeps the line where it starts.
    decoder = json.JSONDecoder()
    rows: list[_Row] = []
    pos = start + 1

    def at(p: int) -> int:
        return text.count("\n", 0, p) + 1

    def skip_space(p: int) -> int:
        while p < len(text) and text[p].isspace():
            p += 1
        return p

    while True:
        pos = skip_space(pos)
        if text[pos : pos + 1] == "]":
            return rows, []
        try:
            obj, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            return rows, [RowIssue(file, exc.lineno, None, "row", f"unparsable JSON: {exc.msg}")]
        rows.append((at(pos), obj))
        pos = skip_space(end)
        sep = text[pos : pos + 1]
        if sep == ",":
            pos += 1
        elif sep != "]":
            return rows, [
                RowIssue(file, at(pos), None, "row", "unparsable JSON: expected ',' or ']'")
            ]


def _read_csv(data: bytes, file: str) -> tuple[list[_Row], list[RowIssue]]:
    text = data.decode("utf-8-sig", errors="replace")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    rows: list[_Row] = []
    start = 1
    try:
        for row in reader:
            rows.append((start + 1, row))
            start = reader.line_num
    except csv.Error as exc:
        return rows, [RowIssue(file, reader.line_num, None, "row", f"unparsable CSV: {exc}")]
    return rows, []


def _read_parquet(path: Path, file: str) -> tuple[list[_Row], list[RowIssue]]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several unrelated types for corrupt files
        return [], [RowIssue(file, None, None, "file", f"unreadable Parquet: {exc}")]
    return [(i, row) for i, row in enumerate(table.to_pylist(), 1)], []


def _read_file(path: Path) -> tuple[list[_Row], list[RowIssue], bytes]:
    file = str(path)
    data = path.read_bytes()
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        rows, issues = _read_jsonl(data, file)
    elif suffix == ".json":
        rows, issues = _read_json(data, file)
    elif suffix == ".csv":
        rows, issues = _read_csv(data, file)
    elif suffix == ".parquet":
        rows, issues = _read_parquet(path, file)
    else:
        raise DataError(f"{file}: unsupported file type (use {', '.join(DATA_SUFFIXES)})")
    return rows, issues, data


# --------------------------------------------------------------------------- hub


def _parse_hub(source: str, subset: str | None) -> tuple[str, str] | None:
    """(repo, config) for hub addresses, None for local paths."""
    if source.startswith("hub:"):
        repo, config = HUB_REPO, source.removeprefix("hub:").strip("/")
    elif source.startswith("hf://"):
        parts = source.removeprefix("hf://").strip("/").split("/")
        if len(parts) < 2:
            raise DataError(f"{source}: expected hf://OWNER/NAME/CONFIG")
        repo, config = "/".join(parts[:2]), "/".join(parts[2:])
    else:
        return None
    if config and subset and canonical_subset(config) != subset:
        raise DataError(f"{source}: conflicts with subset={subset!r}")
    config = config or subset or ""
    if not config:
        raise DataError(f"{source}: name a config, e.g. hub:MEDMISHLE ({', '.join(SUBSETS)})")
    if repo == HUB_REPO:
        config = canonical_subset(config)
        if config not in SUBSETS:
            raise DataError(
                f"{source}: unknown config {config!r} (use one of {', '.join(SUBSETS)})"
            )
    return repo, config


def _hub_rows(repo: str, config: str, address: str) -> Iterator[tuple[str, _Row]]:
    try:
        import datasets  # optional extra: medmis[hub]
    except ImportError:
        raise DataError(
            f"{address}: loading from the hub needs the optional 'datasets' package "
            "(pip install 'medmis[hub]')"
        ) from None
    try:
        loaded = datasets.load_dataset(repo, config)
    except Exception as exc:  # offline, missing repo, auth: all end the load the same way
        first = (str(exc).strip().splitlines() or [""])[0]
        raise DataError(
            f"{address}: could not load from the hub: {type(exc).__name__}: {first}"
        ) from exc
    splits = loaded.items() if hasattr(loaded, "items") else [("data", loaded)]
    for split, rows in splits:
        for i, row in enumerate(rows, 1):
            yield f"{address}/{split}", (i, row)


# --------------------------------------------------------------------------- loading


def _files_in(directory: Path) -> list[Path]:
    return sorted(
        p
        for p in directory.rglob("*")
        if p.is_file()
        and p.suffix.lower() in DATA_SUFFIXES
        and not any(part.startswith(".") for part in p.relative_to(directory).parts)
    )


def load_dataset(
    source: str | Path,
    *,
    subset: str | None = None,
    mode: LoadMode = "strict",
    limit: int | None = None,
) -> Dataset:
    """Load and validate items from a file, a directory or the Hugging Face hub.

    Args:
        source: A ``.jsonl``, ``.json``, ``.csv`` or ``.parquet`` file; a directory holding
            such files (searched recursively, hidden entries skipped); or a hub address
            ``hub:MEDMISHLE`` / ``hf://AI4HealthResearch/MedMisBench/MEDMISHLE`` (needs the
            optional ``datasets`` package).
        subset: Rows that carry a ``subset`` column are filtered to this subset; rows
            without one are labelled with it, overriding the subset read from the file
            name. For hub addresses without a config, it names the config.
        mode: ``"strict"`` raises ``DataError`` listing every problem; ``"skip"`` drops
            bad rows and reports them in ``Dataset.issues``.
        limit: Keep only the first ``limit`` valid items (the whole source is still
            validated).

    Returns:
        The loaded ``Dataset``.

    Raises:
        DataError: The source cannot be read, or (strict mode) any row is invalid.
        ValueError: ``limit`` is negative or ``mode`` is unknown.
    """
    if limit is not None and limit < 0:
        raise ValueError("limit must be >= 0")
    if mode not in ("strict", "skip"):
        raise ValueError(f"mode must be 'strict' or 'skip', not {mode!r}")
    wanted = canonical_subset(subset) if subset else None
    text_source = str(source)
    hub = _parse_hub(text_source, wanted) if isinstance(source, str) else None

    raw: list[tuple[_Ctx, _Row]] = []
    issues: list[RowIssue] = []
    if hub is not None:
        repo, config = hub
        ctx_subset = canonical_subset(config)
        contexts: dict[str, _Ctx] = {}
        for file, row in _hub_rows(repo, config, text_source):
            ctx = contexts.setdefault(file, _Ctx(file, ctx_subset, wanted))
            raw.append((ctx, row))
        digest = ""
    else:
        path = Path(source)
        if not path.exists():
            raise DataError(f"{path}: no such file or directory")
        files = _files_in(path) if path.is_dir() else [path]
        if not files:
            raise DataError(f"{path}: no data files ({', '.join(DATA_SUFFIXES)}) found")
        hasher = hashlib.sha256()
        for f in files:
            rows, file_issues, data = _read_file(f)
            if path.is_dir():
                # Name each file in the hash so that renaming or moving rows changes it.
                hasher.update(f.relative_to(path).as_posix().encode() + b"\0")
                hasher.update(hashlib.sha256(data).digest())
            else:
                hasher.update(data)
            issues.extend(file_issues)
            ctx = _Ctx(str(f), _subset_from_path(f), wanted)
            raw.extend((ctx, r) for r in rows)
        digest = hasher.hexdigest()

    items: list[Item] = []
    first_seen: dict[str, tuple[str, int | None]] = {}
    for ctx, (line, row) in raw:
        item, row_issues = _row_to_item(row, line, ctx)
        if item is not None and item.id in first_seen:
            where = "{}:{}".format(*first_seen[item.id])
            row_issues = [
                RowIssue(ctx.file, line, item.id, "id", f"duplicate id (first at {where})")
            ]
            item = None
        issues.extend(row_issues)
        if item is not None:
            first_seen[item.id] = (ctx.file, line)
            items.append(item)

    if issues and mode == "strict":
        raise DataError(f"{text_source}: {len(issues)} problem(s) found", issues)
    if hub is not None:
        canonical = json.dumps(
            [it.model_dump(mode="json") for it in items], sort_keys=True, ensure_ascii=False
        )
        digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    if limit is not None:
        items = items[:limit]
    return Dataset(items=items, issues=issues, source=text_source, sha256=digest)


# --------------------------------------------------------------------------- CLI helper


def _count_table(ds: Dataset) -> list[tuple[str, str, str, str]]:
    rows: list[tuple[str, str, str, str]] = []
    counts = ds.counts()
    order = {name: i for i, name in enumerate(SUBSETS)}
    for sub in sorted(counts, key=lambda s: (order.get(s, len(order)), s)):
        total = 0
        for content in sorted(counts[sub]):
            for prov in sorted(counts[sub][content]):
                n = counts[sub][content][prov]
                total += n
                rows.append((sub, content, prov, str(n)))
        rows.append((sub, "(all)", "(all)", str(total)))
    rows.append(("TOTAL", "", "", str(len(ds.items))))
    return rows


def validate_command(
    path: str,
    *,
    subset: str | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Validate a data source and print its counts (backs ``medmis data validate PATH``).

    Prints a table of item counts per subset x content type x provenance with per-subset and
    grand totals to ``out``; every problem is printed as one ``file:line: id=X: field:
    message`` line to ``err``.

    Args:
        path: Anything ``load_dataset`` accepts.
        subset: Passed to ``load_dataset``.
        out: Stream for the table (default ``sys.stdout``).
        err: Stream for problems (default ``sys.stderr``).

    Returns:
        0 when every row is valid, 1 when any row has a problem, 2 when the source cannot
        be read at all.
    """
    out = out if out is not None else sys.stdout
    err = err if err is not None else sys.stderr
    try:
        ds = load_dataset(path, subset=subset, mode="skip")
    except DataError as exc:
        print(f"error: {exc}", file=err)
        return 2

    header = ("subset", "content type", "provenance", "items")
    table = [header, *_count_table(ds)]
    widths = [max(len(r[i]) for r in table) for i in range(4)]
    print(f"{ds.source}  sha256={ds.sha256}", file=out)
    for r in table:
        print(
            "  ".join(c.ljust(w) for c, w in zip(r[:3], widths[:3], strict=True))
            + "  "
            + r[3].rjust(widths[3]),
            file=out,
        )
    if ds.issues:
        for issue in ds.issues:
            print(str(issue), file=err)
        bad_rows = len({(i.file, i.line) for i in ds.issues})
        print(
            f"{len(ds.issues)} problem(s) in {bad_rows} row(s); {len(ds)} valid item(s)", file=err
        )
        return 1
    print(f"OK: {len(ds)} valid item(s)", file=out)
    return 0
