"""Reading the JSON and TOML a user hands the toolkit: one loader, one limit, one error shape.

Every reader of a file a user gives or edits (data rows, cassettes, poisoned pages, ablation
configs, a run folder's ``records.jsonl``, ``manifest.json`` and ``plan.json``) decodes through
:func:`json_value`, :func:`json_lines`, :func:`json_file` or :func:`toml_file`, so each gets the
same three checks:

* **Nesting.** ``json`` and ``tomllib`` decode recursively: a few kilobytes of ``[[[[…`` end in
  ``RecursionError`` (a traceback, exit 1). The depth is measured first by a scan of the
  brackets outside strings (only when the text holds more opening brackets than the limit:
  nearly never) and anything deeper than :data:`MAX_DEPTH` is refused.
* **Duplicate keys.** ``json`` keeps the last of two values for one key without a word; here
  an object naming a key twice is refused, naming the key.
* **One error shape.** Every failure is a :class:`UserFileError` whose message is one line,
  ``file:line: cause``; the CLI prints it and exits 2.

A pydantic validation error over such a value becomes one line too (:func:`validation_line`):
the field and the cause, not pydantic's multi-line text and documentation link.

This module imports nothing from the rest of the toolkit, so every package may use it.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._errors import InputError

if TYPE_CHECKING:
    from pydantic import ValidationError

MAX_DEPTH = 100
"""The deepest nesting of arrays and objects (tables) a user file may have. Real files stay
under 20 (a cassette's recorded model reply is the deepest); Python's decoders recurse once
a level and fail near 1,000."""


class UserFileError(InputError, ValueError):
    """A user file that cannot be read as given: one line, ``file:line: cause``.

    Attributes:
        file: The file as the user named it.
        line: The 1-based line where the problem is (None when it is the whole file).
        cause: What is wrong, without the place.
        key: The key named twice, for a duplicate key (else None).
        kind: ``"utf8"``, ``"json"``, ``"toml"``, ``"depth"`` or ``"duplicate"``.
    """

    def __init__(self, file: str | Path, line: int | None, cause: str, *, key: str | None = None,
                 kind: str = "json") -> None:
        self.file = str(file)
        self.kind = "duplicate" if key is not None else kind
        self.line = line
        self.cause = cause
        self.key = key
        where = self.file if line is None else f"{self.file}:{line}"
        super().__init__(f"{where}: {cause}")


class DuplicateKeyError(ValueError):
    """Raised by :func:`unique_pairs` for an object naming ``key`` twice."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A ``json`` ``object_pairs_hook`` that refuses an object naming a key twice.

    Raises:
        DuplicateKeyError: A key is named twice (its ``key`` attribute names it).
    """
    obj = dict(pairs)
    if len(obj) != len(pairs):  # the rare case: find the key named twice
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKeyError(key)
            seen.add(key)
    return obj


UNIQUE_KEYS = json.JSONDecoder(object_pairs_hook=unique_pairs)
"""A decoder refusing duplicate keys (:class:`DuplicateKeyError`), for ``raw_decode`` over a
text whose depth :func:`too_deep` has checked. The C scanner calls the hook once per object
with its pairs: one ``dict()`` per object, as without it."""
_LOOSE = json.JSONDecoder()

_JSON_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)
# TOML: strings of the four kinds and comments hide brackets; ``[table]`` headers open and close
# on their line, so counting them as nesting costs at most two levels
_TOML_TOKENS = re.compile(
    r'"""(?:[^\\]|\\.)*?"""|\'\'\'.*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|#[^\n]*|[\[\]{}]',
    re.DOTALL,
)


def too_deep(text: str, *, toml: bool = False, limit: int = MAX_DEPTH) -> int | None:
    """The offset in ``text`` where nesting first goes deeper than ``limit``, or None.

    Brackets inside strings (and TOML comments) do not count. Linear in ``text``; the scan
    runs only when ``text`` has more opening brackets than ``limit``.
    """
    if text.count("[") + text.count("{") <= limit:
        return None
    depth = 0
    for match in (_TOML_TOKENS if toml else _JSON_TOKENS).finditer(text):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
            if depth > limit:
                return match.start()
        elif token in ("]", "}"):
            depth -= 1
    return None


_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}\n")


def deep_line(path: str | Path, *, limit: int = MAX_DEPTH, chunk: int = 1 << 23) -> None:
    """Refuse a JSON Lines file with a line nested deeper than ``limit``, without decoding it.

    For readers that do not decode in Python (DuckDB's ``read_json`` never recurses) but must
    refuse what :func:`json_lines` refuses. Runs at C speed: each chunk is reduced to its
    brackets and newlines, and only a line with more than ``limit`` brackets is scanned
    (about 0.25 s per 100 MB of ``records.jsonl`` on the bench machine).

    Raises:
        UserFileError: The first such line (``file:line: nested deeper ...``).
    """
    carry = 0  # brackets of the line the previous chunk ended in
    with open(path, "rb") as fh:
        while data := fh.read(chunk):
            counts = data.translate(None, _NOT_BRACKETS).split(b"\n")
            if carry + len(counts[0]) > limit or max(map(len, counts)) > limit:
                break  # rare: a line with many brackets; the exact pass below decides
            carry = carry + len(counts[0]) if len(counts) == 1 else len(counts[-1])
        else:
            return
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, 1):
            if raw.count(b"[") + raw.count(b"{") > limit and too_deep(raw.decode("utf-8", "replace"),
                                                                        limit=limit) is not None:
                raise UserFileError(path, number, too_deep_cause(limit), kind="depth")


def _line_of(text: str, offset: int, first_line: int) -> int:
    return first_line + text.count("\n", 0, offset)


def too_deep_cause(limit: int = MAX_DEPTH) -> str:
    """The cause :class:`UserFileError` names for a file nested deeper than ``limit``."""
    return f"nested deeper than {limit} levels (arrays and objects); not read"


def json_value(text: str | bytes, file: str | Path, line: int | None = 1, *,
               unique: bool = True, limit: int = MAX_DEPTH) -> Any:
    """Decode one JSON text from ``file`` (a whole file, or one line of JSON Lines).

    Args:
        text: The JSON text (bytes are decoded as UTF-8).
        file: The file it comes from, for the message.
        line: The line ``text`` starts on (None: name no line).
        unique: Refuse an object naming a key twice.
        limit: The deepest nesting accepted.

    Raises:
        UserFileError: Not UTF-8, not JSON, nested too deep or a key named twice
            (``file:line: cause``, the line where the problem is).
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UserFileError(file, line, f"not UTF-8 (byte 0x{text[exc.start]:02x} at column {exc.start + 1})",
                                kind="utf8") from None
    where = too_deep(text, limit=limit)
    if where is not None:
        raise UserFileError(file, None if line is None else _line_of(text, where, line), too_deep_cause(limit),
                            kind="depth")
    try:
        return (UNIQUE_KEYS if unique else _LOOSE).decode(text)
    except DuplicateKeyError as dup:
        raise UserFileError(file, line, f"duplicate key {dup.key!r} (JSON would keep only its last value)",
                            key=dup.key) from None
    except json.JSONDecodeError as exc:
        # a JSON Lines line's newline is not a line of its own (an error at the end is on it)
        at = None if line is None else _line_of(text, min(exc.pos, len(text.rstrip())), line)
        raise UserFileError(file, at, f"not JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:  # only with a limit near the interpreter's own
        raise UserFileError(file, line, too_deep_cause(limit), kind="depth") from None


def json_file(path: str | Path, *, unique: bool = True) -> Any:
    """The JSON value held by the file at ``path`` (see :func:`json_value`).

    Raises:
        UserFileError: The file is not readable JSON within the limits.
        OSError: The file cannot be opened.
    """
    data = Path(path).read_bytes()
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    return json_value(data, path, 1, unique=unique)


def json_lines(data: bytes, file: str | Path, *, unique: bool = True) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` for each non-blank line of JSON Lines ``data``.

    Raises:
        UserFileError: A line that is not readable JSON within the limits (at that line).
    """
    for number, raw in enumerate(data.split(b"\n"), 1):
        if raw.strip():
            yield number, json_value(raw, file, number, unique=unique)


def toml_value(text: str, file: str | Path) -> dict[str, Any]:
    """Decode a TOML document from ``file``.

    Raises:
        UserFileError: Not TOML, or nested deeper than :data:`MAX_DEPTH` (``file:line: cause``).
    """
    where = too_deep(text, toml=True)
    if where is not None:
        raise UserFileError(file, _line_of(text, where, 1), too_deep_cause(MAX_DEPTH), kind="depth")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # tomllib's message ends "(at line N, column M)": keep the line up front, as everywhere
        found = re.search(r"\(at line (\d+), column (\d+)\)$", str(exc))
        cause = str(exc)[: found.start()].strip() if found else str(exc)
        raise UserFileError(file, int(found.group(1)) if found else None,
                            f"not valid TOML ({cause}{f' at column {found.group(2)}' if found else ''})",
                            kind="toml") from None
    except RecursionError:  # a nesting the scan missed (e.g. an odd string it misread)
        raise UserFileError(file, None, too_deep_cause(MAX_DEPTH), kind="depth") from None


def toml_file(path: str | Path) -> dict[str, Any]:
    """The TOML document in the file at ``path`` (see :func:`toml_value`).

    Raises:
        UserFileError: The file is not UTF-8 TOML within the limits.
        OSError: The file cannot be opened.
    """
    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise UserFileError(path, line, f"not UTF-8 (byte 0x{data[exc.start]:02x})", kind="utf8") from None
    return toml_value(text, path)


def validation_line(exc: ValidationError, *, limit: int = 200) -> str:
    """A pydantic ``ValidationError`` as one line: each failing field and why.

    ``"url: url 'file:///x' is not an absolute http(s) URL; title: Field required"``
    (at most three problems, then how many more), without the input echo and the
    documentation link pydantic adds.
    """
    parts = []
    problems = exc.errors(include_url=False, include_input=False)
    for problem in problems[:3]:
        where = ".".join(str(p) for p in problem.get("loc", ())) or "value"
        kind = problem.get("type", "")
        msg = str(problem.get("msg", kind))
        if kind == "extra_forbidden":
            msg = "unknown field (not allowed here)"
        else:
            msg = msg.removeprefix("Value error, ").removeprefix("Assertion failed, ")
        parts.append(f"{where}: {msg}")
    if len(problems) > 3:
        parts.append(f"and {len(problems) - 3} more")
    text = "; ".join(parts) or str(exc).splitlines()[0]
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
