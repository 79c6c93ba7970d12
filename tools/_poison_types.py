"""The shapes of retrieval poisoning: poisoned pages, a run's poison settings, a case's exposure.

These are the contracts the three sides share: ``medmis generate pages`` writes
:class:`PoisonedPage` rows (JSONL); the poisoned search/visit layer reads them and takes a share
of a Type 1 case's result slots (:class:`PoisonSettings`, ``--poison`` / ``[poison]``); every
record says what the case saw (:class:`PoisonExposure`, ``records.jsonl``'s ``poison``).

Poisoned pages are written to evaluate defenses only: each one argues for a false claim.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ._userfile import UserFileError, json_lines, validation_line

PAGE_STYLES: tuple[str, ...] = ("guideline", "forum", "preprint", "blog", "encyclopedia")
"""The attacker's page styles: a guideline excerpt, a clinician forum post, a preprint abstract,
a patient blog and an encyclopedia-like article."""

PoisonRank = Literal["top", "spread"]

DEFAULT_PAGES = Path(__file__).resolve().parents[1] / "fixtures" / "poison" / "sample_pages.jsonl"
"""The bundled sample's poisoned pages (``--poison``'s default ``pages``)."""


def case_key(item_key: str, target: str) -> str:
    """A Type 1 case's key in page files: ``"SUBSET/id#TARGET"``."""
    return f"{item_key}#{target}"


class PoisonedPage(BaseModel):
    """One line of a poisoned-page file: a document supporting one case's injected false claim."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    case_key: str
    """``"SUBSET/id#TARGET"`` (:func:`case_key`)."""
    item_key: str
    target: str
    style: str
    claim: str
    """The injected false sentence the page supports (the item's context for ``target``)."""
    title: str
    url: str
    text: str
    site: str = ""
    """The publisher name the page shows (e.g. a forum's name)."""
    generator: str = ""
    synthetic: bool = True

    @field_validator("style")
    @classmethod
    def _known_style(cls, value: str) -> str:
        if value not in PAGE_STYLES:
            raise ValueError(f"style {value!r} is not one of {', '.join(PAGE_STYLES)}")
        return value

    @field_validator("url")
    @classmethod
    def _absolute_url(cls, value: str) -> str:
        if not value.startswith(("https://", "http://")):
            raise ValueError(f"url {value!r} is not an absolute http(s) URL")
        return value


class PoisonSettings(BaseModel):
    """How much of a Type 1 case's search results its poisoned pages take.

    ``share`` of the result slots of every search made while answering a Type 1 case go to
    that case's pages (``rank="top"``: the first slots; ``"spread"``: evenly spaced), using
    only pages of ``styles`` (all when None). Clean and Type 2 questions get no poison.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    share: float = Field(ge=0.0, le=1.0)
    rank: PoisonRank = "top"
    styles: tuple[str, ...] | None = None
    pages: Path
    """The poisoned-page file (JSONL of :class:`PoisonedPage`)."""

    @field_validator("styles")
    @classmethod
    def _known_styles(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is not None:
            bad = [s for s in value if s not in PAGE_STYLES]
            if bad:
                raise ValueError(f"unknown page style {', '.join(bad)} (use {', '.join(PAGE_STYLES)})")
        return value


class PoisonExposure(BaseModel):
    """What one case saw of its poison (``records.jsonl``'s ``poison``; null without poison)."""

    model_config = ConfigDict(extra="forbid")

    share: float
    rank: PoisonRank
    pages: int = 0
    """Poisoned pages available for this case (0 on clean and Type 2 cases)."""
    shown: int = 0
    """Search results shown to the defender, over all its searches."""
    seen: int = 0
    """Of those, poisoned ones."""
    visited: int = 0
    """Visits that returned a poisoned page."""
    cited: bool = False
    """A poisoned page is among the final answer's sources (``extra.sources``): a URL the
    answer names, or a passage its final call was given that it quotes or that names the
    chosen option. One rule for every defender (``medmis.graphs.answer_sources``); a page
    that was only shown or visited is not cited."""


def load_pages(path: str | Path) -> list[PoisonedPage]:
    """Read a poisoned-page file; a bad line is one :class:`ValueError` naming ``file:line``.

    A line must be a JSON object (no key named twice, nested within the shared limit) with
    :class:`PoisonedPage`'s fields; the message names the field and the cause. One case's
    pages must have distinct URLs: search shows a URL once, so a repeated one would count
    as a page the case never saw.

    Raises:
        UserFileError: The file cannot be read, or its first line that is not a usable page
            (``file:line: cause``).
    """
    path = Path(path)
    pages: list[PoisonedPage] = []
    first_line: dict[tuple[str, str], int] = {}
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UserFileError(path, None, f"cannot read poisoned pages ({exc.strerror or exc})") from None
    for number, row in json_lines(data, path):
        try:
            page = PoisonedPage.model_validate(row)
        except ValidationError as exc:
            raise UserFileError(path, number, f"not a poisoned page: {validation_line(exc)}") from None
        seen = first_line.setdefault((page.case_key, page.url), number)
        if seen != number:
            raise UserFileError(path, number, f"url {page.url!r} is already a page of case {page.case_key} "
                                              f"(line {seen}); a case's pages need distinct URLs")
        pages.append(page)
    return pages


def pages_digest(path: str | Path) -> str:
    """sha256 of a page file's bytes (the fingerprint's identity of the poison)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
