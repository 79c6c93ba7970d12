"""Claiming a run folder before any case runs: the path is usable, one process holds it, and
what it already holds is the same run (see ``_fingerprint``).

Everything a user can get wrong is checked before the folder is created; a folder this
invocation created is removed again when a later check fails, so a mistake leaves nothing
half-made on disk.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from medmis.experiments.benchmark import Dataset
from medmis.experiments.records import Shard
from medmis.tools import UserFileError, json_file

from ._config import INVALID_ROWS_FILE, RunSetupError
from ._fingerprint import Fingerprint, FingerprintDiff, accept_name
from ._identity import describe_medmis
from ._lock import RunLock

__all__ = ["ClaimedFolder", "check_fingerprint", "check_out_path", "check_shard", "check_writable", "recorded_fingerprint",
           "write_invalid_rows"]


def check_out_path(out: Path) -> None:
    """Refuse an ``--out`` that is a file (or lies under one) before anything is made."""
    for p in (out, *out.parents):
        if p.exists():
            if not p.is_dir():
                what = "--out" if p == out else f"--out's parent {p}"
                raise RunSetupError(f"{what} is a file, not a folder: {p}; choose a folder for --out")
            return


def check_writable(out: Path, files: Iterable[str | Path], folders: Iterable[str | Path] = ()) -> None:
    """Refuse a run folder where a path the run writes could not be written, before anything is
    made (a lock, a manifest or an empty ``records.jsonl`` included): a folder where a file
    goes, a file where a folder goes, or a place this process may not write. ``files`` and
    ``folders`` are relative to ``out`` (an absolute one, e.g. a cache folder, stays as it is).

    Raises:
        RunSetupError: One line naming the path and what is wrong with it.
    """
    for folder in folders:
        path = out / folder
        if path.exists() and not path.is_dir():
            raise RunSetupError(f"{path} is a file where the run keeps a folder; move it away or choose another --out")
        _check_parent(path)
    for file in files:
        path = out / file
        if path.is_dir():
            raise RunSetupError(f"{path} is a folder where the run writes a file; move it away or choose another --out")
        if path.exists() and not os.access(path, os.W_OK):
            raise RunSetupError(f"{path} is not writable; make it writable or choose another --out")
        _check_parent(path)


def _check_parent(path: Path) -> None:
    """The nearest existing folder above ``path`` is a folder this process may write in."""
    for above in path.parents:
        if above.exists():
            if not above.is_dir():
                raise RunSetupError(f"{above} is a file, not a folder: {path} cannot be written there; "
                                    "choose another --out")
            if not os.access(above, os.W_OK | os.X_OK):
                raise RunSetupError(f"cannot write in {above} (permission denied); choose another --out")
            return


def _recorded_manifest(out: Path) -> dict[str, Any] | None:
    """``out/manifest.json`` (None for a new folder or one that is not a JSON object)."""
    path = out / "manifest.json"
    if not path.exists():
        return None
    try:
        manifest = json_file(path)
    except UserFileError as exc:
        raise RunSetupError(f"{exc}; unreadable manifest, choose another --out") from None
    except OSError as exc:
        raise RunSetupError(f"{path}: unreadable manifest ({exc}); choose another --out") from None
    return manifest if isinstance(manifest, dict) else None


def check_shard(out: Path, shard: Shard | None) -> None:
    """Refuse to resume a folder that holds another shard of the run (or a whole run, for a
    shard; or a shard, for a whole run): its records and plan are of other items.

    Raises:
        RunSetupError: One line naming the folder's shard and the one asked for.
    """
    manifest = _recorded_manifest(out)
    if manifest is None:
        return
    recorded = manifest.get("shard")
    try:
        held = Shard.model_validate(recorded) if recorded is not None else None
    except ValueError:
        raise RunSetupError(f"{out / 'manifest.json'}: its shard is malformed ({recorded!r}); "
                            "choose another --out") from None
    if held == shard:
        return
    what = f"shard {held.label()}" if held is not None else "a whole run (no --shard)"
    asked = f"--shard {shard.label()}" if shard is not None else "a whole run (no --shard)"
    raise RunSetupError(f"{out} holds {what}, not {asked}; give each shard its own --out")


def recorded_fingerprint(out: Path) -> Fingerprint | None:
    """The fingerprint in ``out/manifest.json``: None for a new folder; for a manifest written
    before fingerprints existed, the fields it can still vouch for."""
    path = out / "manifest.json"
    manifest = _recorded_manifest(out)
    if manifest is None:
        return None
    try:
        return Fingerprint.from_manifest(manifest)
    except ValueError as exc:
        raise RunSetupError(f"{path}: {exc}; choose another --out") from None


def check_fingerprint(out: Path, fingerprint: Fingerprint,
                      accept_changes: Sequence[str] = ()) -> tuple[Fingerprint | None, FingerprintDiff | None]:
    """The fingerprint recorded in ``out`` and how ``fingerprint`` differs from it (both None
    for a folder that holds no run yet). Reads only; every entry point that writes into a
    run folder calls it first, before deciding there is anything (or nothing) to do.

    Raises:
        RunSetupError: A difference not named in ``accept_changes`` (one line naming the
            fields and the ``--accept-change`` that would mix them).
    """
    recorded = recorded_fingerprint(out)
    if recorded is None:
        return None, None
    diff = recorded.compare(fingerprint)
    blocking = diff.blocking(accept_changes)
    if "answer_format" in blocking:  # never mixed (NEVER_MIXED): no --accept-change to offer
        raise RunSetupError(f"{out} holds a different run ({diff.describe(blocking)}); an open-ended and a "
                            "multiple-choice run never share a folder: choose a new --out")
    if blocking:
        names = ",".join(dict.fromkeys(accept_name(k) for k in blocking))
        raise RunSetupError(
            f"{out} holds a different run ({diff.describe(blocking)}); choose a new --out, "
            f"or pass --accept-change {names} to mix them on purpose"
        )
    return recorded, diff


def announce(out: Path, diff: FingerprintDiff, say: Callable[[str], None]) -> None:
    """The notices of a claim: accepted changes, added models and defenders, a new medmis."""
    if diff.changed:
        say(f"accepted changes in {out}: {diff.describe()} (recorded in manifest.json)")
    if diff.added_models:
        say(f"adding model(s) {', '.join(diff.added_models)} to the items of {out}")
    if diff.added_defenders:
        say(f"adding defender(s) {', '.join(diff.added_defenders)} to the items of {out}")
    if diff.medmis is not None:
        before, after = diff.medmis
        say(f"medmis changed since {out} was last run: {describe_medmis(before)} -> "
            f"{describe_medmis(after)} (resuming; recorded in manifest.json)")


class ClaimedFolder:
    """Create (if needed) and lock ``out``, then check the fingerprint it records.

    Use as a context manager around the whole run; the lock is released on exit, and a folder
    this invocation created is removed if the claim fails.

    Raises:
        RunSetupError: Another process holds the folder, or it holds a different run.
    """

    def __init__(self, out: Path, fingerprint: Fingerprint, *, accept_changes: Sequence[str] = (),
                 notice: Callable[[str], None] | None = None, shard: Shard | None = None) -> None:
        self.out = out
        self.shard = shard
        self.fingerprint = fingerprint
        self.accept_changes = list(accept_changes)
        self.notice = notice
        self.recorded: Fingerprint | None = None
        self.accepted: dict[str, tuple[Any, Any]] = {}
        self._lock = RunLock(out)
        self._created = False

    def __enter__(self) -> ClaimedFolder:
        self._created = created = not self.out.exists()
        self.out.mkdir(parents=True, exist_ok=True)
        try:
            self._lock.acquire()
            try:
                self._check()
            except BaseException:
                self._lock.release()
                raise
        except BaseException:
            if created:
                shutil.rmtree(self.out, ignore_errors=True)
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        self._lock.release()
        # a set-up failure (e.g. the web tools) in a folder made just now: leave nothing behind
        if exc_type is not None and self._created and not (self.out / "manifest.json").exists():
            shutil.rmtree(self.out, ignore_errors=True)

    def _check(self) -> None:
        check_shard(self.out, self.shard)
        self.recorded, diff = check_fingerprint(self.out, self.fingerprint, self.accept_changes)
        if diff is None:
            return
        self.accepted = diff.changed
        if self.notice is not None:
            announce(self.out, diff, self.notice)


def write_invalid_rows(out: Path, dataset: Dataset, notice: Callable[[str], None] | None) -> int:
    """List the rows left out under ``on_invalid="skip"`` in the run folder."""
    issues = dataset.issues
    path = out / INVALID_ROWS_FILE
    if not issues:
        path.unlink(missing_ok=True)  # a resumed run over repaired data leaves no stale list
        return 0
    path.write_text("".join(f"{i}\n" for i in issues), encoding="utf-8")
    rows = len({(i.file, i.line) for i in issues})
    if notice is not None:
        notice(f"skipped {rows} invalid row(s) ({len(issues)} problem(s)); full list in {path}")
    return rows
