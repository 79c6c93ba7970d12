"""Report cache hits from deep inside a call back to the tracer that made the call.

The tracer opens a probe around one model or tool call; the record/replay store marks it.
A ``ContextVar`` keeps concurrent cases apart: each asyncio task sees its own probe.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass
class CacheProbe:
    consulted: bool = False
    hit: bool = False

    @property
    def result(self) -> bool | None:
        return self.hit if self.consulted else None


_current: ContextVar[CacheProbe | None] = ContextVar("medmis_cache_probe", default=None)


@contextmanager
def cache_probe() -> Iterator[CacheProbe]:
    probe = CacheProbe()
    token = _current.set(probe)
    try:
        yield probe
    finally:
        _current.reset(token)


def mark_cache(hit: bool) -> None:
    """Called by a store after a lookup; a no-op when nobody is listening."""
    probe = _current.get()
    if probe is not None:
        probe.consulted = True
        probe.hit = hit
