"""``medmis ablate CONFIG --ray [ADDRESS]``: the grid's shards as Ray tasks, merged into one grid.

The grid is split by item into N shards (:class:`~medmis.experiments.records.Shard`, the
partition ``medmis ablate --shard K/N`` runs); each shard is one Ray task that calls the same
function the command line calls (:func:`ablate_command`, in the worker's process, with the shard
as a config override) into its own shard grid folder ``OUT.shards/K-of-N``. When every task has
finished, :func:`merge_grids` joins the shard folders into ``OUT`` and writes its report, as
``medmis merge`` does for shards run by SLURM or Kubernetes.

A shard folder is an ordinary resumable run folder: a task that failed is named in one line, the
shards that finished stay on disk, and running the same command again resumes them (a finished
shard says "nothing to do"). Ray is an optional extra (``pip install 'medmis[ray]'``); it is
imported only here, only when ``--ray`` is given.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from medmis.experiments.ablation import ablate_command, check_keys, load_config
from medmis.tools import ConfigError, MedmisError

from ._merge import merge_grids

__all__ = ["RAY_INSTALL", "ShardOutcome", "ablate_on_ray", "run_shard", "shard_folder", "shards_root"]

RAY_INSTALL = "pip install 'medmis[ray]'"
"""The install command ``--ray`` names when Ray is missing."""

EXIT_STOPPED = 3  # as the harness's: a shard that did not finish leaves the grid incomplete


@dataclass(frozen=True)
class ShardOutcome:
    """What one shard's task came back with: its exit status and its own one-line notices."""

    index: int
    count: int
    code: int
    lines: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line: the shard, how it ended and its last notice (the error of a failed one)."""
        how = {0: "finished", 1: "finished with case errors"}.get(self.code, f"failed (exit {self.code})")
        return f"shard {self.index}/{self.count}: {how}" + (f": {self.lines[-1]}" if self.lines else "")


def shards_root(out: Path) -> Path:
    """Where the shard grid folders of the grid ``out`` live: beside it, ``OUT.shards``."""
    return out.with_name(out.name + ".shards")


def shard_folder(out: Path, index: int, count: int) -> Path:
    """The grid folder of shard ``index`` of ``count`` (``OUT.shards/K-of-N``)."""
    return shards_root(out) / f"{index}-of-{count}"


def _earlier_count(out: Path) -> int | None:
    """The shard count of the shard folders an earlier ``--ray`` run left (when they agree on one),
    so that a re-run on a cluster of another size resumes them instead of starting over."""
    root = shards_root(out)
    counts = {int(m.group(2)) for p in (root.iterdir() if root.is_dir() else ())
              if (m := re.fullmatch(r"(\d+)-of-(\d+)", p.name))}
    return counts.pop() if len(counts) == 1 else None


def _merged_already(out: Path, shards: int | None) -> bool:
    """Whether ``out`` holds the grid an earlier ``--ray`` run merged from its shard folders
    (False when ``out`` is new or empty).

    Raises:
        ConfigError: ``out`` holds something else (before any shard runs; the merge needs a new folder).
    """
    from medmis.tools import json_file

    if not out.is_dir() or not any(out.iterdir()):
        return False
    manifest = json_file(out / "manifest.json") if (out / "manifest.json").is_file() else {}
    merged = manifest.get("merged") or {}
    count = shards or _earlier_count(out)
    if count and merged.get("from") == [str(shard_folder(out, k, count)) for k in range(count)]:
        return True
    raise ConfigError(f"--out {out} holds another run; the shards are merged into a new folder (give --out)")


def run_shard(path: str, out: str, index: int, count: int, overrides: Sequence[str],
              accept_changes: Sequence[str], plugins: Sequence[str], argv: Sequence[str] | None) -> ShardOutcome:
    """Run shard ``index`` of ``count`` of the grid into ``out``: the Ray task's body.

    The same call as ``medmis ablate CONFIG --shard K/N --out OUT``; a domain error becomes the
    exit status and the one line the command line would print, so the driver can name the shard.
    """
    from medmis.experiments.cli_args import error_lines

    shard = [f"shard={{index={index}, count={count}}}"]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            code = ablate_command(path, out=out, progress=False, argv=argv, overrides=[*overrides, *shard],
                                  accept_changes=accept_changes, plugins=plugins)
    except (MedmisError, OSError) as exc:
        text = error_lines(exc)
        return ShardOutcome(index, count, int(getattr(exc, "exit_code", 2)), (text[0] if text else type(exc).__name__,))
    notices = tuple(line.removeprefix("medmis: ") for line in err.getvalue().splitlines() if line.startswith("medmis: "))
    return ShardOutcome(index, count, code, notices)


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError(f"--ray needs Ray, an optional extra: {RAY_INSTALL}") from None
    return ray


CONNECT_TIMEOUT_S = 10.0
"""How long the head's port may take to accept a connection before ``--ray ADDRESS`` gives up."""


def _reachable(address: str) -> None:
    """Refuse, in one line, a ``HOST:PORT`` or ``ray://HOST:PORT`` nothing listens on: Ray itself
    retries an unreachable head for minutes, printing a warning every few seconds."""
    import socket

    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return  # "auto" or a form Ray resolves itself
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise ConfigError(f"--ray {address}: nothing answers there ({exc.strerror or exc}); "
                          "start the cluster's head, or check the address") from None


def _start(ray: Any, address: str | None) -> None:
    """Start a local Ray instance (no ADDRESS) or connect to a cluster (a head address or ``ray://``)."""
    # Ray's documented switch for its usage statistics; a user's own setting wins
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        if address is None:  # "local": a new instance even when one is running (never someone else's)
            ray.init(address="local", num_cpus=os.cpu_count() or 1, include_dashboard=False,
                     log_to_driver=False, logging_level=logging.WARNING)
        else:
            ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = f"the cluster at {address}" if address else "a local Ray instance"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"--ray: cannot start or reach {where}: {first}") from None


def _failure(index: int, count: int, exc: BaseException) -> ShardOutcome:
    """A task that raised or whose worker died, as a stopped shard with one line."""
    cause = getattr(exc, "cause", None) or exc  # a RayTaskError carries the task's own exception
    text = str(cause).strip().splitlines()
    return ShardOutcome(index, count, EXIT_STOPPED, (f"{type(cause).__name__}: {text[-1] if text else ''}".rstrip(": "),))


def _collect(ray: Any, refs: dict[Any, int], count: int) -> list[ShardOutcome]:
    """Every shard's outcome, each announced in one line as its task finishes."""
    outcomes: list[ShardOutcome] = []
    pending = list(refs)
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        for ref in done:
            try:
                outcome = ray.get(ref)
            except ray.exceptions.RayError as exc:
                outcome = _failure(refs[ref], count, exc)
            print(f"medmis: {outcome.describe()}", file=sys.stderr)
            outcomes.append(outcome)
    return sorted(outcomes, key=lambda o: o.index)


def ablate_on_ray(path: str, *, address: str | None, shards: int | None = None, out: str | None = None,
                  overrides: Sequence[str] = (), accept_changes: Sequence[str] = (), plugins: Sequence[str] = (),
                  argv: Sequence[str] | None = None) -> int:
    """``medmis ablate CONFIG --ray [ADDRESS] [--shards N]``: run the grid as N Ray tasks and merge.

    Args:
        path: The ablation config (TOML).
        address: A Ray cluster to connect to (``ray://HOST:10001`` for Ray Client, or a head
            node's ``HOST:6379``); None starts a local instance for this command and stops it after.
        shards: How many shards; default: those of an earlier ``--ray`` run of this grid, else
            the cluster's CPU count (at least 2).
        out: The grid folder the shards are merged into (default: the config's ``out``).
        overrides: ``KEY=VALUE`` config overrides, as ``medmis ablate`` takes them.
        accept_changes: As ``medmis ablate --accept-change``, for every shard folder.
        plugins: As ``medmis ablate --plugin``.
        argv: The command line, recorded in each shard's manifest.

    Returns:
        The command's exit status: the worst shard's (0 or 1) after the merge, else that of the
        shards that did not finish (they are named, one line each; nothing is merged).

    Raises:
        ConfigError: Ray is not installed, the config asks for one shard itself, a key is
            missing, ``out`` holds another run, or the cluster cannot be reached (before any
            shard runs).
    """
    ray = _import_ray()
    config = load_config(path, overrides)
    if config.shard is not None:
        raise ConfigError("--ray runs every shard of the grid itself; drop --shard (or run the shards without --ray)")
    if config.grading is not None:
        raise ConfigError(f"{path}: --ray runs no [grading]; grade the merged folder with `medmis grade`")
    if problem := check_keys(config):
        raise ConfigError(problem)
    # absolute: a worker of a cluster may start elsewhere (the folders sit on a shared filesystem)
    out_dir = Path(out or config.out).resolve()
    config_path = str(Path(path).resolve())
    plugins = [str(Path(p).resolve()) for p in plugins]
    if _merged_already(out_dir, shards):
        # The merged grid is an ordinary grid folder: `medmis ablate` on it compares its
        # fingerprints with this config (a changed seed, prompt, defender option or server is
        # refused in one line, never answered "nothing to do" over the old results) and says
        # "nothing to do" only when every case is recorded; cases a grown config adds run here.
        return ablate_command(config_path, out=str(out_dir), overrides=overrides, accept_changes=accept_changes,
                              plugins=plugins, argv=argv)
    if address is not None:
        _reachable(address)
    # the whole grid's plan and estimate, and every other check `medmis ablate` makes before it runs
    code = ablate_command(config_path, out=str(out_dir), dry_run=True, overrides=overrides, plugins=plugins)
    if code:
        return code
    _start(ray, address)
    try:
        count = shards or _earlier_count(out_dir) or max(2, int(ray.cluster_resources().get("CPU", 0)))
        task = ray.remote(num_cpus=1, max_retries=0)(run_shard)
        print(f"medmis: {count} shards on Ray ({'local instance' if address is None else address}) "
              f"into {shards_root(out_dir)}", file=sys.stderr)
        refs = {task.remote(config_path, str(shard_folder(out_dir, k, count)), k, count, list(overrides),
                            list(accept_changes), list(plugins), list(argv) if argv else None): k
                for k in range(count)}
        outcomes = _collect(ray, refs, count)
    finally:
        ray.shutdown()
    failed = [o for o in outcomes if o.code not in (0, 1)]
    if failed:
        print(f"medmis: stopped early: {len(failed)} of {count} shards did not finish "
              f"({', '.join(f'{o.index}/{count}' for o in failed)}); the others stay in {shards_root(out_dir)}; "
              "run the same command again to resume", file=sys.stderr)
        return max(o.code for o in failed)
    from medmis.experiments.analysis import VerdictSettings

    # the config's baseline and [verdict], as the single run's report reads them
    merge_grids([shard_folder(out_dir, k, count) for k in range(count)], out_dir, baseline=config.baseline,
                settings=VerdictSettings.from_mapping(config.verdict.model_dump()))
    print(f"merged {count} shards into {out_dir}\nreport: {out_dir / 'report.md'}")
    return max(o.code for o in outcomes)
