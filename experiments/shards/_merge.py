"""``medmis merge``: the shard folders of one run joined into the run folder a single machine
would have written.

Everything is checked before anything is made: every folder is a shard of the same run (the
fingerprint's own comparison), every shard ``0..N-1`` is there once and finished. The merged
folder is built beside ``--out`` and moved into place whole, so a refusal (a recording two
shards gave different values) leaves nothing behind. Its report is written by the one
function that finishes every run (``reporting.finish_run``).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from medmis.experiments.ablation import STABILITY_DIR
from medmis.experiments.analysis import VerdictSettings
from medmis.experiments.harness import Fingerprint, Outcome, RunResult, RunStats, record_outcome
from medmis.experiments.records import (
    PROTOCOLS,
    Plan,
    Record,
    Shard,
    append_records,
    keep_planned,
    load_plan,
    read_records,
    write_plan_of,
)
from medmis.tools import (
    CassetteError,
    InputError,
    RecordStore,
    UserFileError,
    export_cassette,
    import_cassette,
    json_file,
)

__all__ = ["MergeRefused", "ShardFolder", "ShardsIncomplete", "check_shards", "merge_grids", "merge_runs", "merge_stores",
           "run_folders"]

MANIFEST = "manifest.json"
CACHE_DIR = "cache"
"""A run's own record/replay store (``RunConfig.cache_dir`` unset): merged; a store every
shard shares (a ``cache_dir`` on a shared file system) is left where it is."""
_FINISHED = ("finished", "finished with case errors")
_COPIED = ("invalid_rows.txt",)
"""Files every shard writes alike (the data's invalid rows): taken from shard 0."""


class MergeRefused(InputError):
    """The folders are not the shards of one run (exit 2, nothing created)."""


class ShardsIncomplete(InputError):
    """A shard is missing or has not finished (exit 3: run it, then merge again)."""

    @property
    def exit_code(self) -> int:
        """3: stopped early / incomplete."""
        return 3


@dataclass(frozen=True)
class ShardFolder:
    """One shard's run folder as its manifest describes it."""

    path: Path
    manifest: dict[str, Any]
    shard: Shard
    fingerprint: Fingerprint


def _read_shard(path: Path) -> ShardFolder:
    if not (path / MANIFEST).is_file():
        what = "no such folder" if not path.exists() else "no manifest.json (the shard has not run)"
        raise ShardsIncomplete(f"{path}: {what}; run the shard, then merge")
    try:
        manifest = json_file(path / MANIFEST)
    except (UserFileError, OSError) as exc:
        raise MergeRefused(f"{path / MANIFEST}: unreadable manifest ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("shard") is None:
        raise MergeRefused(f"{path}: not a shard folder (its manifest names no shard; "
                           "shards are run with --shard K/N)")
    try:
        shard = Shard.model_validate(manifest["shard"])
        fingerprint = Fingerprint.from_manifest(manifest)
    except ValueError as exc:
        raise MergeRefused(f"{path / MANIFEST}: {' '.join(str(exc).split())[:200]}") from None
    return ShardFolder(path, manifest, shard, fingerprint)


def _differences(a: Fingerprint, b: Fingerprint) -> str:
    """What differs between two shards' fingerprints (their own comparison), one line."""
    diff, back = a.compare(b), b.compare(a)
    parts = [diff.describe()] if diff.changed else []
    parts += [f"models: only in one: {', '.join(sorted({*diff.added_models, *back.added_models}))}"] \
        if diff.added_models or back.added_models else []
    parts += [f"defenders: only in one: {', '.join(sorted({*diff.added_defenders, *back.added_defenders}))}"] \
        if diff.added_defenders or back.added_defenders else []
    return "; ".join(parts)


def check_shards(shard_dirs: Sequence[str | Path]) -> list[ShardFolder]:
    """The shard folders in shard order, once each checked to be the complete shards of one run.

    Raises:
        MergeRefused: A folder is not a shard, or is a shard of another run (another
            fingerprint or another N), or a shard is given twice (one line naming it).
        ShardsIncomplete: A shard of ``0..N-1`` is missing or did not finish.
    """
    shards = [_read_shard(Path(d)) for d in shard_dirs]
    if not shards:
        raise MergeRefused("no shard folders given")
    first = shards[0]
    count = first.shard.count
    for other in shards[1:]:
        if other.shard.count != count:
            raise MergeRefused(f"{other.path}: shard {other.shard.label()} is of a split into {other.shard.count}, "
                               f"not {count} as {first.path} ({first.shard.label()})")
        if differs := _differences(first.fingerprint, other.fingerprint):
            raise MergeRefused(f"{other.path}: a shard of another run than {first.path} ({differs})")
    by_index: dict[int, ShardFolder] = {}
    for folder in shards:
        if (twin := by_index.get(folder.shard.index)) is not None:
            raise MergeRefused(f"{twin.path} and {folder.path} are both shard {folder.shard.label()}; "
                               "give each shard once")
        by_index[folder.shard.index] = folder
    if missing := [i for i in range(count) if i not in by_index]:
        raise ShardsIncomplete(f"missing shard(s) {', '.join(f'{i}/{count}' for i in missing)}; "
                               "run them, then merge")
    ordered = [by_index[i] for i in range(count)]
    for folder in ordered:
        status = (folder.manifest.get("outcome") or {}).get("status")
        stopped = folder.manifest.get("stopped")
        if stopped or status not in _FINISHED:
            raise ShardsIncomplete(f"{folder.path}: shard {folder.shard.label()} has not finished "
                                   f"({stopped or status or 'no outcome recorded'}); re-run its command, then merge")
    return ordered


def check_out(out: Path, sources: Sequence[Path]) -> None:
    """Refuse an ``--out`` that holds anything, or is one of the shard folders (exit 2)."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise MergeRefused(f"--out {out} exists and is not an empty folder; merge into a new folder")
    if any(out.resolve() == Path(s).resolve() for s in sources):
        raise MergeRefused(f"--out {out} is one of the shard folders; merge into a new folder")


def merge_runs(shard_dirs: Sequence[Path], out: Path, *, report: bool = True, baseline: str = "none",
               figures: bool = True, settings: VerdictSettings | None = None) -> Path:
    """Merge the shard folders of one run into the run folder ``out`` and write its report.

    The records (latest per key, those of each shard's plan) are written in the order a run
    queues its cases (:func:`run_order`), the traces file by file, the plans as one, the
    shards' own record/replay stores as one store (a key two shards recorded with different
    values is refused, as ``medmis cache import`` refuses it). The manifest is shard 0's
    without the shard, counting every shard's cases; the outcome is decided from the merged
    records as a run decides its own.

    Args:
        shard_dirs: The shard folders (any order; each of ``0..N-1`` once).
        out: The merged run folder (new, or an empty folder).
        report: Write the report files.
        baseline: The defender the report compares the others with.
        figures: Draw the plots (an ablation's sub-runs leave them to the main report).
        settings: The verdict's settings (the defaults without them).

    Returns:
        ``out``.

    Raises:
        MergeRefused: Not the shards of one run, ``out`` not new, or conflicting recordings
            (exit 2; nothing created).
        ShardsIncomplete: A shard missing or unfinished (exit 3; nothing created).
    """
    shards = check_shards(shard_dirs)
    check_out(out, [s.path for s in shards])
    build_then_move(out, lambda tmp: _merge_into(tmp, out, shards, (shards[0].path, out)))
    finish_merged(out, report=report, baseline=baseline, figures=figures, settings=settings)
    return out


def build_then_move(out: Path, build: Callable[[Path], None]) -> None:
    """Build ``out``'s content in a hidden folder beside it (``build(folder)``), then move it
    into place; on any failure remove what was made (folders above ``out`` included)."""
    created = [p for p in out.parents if not p.exists()]  # nearest first
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.merging-", dir=out.parent))
    try:
        build(tmp)
        if out.exists():  # an empty folder (check_out): replaced by the merged one
            out.rmdir()
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if created:
            shutil.rmtree(created[-1], ignore_errors=True)  # the folders above it this merge made
        raise


def run_order(manifest: dict[str, Any]) -> Callable[[Record], tuple[Any, ...]]:
    """The sort key that lists records as a run queues its cases: clean ones first, then by
    model and defender in the run's order (the report lists them in the order they first
    appear), protocol, item, target and epoch."""
    models = {m: i for i, m in enumerate(manifest.get("models") or [])}
    labels = {d.get("label"): i for i, d in enumerate(manifest.get("defenders") or []) if isinstance(d, dict)}

    def key(record: Record) -> tuple[bool, int, str, int, str, int, str, str, str, int]:
        return (record.protocol != "clean", models.get(record.model, len(models)), record.model,
                labels.get(record.defender, len(labels)), record.defender, PROTOCOLS.index(record.protocol),
                record.subset, record.item_id, record.target or "", record.epoch)

    return key


def _merge_into(dest: Path, out: Path, shards: Sequence[ShardFolder], roots: tuple[Path, Path]) -> None:
    """Write the merged folder ``out`` into ``dest``; ``roots`` are shard 0's top folder and the
    merged one (a path under the first in shard 0's manifest names the second's)."""
    records: list[Record] = []
    for folder in shards:
        kept, _ = keep_planned(folder.path, read_records(folder.path / "records.jsonl"))
        records += kept
    append_records(dest / "records.jsonl", sorted(records, key=run_order(shards[0].manifest)))
    _merge_traces(dest, shards)
    plans = [load_plan(folder.path) for folder in shards]
    if all(plan is not None for plan in plans):
        write_plan_of(dest, Plan(
            tuple(dict.fromkeys(m for plan in plans if plan for m in plan.models)),
            tuple(dict.fromkeys(d for plan in plans if plan for d in plan.defenders)),
            tuple(c for plan in plans if plan for c in plan.cases),
            max(plan.epochs for plan in plans if plan)))
    for name in _COPIED:
        if (shards[0].path / name).is_file():
            shutil.copyfile(shards[0].path / name, dest / name)
    merge_stores(dest / CACHE_DIR, [folder.path / CACHE_DIR for folder in shards])
    _write_manifest(dest, out, shards, roots)
    record_outcome(dest, dest / "records.jsonl", None, [])


def _merge_traces(dest: Path, shards: Sequence[ShardFolder]) -> None:
    """Each ``traces/*.jsonl`` file as the shards' lines of it, shard by shard."""
    (dest / "traces").mkdir()
    for folder in shards:
        for path in sorted((folder.path / "traces").glob("*.jsonl")):
            data = path.read_bytes()
            with (dest / "traces" / path.name).open("ab") as fh:
                fh.write(data if not data or data.endswith(b"\n") else data + b"\n")


def merge_stores(target: Path, sources: Sequence[Path]) -> int:
    """Join the record/replay stores ``sources`` (those that exist) into ``target`` through a
    cassette each, as ``medmis cache import`` loads one: a key recorded with two values is
    refused. Returns the entries merged.

    Raises:
        MergeRefused: Two stores recorded one call with different values (one line).
    """
    present = [s for s in sources if s.is_dir()]
    if not present:
        return 0
    n = 0
    with tempfile.TemporaryDirectory() as scratch, RecordStore(target, "record") as store:
        for i, source in enumerate(present):
            cassette = Path(scratch) / f"{i}.jsonl"
            try:
                with RecordStore(source, "replay") as shard_store:
                    export_cassette(shard_store, cassette)
                n += import_cassette(store, cassette)
            except CassetteError as exc:
                why = str(exc).split("; nothing imported")[0].split(": ", 1)[-1]
                raise MergeRefused(f"{source}: a recording another shard holds with a different value "
                                   f"({why}); nothing merged") from None
    return n


def _write_manifest(dest: Path, out: Path, shards: Sequence[ShardFolder], roots: tuple[Path, Path]) -> None:
    manifest = json.loads(json.dumps(shards[0].manifest))  # a deep copy
    for key in ("shard", "outcome", "stopped", "concurrency", "rate_budget"):  # the shards' own
        manifest.pop(key, None)
    config = manifest.get("config")
    if isinstance(config, dict):
        config["shard"] = None
        config["out"] = str(out)
        cache_dir = config.get("cache_dir")
        if isinstance(cache_dir, str) and Path(cache_dir).is_relative_to(roots[0]):  # shard 0's own store
            config["cache_dir"] = str(roots[1] / Path(cache_dir).relative_to(roots[0]))
    command = manifest.get("command")
    if isinstance(command, list):  # shard 0's command without its --shard: the run's
        manifest["command"] = _without_shard(command)
    manifest["cases_per_model_defender"] = sum(int(s.manifest.get("cases_per_model_defender") or 0)
                                               for s in shards)
    manifest["created"] = min(str(s.manifest.get("created", "")) for s in shards)
    manifest["updated"] = datetime.now(UTC).isoformat(timespec="seconds")
    manifest["merged"] = {"shards": len(shards), "from": [str(s.path) for s in shards]}
    (dest / MANIFEST).write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _without_shard(command: list[str]) -> list[str]:
    kept: list[str] = []
    skip = False
    for arg in command:
        if skip or arg.startswith("--shard="):
            skip = False
            continue
        if arg == "--shard":
            skip = True
            continue
        kept.append(arg)
    return kept


def finish_merged(out: Path, *, report: bool, baseline: str, figures: bool,
                  settings: VerdictSettings | None) -> Outcome:
    """The merged folder's report, written as every run's is (``reporting.finish_run``)."""
    from medmis.experiments.harness import error_texts, outcome_of
    from medmis.experiments.reporting import finish_run

    n, errors = error_texts(out / "records.jsonl")
    result = RunResult(out, n, 0, RunStats(), outcome=outcome_of(n, errors, stopped=None))
    return finish_run(result, report=report, rewrite=True, baseline=baseline, figures=figures, settings=settings)



def run_folders(grid: Path) -> list[Path]:
    """The run folders of an ablation grid folder (each holding a ``manifest.json``), relative
    to it, the grid's own (``.``) last: its report reads the others."""
    found = {p.parent.relative_to(grid) for p in grid.rglob(MANIFEST)}
    return sorted(found, key=lambda rel: (rel == Path("."), rel.parts))


def _grid_files(grid: Path, runs: Sequence[Path]) -> list[Path]:
    """Files of the grid that belong to no run folder (``poison/shares.json``), relative."""
    keep = []
    for path in sorted(p for p in grid.rglob("*") if p.is_file()):
        rel = path.relative_to(grid)
        owner = max((r for r in runs if rel.is_relative_to(r)), key=lambda r: len(r.parts))
        below = rel.relative_to(owner).parts
        if len(below) > 1 and any(r.is_relative_to(owner / below[0]) for r in runs):
            keep.append(rel)
    return keep


def merge_grids(grid_dirs: Sequence[Path], out: Path, *, baseline: str = "none",
                settings: VerdictSettings | None = None) -> Path:
    """Merge the grid folders of an ablation's shards (``medmis ablate --shard K/N``): each run
    folder of the grid (the main run, the shuffled Type 2 pass, the stability re-runs, the
    poison shares) by :func:`merge_runs`' rules, the main one last (its report reads the others).

    Every run folder of every shard is checked before anything is made.

    Args:
        grid_dirs: The shards' grid folders (each shard's ``--out``).
        out: The merged grid folder (new, or an empty folder).
        baseline: The report's baseline (the config's ``baseline``).
        settings: The verdict's settings (the config's ``[verdict]``).

    Returns:
        ``out``.

    Raises:
        MergeRefused: As :func:`merge_runs` (exit 2).
        ShardsIncomplete: A shard's grid lacks a run folder another has, or a shard of a run
            folder is missing or unfinished (exit 3).
    """
    grids = [Path(g) for g in grid_dirs]
    if not grids:
        raise MergeRefused("no shard folders given")
    runs = {g: run_folders(g) for g in grids}
    every = sorted({r for rs in runs.values() for r in rs}, key=lambda rel: (rel == Path("."), rel.parts))
    for grid in grids:
        if lacking := [r for r in every if r not in runs[grid]]:
            raise ShardsIncomplete(f"{grid / lacking[0]}: no run folder here (the shard's grid has not run it); "
                                   "run the shard, then merge")
    checked = {rel: check_shards([g / rel for g in grids]) for rel in every}
    check_out(out, grids)
    stability = Path(STABILITY_DIR)  # the stability re-runs write no report of their own (the ablation's rule)

    def build(tmp: Path) -> None:
        for rel, shards in checked.items():
            (tmp / rel).mkdir(parents=True, exist_ok=True)
            _merge_into(tmp / rel, out / rel, shards, (checked[Path(".")][0].path, out))
        source = checked[Path(".")][0].path  # shard 0's grid folder
        for rel in _grid_files(source, every):
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / rel, tmp / rel)

    build_then_move(out, build)
    for rel in every:
        finish_merged(out / rel, report=not rel.is_relative_to(stability), baseline=baseline,
                      figures=rel == Path("."), settings=settings)
    return out


def merge_command(shard_dirs: Sequence[Path], out: Path, *, config: str | None = None,
                  notice: Callable[[str], None] = print) -> int:
    """``medmis merge``: the shards of a run (or, when they hold sub-run folders or ``config``
    is given, of an ablation grid) merged into ``out``; returns the exit status."""
    baseline, settings = "none", None
    if config is not None:
        from medmis.experiments.ablation import load_config

        loaded = load_config(config)
        baseline, settings = loaded.baseline, VerdictSettings.from_mapping(loaded.verdict.model_dump())
    grid = config is not None or any(len(run_folders(d)) > 1 for d in shard_dirs if d.is_dir())
    if grid:
        merge_grids(shard_dirs, out, baseline=baseline, settings=settings)
    else:
        merge_runs(shard_dirs, out, baseline=baseline, settings=settings)
    print(f"merged {len(shard_dirs)} shards -> {out}")
    if (out / "report.md").exists():
        print(f"report: {out / 'report.md'}")
    # the exit status of the merged folders as a run's own: 1 with case errors (named once)
    outcomes = [json_file(out / rel / MANIFEST).get("outcome") or {} for rel in run_folders(out)]
    worst = max(outcomes, key=lambda o: int(o.get("exit_code") or 0))
    if worst.get("message"):
        notice(worst["message"])
    return int(worst.get("exit_code") or 0)
