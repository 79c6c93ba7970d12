"""A shard of a run: a deterministic partition of the items, so that every case of an item (all
protocols, targets, models and defenders) lands in one shard and pairing is never split.

``K/N`` is 0-based (``0 <= K < N``), as Kubernetes' ``JOB_COMPLETION_INDEX`` and NeMo
Evaluator's ``NEL_SHARD_IDX`` are. An item belongs to shard ``int(sha256(item key)) mod N``:
a stable hash (never Python's ``hash()``, which is salted per process), so every machine
computes the same partition from the item keys alone.

It lives with the run folders (the lowest pipeline layer) because the dataset's case planning,
the harness and the merge all read it; ``medmis.experiments.shards`` re-exports it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from medmis.tools import ConfigError

__all__ = ["SCHEDULER_VARIABLES", "Shard", "shard_of"]

SCHEDULER_VARIABLES = (
    "SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT (SLURM_ARRAY_TASK_MIN)",
    "JOB_COMPLETION_INDEX with JOB_COMPLETIONS or --shard auto/N (Kubernetes Indexed Job)",
    "NEL_SHARD_IDX/NEL_TOTAL_SHARDS",
)
"""What ``--shard auto`` reads, in this order (named by its refusal)."""


def shard_of(item_key: str, count: int) -> int:
    """The shard index (of ``count``) that holds the item with key ``item_key``."""
    return int(hashlib.sha256(item_key.encode("utf-8")).hexdigest(), 16) % count


class Shard(BaseModel):
    """Shard ``index`` of ``count``: the items whose key hashes to ``index`` (:func:`shard_of`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    index: int = Field(ge=0)
    count: int = Field(ge=1)

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, data: object) -> object:
        # "K/N" or "auto" where a shard is configured (a TOML key, a Python caller's string)
        return cls.parse(data).to_json() if isinstance(data, str) else data

    @model_validator(mode="after")
    def _index_below_count(self) -> Self:
        if self.index >= self.count:
            raise ValueError(f"shard index {self.index} is not below the count {self.count} (K/N is 0-based)")
        return self

    def holds(self, item_key: str) -> bool:
        """Whether the item with key ``item_key`` (``Item.key``) is one of this shard's."""
        return shard_of(item_key, self.count) == self.index

    def label(self) -> str:
        """``K/N``, as the flag takes it."""
        return f"{self.index}/{self.count}"

    def to_json(self) -> dict[str, int]:
        """The manifest's ``"shard"`` value."""
        return {"index": self.index, "count": self.count}

    @classmethod
    def parse(cls, text: str, env: Mapping[str, str] | None = None) -> Shard:
        """A shard from ``K/N`` or ``auto`` (``auto/N``: the count given, the index from the
        scheduler), reading the scheduler's variables from ``env`` (default ``os.environ``).

        ``auto`` takes the first of: a SLURM job array (``SLURM_ARRAY_TASK_ID`` minus
        ``SLURM_ARRAY_TASK_MIN``, default 0; count ``SLURM_ARRAY_TASK_COUNT``), a Kubernetes
        Indexed Job (``JOB_COMPLETION_INDEX``; Kubernetes exports no completions count, so the
        count is ``auto/N``'s or ``JOB_COMPLETIONS``, which the Job's spec sets from its
        ``completions``), NeMo Evaluator's ``NEL_SHARD_IDX`` / ``NEL_TOTAL_SHARDS``.

        Raises:
            ConfigError: Not ``K/N`` or ``auto[/N]``, an index outside ``0..N-1``, or ``auto``
                with no scheduler variables (one line naming them).
        """
        env = os.environ if env is None else env
        head, sep, tail = text.strip().partition("/")
        if head == "auto":
            given = _number(tail, text, "N") if sep else None
            if given is not None and given < 1:
                raise ConfigError(f"--shard {text}: the count N must be at least 1")
            index, count, source = _from_scheduler(env, given, text)
        elif sep:
            index, count, source = _number(head, text, "K"), _number(tail, text, "N"), ""
        else:
            raise ConfigError(f"--shard {text}: expected K/N (0-based, e.g. 0/4) or auto")
        if count < 1 or not 0 <= index < count:
            raise ConfigError(f"--shard {text}{source}: shard {index} of {count} is not one of 0..{count - 1} "
                              "(K/N is 0-based)")
        return cls(index=index, count=count)


def _number(value: str, text: str, what: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise ConfigError(f"--shard {text}: {what} is not a whole number ({value!r})") from None


def _read(env: Mapping[str, str], name: str, text: str) -> int:
    try:
        return int(env[name].strip())
    except ValueError:
        raise ConfigError(f"--shard {text}: {name}={env[name]!r} is not a whole number") from None


def _from_scheduler(env: Mapping[str, str], given: int | None, text: str) -> tuple[int, int, str]:
    """(index, count, " (from VARIABLES)") of the first scheduler whose variables are set."""
    if "SLURM_ARRAY_TASK_ID" in env:
        index = _read(env, "SLURM_ARRAY_TASK_ID", text)
        # an array --array=1-4 numbers its tasks from 1: the shard is the offset from the first
        index -= _read(env, "SLURM_ARRAY_TASK_MIN", text) if "SLURM_ARRAY_TASK_MIN" in env else 0
        count_var = "SLURM_ARRAY_TASK_COUNT"
    elif "JOB_COMPLETION_INDEX" in env:
        index, count_var = _read(env, "JOB_COMPLETION_INDEX", text), "JOB_COMPLETIONS"
    elif "NEL_SHARD_IDX" in env:
        index, count_var = _read(env, "NEL_SHARD_IDX", text), "NEL_TOTAL_SHARDS"
    else:
        raise ConfigError(f"--shard {text}: no scheduler variables set (looked for "
                          f"{'; '.join(SCHEDULER_VARIABLES)}); give --shard K/N")
    count = _read(env, count_var, text) if count_var in env else None
    if count is None and given is None:
        raise ConfigError(f"--shard {text}: {count_var} is not set; give the count as --shard auto/N")
    if count is not None and given is not None and count != given:
        raise ConfigError(f"--shard {text}: {count_var}={count} says {count} shards, not {given}")
    total = given if count is None else count
    assert total is not None
    return index, total, f" (from {count_var.split('_')[0]} variables)"
