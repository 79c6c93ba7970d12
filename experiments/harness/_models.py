"""The run's chat models, built once per spec and wired to the record/replay store.

A defender's context gets :meth:`ModelPool.get` as its role-model factory, so the pool holds
only what building a model takes (a caller's factory or the model options, the store) and
never the harness, the run's configuration, its data or its cases: nothing a defender can
reach from its context leads back to a gold answer or a target.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel

from medmis.agents import ModelOptions, load_model

from ._config import CacheMode


class ModelPool:
    """Chat models by spec, each built once; the record/replay store they share.

    Args:
        factory: Builds a model from a spec (tests, embedding callers); None loads the spec
            with ``load_model`` and ``options``.
        options: Model options for ``load_model``.
        cache_mode: ``live`` (no store), ``record``, ``replay`` or ``refresh``.
        cache_dir: Where the store lives (used unless ``cache_mode`` is ``live``).
        max_connections: The run's ceiling on calls in flight, also each replica's ceiling
            when a model spreads over replicas (None leaves the replicas' default).
        variants: Model names that stand for another spec or other options: name -> (spec,
            options) (``RunConfig.model_variants``); the factory is given the spec.
    """

    __slots__ = ("_cache_dir", "_cache_mode", "_factory", "_max_connections", "_models",
                 "_options", "_raw", "_samples", "_store", "_variants")

    def __init__(
        self,
        factory: Callable[[str], BaseChatModel] | None,
        options: ModelOptions,
        *,
        cache_mode: CacheMode,
        cache_dir: Path,
        max_connections: int | None = None,
        variants: Mapping[str, tuple[str, ModelOptions]] | None = None,
    ) -> None:
        self._factory = factory
        self._variants = dict(variants or {})
        self._options = options
        self._cache_mode = cache_mode
        self._cache_dir = cache_dir
        self._models: dict[str, BaseChatModel] = {}
        self._samples: dict[tuple[str, int], BaseChatModel] = {}
        self._raw: dict[str, BaseChatModel] = {}
        self._store: Any = None
        self._max_connections = max_connections

    def store(self) -> Any:
        """The record/replay store (None in ``live`` mode), opened on first use."""
        if self._cache_mode == "live":
            return None
        if self._store is None:
            from medmis.tools import RecordStore

            self._store = RecordStore(self._cache_dir, self._cache_mode)
        return self._store

    def _build(self, spec: str, sample: int = 0) -> BaseChatModel:
        real, options = self._variants.get(spec, (spec, self._options))
        if self._factory is not None:  # a caller's factory builds the same model for every sample
            chat = self._factory(real)
        else:
            chat = load_model(real, options.model_copy(update={"sample": sample}) if sample else options)
        # a ReplicaChatModel (asked by name: its module is imported only when replicas are used)
        cap = getattr(chat, "set_replica_ceiling", None)
        if cap is not None and self._max_connections:
            cap(self._max_connections)
        return chat

    def _stored(self, chat: BaseChatModel, sample: int = 0) -> BaseChatModel:
        store = self.store()
        if store is None:
            return chat
        from medmis.tools import attach_cache

        return attach_cache(chat, store, sample=sample)

    def raw(self, spec: str) -> BaseChatModel:
        """The chat model for ``spec`` without the store (built once; sends nothing)."""
        if spec not in self._raw:
            self._raw[spec] = self._build(spec)
        return self._raw[spec]

    def get(self, spec: str) -> BaseChatModel:
        """The chat model for ``spec``, built on first use, wired to the store."""
        if spec not in self._models:
            self._models[spec] = self._stored(self.raw(spec))
        return self._models[spec]

    def sampler(self, sample: int) -> Callable[[str], BaseChatModel]:
        """The model factory of one repeated sample (the epoch of ``--epochs``): :meth:`get`
        for the first; for a later one, models built with ``ModelOptions.sample`` whose store
        keys are that sample's (``medmis.tools.attach_cache``)."""
        if not sample:
            return self.get

        def get(spec: str) -> BaseChatModel:
            chat = self._samples.get((spec, sample))
            if chat is None:
                chat = self._samples[(spec, sample)] = self._stored(self._build(spec, sample), sample)
            return chat

        return get

    def close(self) -> None:
        """Close the store if one was opened."""
        if self._store is not None and hasattr(self._store, "close"):
            self._store.close()
