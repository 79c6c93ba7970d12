"""A review pack on disk: ``PACK/tasks.jsonl`` (one task per line), ``PACK/pack.json`` (how it
was drawn) and ``PACK/forms/`` (one HTML form per reviewer).

A task is one Type 1 case of a run (model x defender x item x injected target) with everything a
clinician needs to judge it: the question and options, the gold and targeted keys, the injected
sentence with its content and provenance labels and their definitions, the model's chosen
answer, its full response and its reasoning trace.
"""

from __future__ import annotations

import os
import re
import unicodedata
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from medmis.tools import ConfigError, UserFileError, json_file, json_value, validation_line

TASKS_FILE = "tasks.jsonl"
PACK_FILE = "pack.json"
FORMS_DIR = "forms"
PACK_VERSION = 1

Outcome = Literal["flipped", "held", "clean_wrong", "no_clean"]
"""How the case relates to the same model + defender's clean answer: ``flipped`` (clean correct,
Type 1 wrong), ``held`` (correct in both), ``clean_wrong`` (wrong clean), ``no_clean`` (no
graded clean answer in the run)."""


class ReviewError(ConfigError):
    """Bad review input (a pack, a reviewers file, ratings): exit status 2, one line per problem."""


class TraceLine(BaseModel):
    """One step of the defender's work as shown to reviewers."""

    model_config = ConfigDict(frozen=True)

    kind: str
    name: str
    text: str


class Task(BaseModel):
    """One line of ``tasks.jsonl``."""

    model_config = ConfigDict(frozen=True)

    task_id: str
    reviewers: list[str]
    model: str
    defender: str
    item_id: str
    subset: str
    question: str
    options: dict[str, str]
    gold: str
    target: str
    injected: str
    content: str | None
    content_definition: str
    provenance: str | None
    provenance_definition: str
    choice: str | None
    auto_correct: bool
    clean_choice: str | None = None
    outcome: Outcome
    response: str
    reasoning: list[TraceLine]
    defender_options: dict[str, Any] = {}


def atomic_write(path: Path, text: str) -> None:
    """Write-then-rename, so a reader never sees half a file; credentials are masked first
    (every file a pack and its analysis hold is written here)."""
    from medmis.tools import redact_file_text

    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(redact_file_text(path.name, text), encoding="utf-8")
    os.replace(tmp, path)


def read_tasks(pack: str | Path) -> list[Task]:
    """The tasks of a pack, validated; every problem is reported with ``file:line``.

    Raises:
        ReviewError: The pack has no ``tasks.jsonl``, or a line is not a valid task, or two
            lines share a ``task_id``.
    """
    path = Path(pack) / TASKS_FILE
    if not path.is_file():
        raise ReviewError(f"{pack}: not a review pack (no {TASKS_FILE}; make one with `medmis review sample`)")
    tasks: list[Task] = []
    problems: list[str] = []
    seen: dict[str, int] = {}
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            task = Task.model_validate(json_value(line, path, lineno))
        except UserFileError as exc:
            problems.append(str(exc))
            continue
        except ValidationError as exc:
            problems.append(f"{path}:{lineno}: not a task: {validation_line(exc)}")
            continue
        if task.task_id in seen:
            problems.append(f"{path}:{lineno}: task_id {task.task_id!r} repeats line {seen[task.task_id]}")
            continue
        seen[task.task_id] = lineno
        tasks.append(task)
    if problems:
        raise ReviewError(f"{path}: {len(problems)} bad line(s)\n" + "\n".join(problems))
    if not tasks:
        raise ReviewError(f"{path}: no tasks")
    return tasks


def read_pack_info(pack: str | Path) -> dict[str, Any]:
    """``pack.json`` (how the pack was drawn); an empty dict for a pack without one."""
    path = Path(pack) / PACK_FILE
    if not path.is_file():
        return {}
    try:
        data = json_file(path)
    except UserFileError as exc:
        raise ReviewError(str(exc)) from None
    return data if isinstance(data, dict) else {}


def pack_simulated(tasks: list[Task], info: dict[str, Any]) -> bool:
    """Whether the pack's responses are the simulated examinee's: ``pack.json`` says so (the
    run's manifest did), or a task's model is it (a pack drawn before packs recorded it)."""
    from medmis.experiments.reporting import is_simulated

    return info.get("simulated") is True or is_simulated(t.model for t in tasks)


def pack_reviewers(tasks: list[Task], info: dict[str, Any]) -> list[str]:
    """Every reviewer of the pack: the panel in ``pack.json``, else those assigned a task."""
    listed = info.get("reviewers")
    if isinstance(listed, list) and all(isinstance(r, str) for r in listed):
        return list(listed)
    seen: dict[str, None] = {}
    for task in tasks:
        seen.update(dict.fromkeys(task.reviewers))
    return list(seen)


_BAD_NAME = re.compile(r"[\x00-\x1f\x7f]")


def read_reviewers(path: str | Path) -> list[str]:
    """Reviewer names from a file: one per line; blank lines and ``#`` comments are skipped.

    Raises:
        ReviewError: The file is missing, a name repeats or holds control characters, or no name
            is given.
    """
    p = Path(path)
    if not p.is_file():
        raise ReviewError(f"{p}: no such reviewers file")
    names: list[str] = []
    problems: list[str] = []
    for lineno, raw in enumerate(p.read_text(encoding="utf-8-sig").splitlines(), 1):
        name = raw.strip()
        if not name or name.startswith("#"):
            continue
        if _BAD_NAME.search(name) or len(name) > 80:
            problems.append(f"{p}:{lineno}: a reviewer name must be printable and at most 80 characters")
        elif name in names:
            problems.append(f"{p}:{lineno}: reviewer {name!r} is listed twice")
        else:
            names.append(name)
    if problems:
        raise ReviewError(f"{p}: {len(problems)} bad line(s)\n" + "\n".join(problems))
    if not names:
        raise ReviewError(f"{p}: no reviewer names")
    return names


def reviewer_slugs(names: list[str]) -> dict[str, str]:
    """A distinct, file-name-safe slug per reviewer (``"Dr. Ana Lúcia"`` -> ``"dr-ana-lucia"``)."""
    out: dict[str, str] = {}
    used: set[str] = set()
    for name in names:
        ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
        base = re.sub(r"[^a-z0-9]+", "-", ascii_name.lower()).strip("-") or "reviewer"
        slug, i = base, 2
        while slug in used:
            slug, i = f"{base}-{i}", i + 1
        used.add(slug)
        out[name] = slug
    return out
