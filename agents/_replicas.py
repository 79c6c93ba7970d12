"""One chat model over several replicated inference servers: least-outstanding spreading and
fail-over, above the provider's own client.

``--model-base-url`` given more than once (vLLM or SGLang replicas serving the same model)
builds one member chat model per URL with the provider's ordinary ``build`` and wraps them in
:class:`ReplicaChatModel`. Each call goes to the replica with the fewest requests outstanding
(ties in turn, round robin), so a slow replica receives fewer calls.

A replica that fails with a transport error, a timeout or a 5xx answer is taken out for a
cool-down (``cooldown_s``, doubling with each consecutive failure, at most ``max_cooldown_s``)
and the call goes at once to another replica: the run's retry policy is not charged while a
replica remains. When the cool-down ends the replica is tried again and, on success, is back.
A 429 throttles only the replica that sent it: each replica has its own
:class:`~medmis.agents._limiter.AdaptiveLimiter` (halved on a 429, paused for the server's
``Retry-After``), and the call moves to another replica. When every replica has failed the
call, the last error is raised and the run's limiter and retry policy handle it as for a
single server (``medmis.agents._retry.classify``).

The record/replay key does not depend on the replica that answered: it is the first
replica's key, the same as a run against that one server.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import RunnableBinding
from pydantic import ConfigDict, PrivateAttr, model_validator

from medmis.tools import scrub_url

from ._capabilities import accepts_call_settings, accepts_structured_output, provider_family
from ._errors import ModelConfigError
from ._limiter import RATE_LIMIT_STATUS, AdaptiveLimiter
from ._retry import _status_and_headers, _transport_error_types

__all__ = ["ReplicaChatModel", "ReplicaState", "replica_failure"]

log = logging.getLogger("medmis.replicas")

DEFAULT_CEILING = 256  # the httpx pool size of each member (agents._registry.HTTP_LIMITS)


def replica_failure(exc: BaseException) -> str | None:
    """How a failed call reflects on the replica that made it.

    Returns:
        ``"down"`` for a transport error, a timeout or a 5xx answer (the server, not the
        request, is at fault), ``"throttled"`` for a 429, None for anything else (a bad
        request, a blocked or malformed answer), which another replica would not fix.
    """
    if isinstance(exc, _transport_error_types()):
        return "down"
    status, _ = _status_and_headers(exc)
    if status == RATE_LIMIT_STATUS:
        return "throttled"
    if status is not None and status >= 500:
        return "down"
    return None


@dataclass(eq=False)  # identity: a replica is itself, whatever its counters say
class ReplicaState:
    """One replica's member model and its standing (counters for tests and reports)."""

    url: str
    model: BaseChatModel
    limiter: AdaptiveLimiter
    outstanding: int = 0
    served: int = 0
    failures: int = 0
    throttled: int = 0
    streak: int = 0  # consecutive failures; sets the next cool-down
    down_until: float = 0.0

    def has_room(self) -> bool:
        limiter = self.limiter
        return limiter.in_flight < limiter.limit and limiter.state().paused_s <= 0


@dataclass
class _Pool:
    """The mutable part, shared by every copy and binding of one :class:`ReplicaChatModel`."""

    replicas: list[ReplicaState]
    clock: Callable[[], float] = time.monotonic
    next_index: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class ReplicaChatModel(BaseChatModel):
    """Spreads calls over ``members`` (one per replica URL, same model) with fail-over.

    Args:
        members: The replicas' chat models, each built by its provider for one base URL.
        urls: The replicas' base URLs, in the order of ``members`` (for messages and stats).
        cooldown_s: First cool-down of a failing replica; doubles per consecutive failure.
        max_cooldown_s: The longest cool-down.
        replica_ceiling: Calls in flight per replica at most (before any 429 lowers it).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    members: list[BaseChatModel]
    urls: list[str]
    cooldown_s: float = 2.0
    max_cooldown_s: float = 60.0
    replica_ceiling: int = DEFAULT_CEILING
    _pool: _Pool = PrivateAttr()

    @model_validator(mode="after")
    def _check(self) -> ReplicaChatModel:
        if len(self.members) < 2 or len(self.members) != len(self.urls):
            raise ModelConfigError(
                f"replicas: need one member per URL and at least two, got {len(self.members)} "
                f"member(s) for {len(self.urls)} URL(s)"
            )
        if self.cooldown_s <= 0 or self.max_cooldown_s < self.cooldown_s:
            raise ModelConfigError("replicas: need 0 < cooldown_s <= max_cooldown_s")
        return self

    def model_post_init(self, context: Any, /) -> None:
        super().model_post_init(context)
        self._pool = _Pool([
            ReplicaState(url, member, AdaptiveLimiter(self.replica_ceiling))
            for url, member in zip(self.urls, self.members, strict=True)
        ])

    # -- identity: the first replica's, so keys, families and tracing match one server -------
    @property
    def _llm_type(self) -> str:
        return f"replicas-{self.members[0].asdict()['_type']}"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {k: v for k, v in self.members[0].asdict().items() if k != "_type"}

    # The one shim of this module: LangChain has no public accessor for a chat model's cache key
    # (``_get_llm_string``, the record/replay key: any replica's answer must be the same entry as
    # a one-server run's) or its tracing parameters (``_get_ls_params``), so these two hooks of
    # the replica model hand the call to the same hook of its first member.
    def _get_llm_string(self, stop: list[str] | None = None, **kwargs: Any) -> str:
        return self.members[0]._get_llm_string(stop=stop, **kwargs)

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> Any:
        return self.members[0]._get_ls_params(stop=stop, **kwargs)

    @property
    def provider_family(self) -> str:
        """The members' provider family (see :func:`~medmis.agents._capabilities.provider_family`)."""
        return provider_family(self.members[0])

    @property
    def accepts_structured_output(self) -> bool:
        """Whether the members understand the ``structured_output`` call argument."""
        return accepts_structured_output(self.members[0])

    @property
    def accepts_call_settings(self) -> bool:
        """Whether the members understand the ``call_settings`` call argument."""
        return accepts_call_settings(self.members[0])

    @property
    def replicas(self) -> list[ReplicaState]:
        """Each replica's state, in URL order."""
        return self._pool.replicas

    def set_replica_ceiling(self, ceiling: int) -> None:
        """Cap the calls in flight per replica (the run's ``--max-connections``), so that a
        429 halving one replica's limit takes effect at once."""
        for replica in self._pool.replicas:
            limiter = replica.limiter
            limiter.ceiling = ceiling
            limiter.limit = min(limiter.limit, ceiling)
            limiter.lowest = min(limiter.lowest, limiter.limit)

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        """Bind tools as the members' provider formats them; every replica receives them."""
        bound = self.members[0].bind_tools(tools, **kwargs)
        if not isinstance(bound, RunnableBinding) or bound.bound is not self.members[0]:
            raise ModelConfigError(
                f"replicas: {type(self.members[0]).__name__}.bind_tools does not return a plain "
                "binding of the model, so its tools cannot be sent to every replica"
            )
        return self.bind(**bound.kwargs)

    # -- choosing ---------------------------------------------------------------------------------
    def _pick(self, tried: Sequence[ReplicaState]) -> ReplicaState | None:
        """The least-outstanding replica that is up (ties in turn), preferring those with room
        under their limiter; None when every replica not yet tried is cooling down. A first
        try with every replica down probes the one whose cool-down ends first."""
        pool = self._pool
        with pool.lock:
            now = pool.clock()
            n = len(pool.replicas)
            order = [pool.replicas[(pool.next_index + i) % n] for i in range(n)]
            up = [r for r in order if r not in tried and r.down_until <= now]
            if not up:
                if tried:
                    return None
                choice = min(pool.replicas, key=lambda r: r.down_until)
            else:
                roomy = [r for r in up if r.has_room()] or up
                choice = min(roomy, key=lambda r: r.outstanding)  # first of the ties in turn
            pool.next_index = (pool.replicas.index(choice) + 1) % n
            choice.outstanding += 1
            return choice

    def _done(self, replica: ReplicaState, exc: BaseException | None) -> bool:
        """Book a finished call; True when a failure should move the call to another replica."""
        pool = self._pool
        with pool.lock:
            replica.outstanding -= 1
            if exc is None:
                replica.served += 1
                replica.streak = 0
                replica.down_until = 0.0
                return False
            verdict = replica_failure(exc)
            if verdict == "throttled":
                replica.throttled += 1
                return True
            if verdict != "down":
                return False
            replica.failures += 1
            now = pool.clock()
            if replica.down_until > now:
                return True  # a call sent before it was taken out: same episode
            replica.streak += 1
            wait = min(self.max_cooldown_s, self.cooldown_s * 2 ** (replica.streak - 1))
            replica.down_until = now + wait
        log.warning("replica %s out for %.1f s after %s", scrub_url(replica.url), wait, type(exc).__name__)
        return True

    # -- calling ----------------------------------------------------------------------------------
    def _candidates(self) -> Iterator[ReplicaState]:
        """The replicas to try for one call, in turn; none is offered twice, and it ends when
        every replica has failed this call or is still cooling down. The first pick always
        offers one, so a caller whose loop runs out has seen at least one failure."""
        tried: list[ReplicaState] = []
        for _ in range(len(self._pool.replicas)):
            replica = self._pick(tried)
            if replica is None:
                break
            yield replica
            tried.append(replica)  # only reached when the attempt failed over

    @contextmanager
    def _attempt(self, replica: ReplicaState, failures: list[Exception]) -> Iterator[None]:
        """Book one call on ``replica``: a failure that should move on is kept in ``failures``
        and swallowed (the caller's loop tries the next replica); any other is raised."""
        try:
            yield
        except Exception as exc:
            if not self._done(replica, exc):
                raise
            failures.append(exc)
        else:
            self._done(replica, None)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        failures: list[Exception] = []
        for replica in self._candidates():
            member = replica.model

            async def call(member: BaseChatModel = member) -> ChatResult:
                # the member's public entry (the replica model's own run is the one traced)
                reply = await member.ainvoke(messages, stop=stop, **kwargs)
                return ChatResult(generations=[ChatGeneration(message=reply)])

            with self._attempt(replica, failures):
                return await replica.limiter.run(call)
        raise failures[-1]

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        # The limiters are asyncio's: synchronous calls spread and fail over without them
        # (a 429 moves the call on but pauses nothing).
        failures: list[Exception] = []
        for replica in self._candidates():
            with self._attempt(replica, failures):
                reply = replica.model.invoke(messages, stop=stop, **kwargs)
                return ChatResult(generations=[ChatGeneration(message=reply)])
        raise failures[-1]
