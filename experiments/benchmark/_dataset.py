"""What a load returns: the ``Dataset``, the ``RowIssue`` problems met on the way, and the
``DataError`` raised when a source cannot be used."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal

from medmis.tools import InputError

from ._types import Item

LoadMode = Literal["strict", "skip"]
Severity = Literal["error", "warning"]

UNLABELLED = "(none)"
_MAX_ISSUES_IN_MESSAGE = 50


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
        severity: ``"error"``: the row is not loaded; ``"warning"``: the row is loaded and
            the message says what was left out of it (e.g. a wrong option without a false
            sentence, which is then never a Type 1 target).
    """

    file: str
    line: int | None
    item_id: str | None
    field: str
    message: str
    severity: Severity = "error"

    def __str__(self) -> str:
        line = "?" if self.line is None else str(self.line)
        item = "?" if self.item_id is None else self.item_id
        return f"{self.file}:{line}: id={item}: {self.field}: {self.message}"


class DataError(InputError, ValueError):
    """A data source could not be loaded; ``issues`` lists every problem found (may be empty
    when the source itself could not be opened)."""

    def __init__(self, message: str, issues: Iterable[RowIssue] = ()) -> None:
        self.headline = message
        self.issues: list[RowIssue] = list(issues)
        if self.issues:
            shown = [str(i) for i in self.issues[:_MAX_ISSUES_IN_MESSAGE]]
            hidden = len(self.issues) - len(shown)
            if hidden:
                shown.append(f"... and {hidden} more")
            message = message + "\n" + "\n".join(shown)
        super().__init__(message)

    def summary(self, first: int = 3) -> str:
        """One line: the headline, the first few problems and how many there are in all."""
        if not self.issues:
            return self.headline
        shown = "; ".join(str(i) for i in self.issues[:first])
        more = len(self.issues) - first
        tail = f"; ... and {more} more" if more > 0 else ""
        return f"{self.headline} (first: {shown}{tail})"


# --------------------------------------------------------------------------- dataset


@dataclass
class Dataset:
    """Items loaded from one source, with the problems met on the way.

    Attributes:
        items: Valid items in source order.
        issues: Problems that kept rows out (always empty after a strict load).
        source: The path or hub address that was loaded.
        sha256: SHA-256 of the file bytes (of every file for a directory, of the canonical
            item JSON for hub loads), so runs can record exactly which data they used.
        warnings: Problems in rows that were loaded anyway (``severity == "warning"``).
        ids_assigned: Rows that had no id and were named ``<SUBSET>-<index>``.
    """

    items: list[Item]
    issues: list[RowIssue] = field(default_factory=list)
    source: str = ""
    sha256: str = ""
    warnings: list[RowIssue] = field(default_factory=list)
    ids_assigned: int = 0

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
            by_prov = by_content.setdefault(it.content_type or UNLABELLED, {})
            prov = it.provenance or UNLABELLED
            by_prov[prov] = by_prov.get(prov, 0) + 1
        return out
