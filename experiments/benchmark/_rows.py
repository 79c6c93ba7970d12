"""One raw row of the released schema -> one ``Item``, or the list of reasons it cannot be one.

Cells are read the way the reference evaluation notebook reads the release
(AI-in-Health/MedMisBench, medmisbench_no_harness_eval.ipynb, ``reconstruct_dicts``): an
option or sentence cell that is null, NaN, blank, ``"nan"`` or a lone ``'"'`` is absent, and
option keys follow column order (letters, or ``1``, ``2``, ... when the answer is a digit),
so a placeholder option leaves a gap in the keys rather than renumbering the rest.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from ._dataset import RowIssue
from ._labels import canonical_content, canonical_provenance, canonical_subset
from ._types import Item

_LETTERS = "abcdefghijklmnopqrstuvwxyz"
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_LATIN = re.compile(r"[A-Za-z]")
_BAD_TEXT = re.compile("[\ufffd\ud800-\udfff]")
# Control characters other than tab and line breaks: invisible in a report, yet sent to the
# model (and a NUL or ESC in a prompt is a data fault, not content).
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\x80-\x9f]")
# Text that stands for an empty cell: pandas' rendering of NaN, and a lone quote left behind
# by CSV round trips (the same set the reference notebook skips).
_PLACEHOLDERS = frozenset({"nan", '"'})
_GOLD = re.compile(r"[(\[]?\s*(?:option\s*)?([A-Za-z]|\d+)\s*[)\]]?\s*[.:]?", re.IGNORECASE)


def _language(text: str) -> Literal["en", "zh"]:
    han = len(_HAN.findall(text))
    latin = len(_LATIN.findall(text))
    return "zh" if han > latin else "en"


class _BadCell(Exception):
    pass


def _cell(value: Any) -> str | None:
    """A cell as stripped text; None for empty or placeholder cells (None, NaN, blank,
    ``"nan"``, ``'"'``)."""
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
    return None if not text or text.casefold() in _PLACEHOLDERS else text


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


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


def _normalise_gold(raw: str) -> str | None:
    m = _GOLD.fullmatch(raw.strip())
    return m.group(1).upper() if m else None


@dataclass
class RowContext:
    """Where rows come from, how their subset is decided and how id-less rows are named.

    ``positions`` counts the rows met so far per subset and is shared by every context of one
    load, so that a row without an id is named ``<SUBSET>-<index>`` with the 0-based index of
    the row among that subset's rows in the source (files in path order, rows in file
    order). For the release, one file or hub split per subset, that is the row's position in
    its file, which is the index the reference notebook falls back on.
    """

    file: str
    file_subset: str | None
    subset_arg: str | None
    positions: dict[str, int] = field(default_factory=dict)

    def next_position(self, subset: str) -> int:
        index = self.positions.get(subset, 0)
        self.positions[subset] = index + 1
        return index


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
        elif text is not None and (ctrl := _CONTROL.search(text)):
            issues.append(RowIssue(file, line, None, name,
                                   f"control character U+{ord(ctrl.group()):04X} in the text"))
        cells[name] = text
    return cells, issues


class RowResult(NamedTuple):
    """What became of one row: the item (None when the row has an error or belongs to another
    subset), its problems (errors when ``item`` is None, else warnings) and whether its id was
    assigned by the loader."""

    item: Item | None
    issues: list[RowIssue]
    id_assigned: bool = False


def row_to_item(row: Any, line: int | None, ctx: RowContext) -> RowResult:
    """Turn one raw row into an Item, or report why it cannot be one.

    A row without an id is named ``<SUBSET>-<index>`` (see ``RowContext``). Two things are
    warnings, not errors, because the release has them: a wrong option without a false
    sentence (kept as an option, never a Type 1 target) and a sentence whose option cell is
    empty (not delivered). A row with no false sentence at all is an error.
    """
    if not isinstance(row, Mapping):
        return RowResult(
            None, [RowIssue(ctx.file, line, None, "row", "expected an object with named fields")]
        )

    cells, issues = _read_cells(row, ctx.file, line)

    # Subset: the row's own column, else the file name (or hub config); --subset filters rows
    # whose subset is known that way and names the rest.
    row_subset = cells.get("subset")
    subset = canonical_subset(row_subset) if row_subset is not None else ctx.file_subset
    if subset is None:
        subset = ctx.subset_arg
    elif ctx.subset_arg is not None and subset != ctx.subset_arg:
        return RowResult(None, [])
    index = ctx.next_position(subset) if subset is not None else None

    item_id = cells.get("id")
    id_assigned = False
    if item_id is None and "id" not in {i.field for i in issues} and subset is not None:
        # (without a subset the row is already an error, reported on the subset field)
        item_id, id_assigned = f"{subset}-{index}", True
    # Issues raised before the id was known get it attached now.
    issues = [RowIssue(i.file, i.line, item_id, i.field, i.message) for i in issues]
    warnings: list[RowIssue] = []

    def bad(field_name: str, message: str) -> None:
        issues.append(RowIssue(ctx.file, line, item_id, field_name, message))

    def warn(field_name: str, message: str) -> None:
        warnings.append(RowIssue(ctx.file, line, item_id, field_name, message, "warning"))

    if subset is None:
        bad("subset", "no subset column, none in the file name and no subset= given")

    question = cells.get("question")
    if question is None and "question" not in {i.field for i in issues}:
        bad("question", "missing or empty question")

    raw_answer = cells.get("answer")
    gold = _normalise_gold(raw_answer) if raw_answer is not None else None
    numeric = gold is not None and gold.isdigit()

    # Options keep their column position so that injections stay aligned with them.
    released_question: str | None = None
    columns = {c: cells.get(f"op{c}") for c in _LETTERS}
    positions = [i for i, c in enumerate(_LETTERS) if columns[c] is not None]
    texts: dict[int, str] = {i: columns[_LETTERS[i]] or "" for i in positions}
    recovered = _recover_embedded(question, numeric) if question is not None else None
    if not positions and recovered is not None:
        question, found = recovered
        texts = dict(enumerate(found))
        if not question:
            bad("question", "question holds only options, no stem")
            question = None
    elif recovered is not None and recovered[0]:
        # Options both in the question and in columns: the toolkit preset shows them once (the
        # columns, which the sentences are aligned to), unless the two lists disagree; the
        # paper preset shows the stem as released, as the reference does.
        if [_norm(t) for t in recovered[1]] == [_norm(texts[p]) for p in positions]:
            released_question, question = question, recovered[0]
        else:
            warn("question", "the question embeds an option list that differs from the option "
                             "columns; both are shown")

    def key_of(pos: int) -> str:
        return str(pos + 1) if numeric else _LETTERS[pos].upper()

    options = {key_of(p): t for p, t in sorted(texts.items())}
    if len(options) < 2:
        bad("options", f"fewer than two options (found {len(options)})")
    seen_text: dict[str, str] = {}
    for k, t in options.items():
        first = seen_text.setdefault(_norm(t), k)
        if first != k:
            warn("options", f"options {first} and {k} have the same text {t[:40]!r}")

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
    unreadable = {x.field for x in issues}
    if any(f.startswith("inject") for f in unreadable):
        unreadable.add("inject")
    for i, c in enumerate(_LETTERS):
        sentence = cells.get(f"inject{c}")
        if i in texts:
            key = key_of(i)
            if sentence is not None:
                contexts[key] = sentence
            elif key != gold and f"inject{c}" not in unreadable:
                warn(
                    f"inject{c}", f"wrong option {key} has no false sentence: never a Type 1 target"
                )
        elif sentence is not None:
            warn(f"inject{c}", f"sentence for option {c.upper()}, which has no text: not delivered")
    has_false = any(k != gold for k in contexts)
    if len(options) >= 2 and gold in options and not has_false and "inject" not in unreadable:
        bad("inject", "no wrong option has a false sentence (nothing to deliver under Type 1)")

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
        return RowResult(None, issues)
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
        released_question=released_question,
    )
    return RowResult(item, warnings, id_assigned)
