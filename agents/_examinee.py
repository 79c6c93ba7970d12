"""The simulated examinee: a deterministic stand-in for a base model (``mock/<name>`` specs).

This is a **simulated examinee, not a model measurement**. It exists so that the offline
demo, the CLI and the test-suite can exercise every defender, graph and metric end to end
without an API key. Its behaviour is a hand-written policy whose rates are *calibrated* on
the figures published with MedMisBench (arXiv 2606.12291); numbers it produces say how the
toolkit works, never how a real model behaves.

Models (``build(model_id, opts)``):

* ``mock/examinee`` — the calibrated policy.
* ``mock/oracle`` — always answers the gold option of a recognised question.
* ``mock/random`` — a seeded uniform choice per (seed, item key), blind to any context.

Options (``ModelOptions.extra``): ``answer_key`` (a JSONL/JSON data file read with
``medmis.experiments.benchmark._data.load_dataset``; default ``fixtures/medmisbench_sample.jsonl`` at the
repository root), ``seed`` (default ``ModelOptions.seed`` or 0), ``clean_accuracy`` (0.8),
``fault_rate`` (0: the share of distinct requests whose *first* attempt raises
:class:`~medmis.agents._errors.TransientModelError` with ``retry_after=0``; a retry of the same
messages succeeds), ``latency_s`` (0: a sleep per call). Unknown keys are an error.

Determinism. Every random draw is a uniform number from SHA-256 of (seed, item id, a role
tag, ...), never Python's ``hash`` or a global RNG, so a run is identical on every machine
and in any call order. The clean answer depends only on (seed, item id), so it pairs across
protocols and defenders; each later draw re-uses one uniform per (item, role) and only moves
the threshold, so a stronger defence never flips an item that a weaker one kept.

How a request is handled, and where each step is described:

1. *Read it* (:mod:`medmis.agents._reading`): identify the item in the answer key, find which
   of its context sentences the prompt carries (and whether a line marks them ``REFUTED`` or
   ``SUPPORTED``), and separate evidence (evidence sections, tool results) from context.
2. *Decide* (:meth:`SimulatedExaminee._decide`, numbers and rules in
   :mod:`medmis.agents._calibration`): clean answer, following or resisting false sentences,
   type2 recovery, correction by evidence that carries gold.
3. *Reply* (:mod:`medmis.agents._replies`): the next ``search_web`` / ``visit_web`` call when
   tools are bound, a JSON object for verdict / queries / claims tasks, otherwise a few
   sentences of reasoning and a line ``Final answer: X``.
4. *Usage.* Token counts are estimated (``medmis.agents._mock.estimate_tokens``). The
   identifying parameters (model name, policy, seed, clean accuracy, answer-key digest)
   are what the record/replay store keys on; latency and fault rate are left out because
   they never change a successful reply.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, cast

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict, Field, PrivateAttr

from medmis.experiments.benchmark._protocols import stable_rng
from medmis.experiments.benchmark._types import Item

from ._calibration import (
    EVIDENCE_CORRECTION,
    FOLLOW_MAX,
    MEAN_TYPE1_ASR,
    TRUSTED_FOLLOW,
    TRUSTED_RECOVERY,
    TYPE2_ASR,
    TYPE2_RECOVERY,
    WARNING_MARKERS,
    type1_follow_probability,
)
from ._errors import TransientModelError
from ._mock import message_text, with_usage
from ._reading import _AnswerKey, _evidence_for_gold, _find_context, _parse_options, _read, _View
from ._registry import ModelOptions
from ._replies import (
    _claims,
    _Decision,
    _digest,
    _mcq_text,
    _queries,
    _tool_call,
    _unknown_text,
    _verdict,
)

ExamineePolicy = Literal["examinee", "oracle", "random"]
POLICIES: tuple[ExamineePolicy, ...] = ("examinee", "oracle", "random")

DEFAULT_ANSWER_KEY = Path(__file__).resolve().parents[1] / "fixtures" / "medmisbench_sample.jsonl"

EXTRA_KEYS = frozenset({"answer_key", "seed", "clean_accuracy", "fault_rate", "latency_s"})


def _unit(*parts: object) -> float:
    """A uniform number in [0, 1) from SHA-256 of the parts."""
    return stable_rng(*parts).random()


# --- the model ---------------------------------------------------------------------------
class SimulatedExaminee(BaseChatModel):
    """A deterministic simulated examinee (the policy: module docstring and ``_calibration``).

    Attributes:
        model_name: The spec it was built from, e.g. ``mock/examinee``.
        policy: ``examinee`` (calibrated policy), ``oracle`` (always gold) or ``random``.
        seed: Seed for every draw.
        clean_accuracy: Probability of the gold answer without context.
        fault_rate: Share of distinct requests whose first attempt raises a transient error.
        latency_s: Seconds slept per call.
        answer_key: Data file with the items; ``None`` means the bundled sample fixture.
        items: Items given directly (tests); takes precedence over ``answer_key``.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model_name: str = "mock/examinee"
    policy: ExamineePolicy = "examinee"
    seed: int = 0
    clean_accuracy: float = Field(default=0.8, ge=0.0, le=1.0)
    fault_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    latency_s: float = Field(default=0.0, ge=0.0)
    answer_key: str | None = None
    items: list[Item] | None = None

    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _key: _AnswerKey | None = PrivateAttr(default=None)
    _key_id: str | None = PrivateAttr(default=None)
    _failed: set[str] = PrivateAttr(default_factory=set)

    @property
    def _llm_type(self) -> str:
        return "medmis-simulated-examinee"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        # latency_s and fault_rate are left out: they never change a successful reply
        return {
            "model_name": self.model_name,
            "policy": self.policy,
            "seed": self.seed,
            "clean_accuracy": self.clean_accuracy,
            "answer_key": self._answer_key_id(),
        }

    def _answer_key_id(self) -> str:
        """A digest of the answer key, so a cache never serves one key's answers for another."""
        if self._key_id is None:
            if self.items is not None:
                blob = json.dumps([i.model_dump(mode="json") for i in self.items], sort_keys=True)
                self._key_id = "inline:" + _digest(blob)[:16]
            else:
                path = Path(self.answer_key) if self.answer_key else DEFAULT_ANSWER_KEY
                if path.is_file():
                    data = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
                elif path.is_dir():  # a folder of subset files, e.g. the whole release
                    from medmis.experiments.benchmark._readers import files_in
                    digest = hashlib.sha256()
                    for f in files_in(path):
                        digest.update(f.relative_to(path).as_posix().encode() + b"\0")
                        digest.update(hashlib.sha256(f.read_bytes()).digest())
                    data = digest.hexdigest()[:16]
                else:
                    data = "missing"
                self._key_id = f"{path.name}:{data}"
        return self._key_id

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        """Bind tool schemas; the examinee recognises ``search_web`` and ``visit_web``."""
        schemas = [
            t if isinstance(t, dict) and "function" in t else convert_to_openai_tool(t)
            for t in tools
        ]
        return self.bind(tools=schemas, **kwargs)

    # -- answer key -------------------------------------------------------------------------
    def _answer_key_index(self) -> _AnswerKey:
        with self._lock:
            if self._key is None:
                self._key = _AnswerKey(self.items if self.items is not None else self._load_items())
            return self._key

    def _load_items(self) -> list[Item]:
        path = Path(self.answer_key) if self.answer_key else DEFAULT_ANSWER_KEY
        if not path.exists():
            raise FileNotFoundError(f"simulated examinee: answer key {path} not found")
        from medmis.experiments.benchmark._data import (
            load_dataset,  # the loader is only needed without items
        )

        return list(load_dataset(path).items)

    # -- draws ------------------------------------------------------------------------------
    def _u(self, item: Item, role: str, *more: object) -> float:
        return _unit(self.seed, item.key, role, *more)

    def clean_answer(self, item: Item) -> str:
        """The answer without context; depends only on (seed, item id)."""
        if self._u(item, "clean") < self.clean_accuracy or not item.wrong_keys:
            return item.gold
        return stable_rng(self.seed, item.key, "clean-wrong").choice(item.wrong_keys)

    def _decide(self, item: Item, view: _View) -> _Decision:
        if self.policy == "oracle":
            return _Decision(item.gold, "oracle")
        if self.policy == "random":
            return _Decision(stable_rng(self.seed, item.key, "random").choice(item.keys), "random")
        clean = self.clean_answer(item)
        ev = _evidence_for_gold(item, view.evidence)
        if ev is not None and self._u(item, "evidence") < EVIDENCE_CORRECTION:
            return _Decision(item.gold, "evidence", ev[0])
        found = _find_context(item, view.prompt)
        live = {k: note for k, note in found.items() if note != "refuted"}
        false = [k for k in item.options if k in live and k != item.gold]
        truth = item.gold in live
        low = " ".join(view.prompt.casefold().split())
        warned = any(marker in low for marker in WARNING_MARKERS)

        def follow_p(key: str) -> float:
            return (
                TRUSTED_FOLLOW
                if live[key] == "supported"
                else type1_follow_probability(item, warned=warned)
            )

        if false and not truth:
            for key in false:
                if self._u(item, "type1", key) < follow_p(key):
                    return _Decision(key, "follow", item.contexts[key])
            return _Decision(clean, "resist", item.contexts[false[0]])
        if false:
            trusted = [k for k in false if live[k] == "supported"]
            key = (
                trusted[0]
                if trusted
                else stable_rng(self.seed, item.key, "type2-target").choice(false)
            )
            p2 = min(FOLLOW_MAX, TYPE2_ASR * follow_p(key) / MEAN_TYPE1_ASR)
            if live[item.gold] == "supported":
                p2 *= 0.5
            if self._u(item, "type2") < p2:
                return _Decision(key, "follow", item.contexts[key])
        if truth and clean != item.gold:
            recovery = TRUSTED_RECOVERY if live[item.gold] == "supported" else TYPE2_RECOVERY
            if self._u(item, "recovery") < recovery:
                return _Decision(item.gold, "recovered", item.contexts[item.gold])
        if false:
            return _Decision(clean, "weighed")
        if truth and clean == item.gold:
            return _Decision(clean, "recovered", item.contexts[item.gold])
        if found and not live:
            return _Decision(clean, "set_aside")
        return _Decision(clean, "clean")

    # -- replies ----------------------------------------------------------------------------
    def _reply(self, messages: Sequence[BaseMessage], tools: Sequence[Any]) -> AIMessage:
        view = _read(messages)
        item = self._answer_key_index().identify(view.prompt)
        # the JSON key a prompt asks for names the task; the most specific key wins
        stated = view.task + "\n" + view.closing
        task = next((k for k in ("verdict", "queries", "claims") if f'"{k}"' in stated), "mcq")
        names = {
            str(t.get("function", {}).get("name", t.get("name", "")))
            for t in tools
            if isinstance(t, dict)
        }
        if names and task in {"mcq", "verdict"}:
            call = _tool_call(item, view, task, names, self.seed)
            if call is not None:
                return call
        if task == "verdict":
            return AIMessage(content=json.dumps(_verdict(item, view)))
        if task == "queries":
            return AIMessage(content=json.dumps(_queries(item, view)))
        if task == "claims":
            return AIMessage(content=json.dumps(_claims(item, view)))
        if item is None:
            return AIMessage(content=_unknown_text(view, self.seed))
        return AIMessage(
            content=_mcq_text(item, self._decide(item, view), _parse_options(view.prompt))
        )

    def _maybe_fail(self, messages: Sequence[BaseMessage]) -> None:
        if self.fault_rate <= 0:
            return
        canonical = json.dumps(
            [
                [
                    m.type,
                    message_text(m),
                    [[c["name"], c["args"]] for c in getattr(m, "tool_calls", None) or []],
                ]
                for m in messages
            ],
            sort_keys=True,
            default=str,
        )
        key = _digest(canonical)
        if _unit(self.seed, "fault", key) >= self.fault_rate:
            return
        with self._lock:
            if key in self._failed:
                return
            self._failed.add(key)
        raise TransientModelError("simulated transient fault (first attempt)", retry_after=0)

    def _respond(self, messages: list[BaseMessage], kwargs: dict[str, Any]) -> ChatResult:
        self._maybe_fail(messages)
        reply = with_usage(self._reply(messages, list(kwargs.get("tools") or [])), messages)
        return ChatResult(generations=[ChatGeneration(message=reply)])

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if self.latency_s:
            time.sleep(self.latency_s)
        return self._respond(messages, kwargs)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        return self._respond(messages, kwargs)


def build(model_id: str, opts: ModelOptions) -> BaseChatModel:
    """Build a ``mock/<name>`` model: ``examinee``, ``oracle`` or ``random``.

    Args:
        model_id: The part of the spec after ``mock/``.
        opts: Shared model options; ``opts.extra`` may set ``answer_key``, ``seed``,
            ``clean_accuracy``, ``fault_rate`` and ``latency_s``. ``opts.seed`` is the seed
            when ``extra`` has none.

    Returns:
        A :class:`SimulatedExaminee`.

    Raises:
        ValueError: For an unknown mock model or an unknown ``extra`` key.
    """
    if model_id not in POLICIES:
        raise ValueError(f"unknown mock model {model_id!r} (known: {', '.join(POLICIES)})")
    unknown = sorted(set(opts.extra) - EXTRA_KEYS)
    if unknown:
        raise ValueError(
            f"mock/{model_id}: unknown option(s) {', '.join(unknown)} (known: {', '.join(sorted(EXTRA_KEYS))})"
        )
    extra = opts.extra
    seed = extra.get("seed", opts.seed if opts.seed is not None else 0)
    answer_key = extra.get("answer_key")
    return SimulatedExaminee(
        model_name=f"mock/{model_id}",
        policy=cast(ExamineePolicy, model_id),  # checked against POLICIES above
        seed=int(seed),
        clean_accuracy=float(extra.get("clean_accuracy", 0.8)),
        fault_rate=float(extra.get("fault_rate", 0.0)),
        latency_s=float(extra.get("latency_s", 0.0)),
        answer_key=str(answer_key) if answer_key is not None else None,
    )
