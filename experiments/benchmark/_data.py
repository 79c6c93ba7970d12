"""Loading and validating MedMisBench-style rows into ``Item`` objects.

Rows arrive in the benchmark's released flattened schema (``id``, ``question``, ``answer``,
``opa``..``opz``, ``injecta``..``injectz``, ``injection_content``, ``injection_provenance``)
from JSON Lines, JSON, CSV or Parquet files, a directory of such files, or the Hugging Face
hub. Every row is checked and *all* problems are collected before anything is returned, so a
malformed file never turns into a silently half-loaded dataset.

The work is split along the data flow: ``_readers`` (file formats), ``_hub`` (the hub),
``_rows`` (row -> ``Item``), ``_labels`` (label aliases), ``_validate`` (the CLI command);
this module ties them together and re-exports their public names.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ._dataset import DataError, Dataset, LoadMode, RowIssue
from ._hub import HUB_REPO, HUB_REPOS, hub_rows, parse_hub
from ._labels import canonical_content, canonical_provenance, canonical_subset, subset_from_path
from ._readers import DATA_SUFFIXES, Row, files_in, read_file
from ._rows import RowContext, row_to_item
from ._types import Item

__all__ = [
    "DATA_SUFFIXES",
    "HUB_REPO",
    "HUB_REPOS",
    "DataError",
    "Dataset",
    "LoadMode",
    "RowIssue",
    "canonical_content",
    "canonical_provenance",
    "canonical_subset",
    "load_dataset",
]


def load_dataset(
    source: str | Path,
    *,
    subset: str | None = None,
    mode: LoadMode = "strict",
    limit: int | None = None,
    hub_repo: str | None = None,
) -> Dataset:
    """Load and validate items from a file, a directory or the Hugging Face hub.

    Items are identified by ``Item.key`` (``"SUBSET/id"``): the same id in two subsets is two
    items, so the five subsets load together from one folder or with ``hub:all``; a repeated
    id within one subset is an error. A row without an id is named ``<SUBSET>-<index>`` with
    the 0-based index of the row among that subset's rows (files in path order, rows in file
    order), i.e. its position in the subset's file or hub split.

    Args:
        source: A ``.jsonl``, ``.json``, ``.csv`` or ``.parquet`` file; a directory holding
            such files (searched recursively, hidden entries skipped); or a hub address
            ``hub:MEDMISHLE``, ``hub:all`` or ``hf://AI4HealthResearch/MedMisBench/MEDMISHLE``
            (needs the optional ``datasets`` package).
        subset: Keep only this subset: rows whose subset is known (a ``subset`` column,
            a subset named in the file or folder name, the hub config) are filtered to it;
            rows with no subset information are labelled with it. For hub addresses
            without a config, it names the config.
        mode: ``"strict"`` raises ``DataError`` listing every problem; ``"skip"`` drops
            bad rows and reports them in ``Dataset.issues``. Warnings (rows loaded with a
            part left out) never stop a load; they are in ``Dataset.warnings``.
        limit: Keep only the first ``limit`` valid items (the whole source is still
            validated).
        hub_repo: The hub repository for ``hub:`` addresses (default ``HUB_REPO``; the
            release is also at ``HongjianZhou/MedMisBench``).

    Returns:
        The loaded ``Dataset``.

    Raises:
        DataError: The source cannot be read, or (strict mode) any row is invalid.
        DataError: The selection is empty: an empty source or no row of ``subset`` (in skip
            mode, a source whose every row is invalid returns them all in ``issues``).
        ValueError: ``limit`` is below 1 or ``mode`` is unknown.
    """
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    if mode not in ("strict", "skip"):
        raise ValueError(f"mode must be 'strict' or 'skip', not {mode!r}")
    wanted = canonical_subset(subset) if subset else None
    text_source = str(source)
    hub = parse_hub(text_source, wanted, hub_repo) if isinstance(source, str) else None
    if hub is None and hub_repo and not isinstance(source, str):
        raise DataError(f"{source}: a hub repo applies only to hub: or hf:// addresses")

    positions: dict[str, int] = {}  # shared: id-less rows are numbered per subset
    raw: list[tuple[RowContext, Row]] = []
    issues: list[RowIssue] = []
    if hub is not None:
        repo, configs = hub
        contexts: dict[str, RowContext] = {}
        for config, where, row in hub_rows(repo, configs, text_source):
            ctx = contexts.setdefault(
                where, RowContext(where, canonical_subset(config), wanted, positions)
            )
            raw.append((ctx, row))
        digest = ""
    else:
        path = Path(source)
        if not path.exists():
            raise DataError(f"{path}: no such file or directory")
        files = files_in(path) if path.is_dir() else [path]
        if not files:
            raise DataError(f"{path}: no data files ({', '.join(DATA_SUFFIXES)}) found")
        hasher = hashlib.sha256()
        for f in files:
            rows, file_issues, data = read_file(f)
            if path.is_dir():
                # Name each file in the hash so that renaming or moving rows changes it.
                hasher.update(f.relative_to(path).as_posix().encode() + b"\0")
                hasher.update(hashlib.sha256(data).digest())
            else:
                hasher.update(data)
            issues.extend(file_issues)
            ctx = RowContext(str(f), subset_from_path(f), wanted, positions)
            raw.extend((ctx, r) for r in rows)
        digest = hasher.hexdigest()

    items: list[Item] = []
    warnings: list[RowIssue] = []
    assigned = 0
    first_seen: dict[str, tuple[str, int | None]] = {}
    for ctx, (line, row) in raw:
        item, row_issues, id_assigned = row_to_item(row, line, ctx)
        if item is not None and item.key in first_seen:
            where = "{}:{}".format(*first_seen[item.key])
            message = f"duplicate id in {item.subset} (first at {where})"
            row_issues, item = [RowIssue(ctx.file, line, item.id, "id", message)], None
        if item is None:
            issues.extend(row_issues)
            continue
        warnings.extend(row_issues)
        assigned += id_assigned
        first_seen[item.key] = (ctx.file, line)
        items.append(item)

    if issues and mode == "strict":
        raise DataError(f"{text_source}: {len(issues)} problem(s) found", issues)
    if not items and not issues:
        raise DataError(_empty_selection(text_source, wanted, raw))
    if hub is not None:
        # an item without a released stem of its own hashes as before the field existed
        canonical = json.dumps(
            [it.model_dump(mode="json", exclude={"released_question"} if it.released_question is None else None)
             for it in items], sort_keys=True, ensure_ascii=False,
        )
        digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    if limit is not None:
        items = items[:limit]
    return Dataset(
        items=items,
        issues=issues,
        source=text_source,
        sha256=digest,
        warnings=warnings,
        ids_assigned=assigned,
    )


def _empty_selection(source: str, wanted: str | None, raw: list[tuple[RowContext, Row]]) -> str:
    """Why a load selected no item, in one line."""
    if wanted and raw:
        found: set[str] = set()
        for ctx, (_, row) in raw:
            named = row.get("subset") if isinstance(row, dict) else None
            found.add(canonical_subset(str(named)) if named else (ctx.file_subset or "?"))
        return f"{source}: no rows of subset {wanted} (the data has: {', '.join(sorted(found))})"
    return f"{source}: no items (the source holds no rows)"
