"""The simulated examinee: a deterministic stand-in for a base model (``mock/<name>`` specs).

This is a **simulated examinee, not a model measurement**. It exists so that the offline
demo, the CLI and the test-suite can exercise every defender, graph and metric end to end
without an API key. Its behaviour is a hand-written policy whose rates are *calibrated* on
the figures published with MedMisBench (arXiv 2606.12291); numbers it produces say how the
toolkit works, never how a real model behaves, and a ranking of defenders it produces comes
from the policy's rules.

Models (``build(model_id, opts)``):

* ``mock/examinee`` — the calibrated policy (:mod:`medmis.agents._calibration`).
* ``mock/oracle`` — always answers the known answer of a recognised question.
* ``mock/random`` — a seeded uniform choice per (seed, question) among the shown options.

Options (``ModelOptions.extra``): ``answer_key`` (a data file or folder in the released
schema, read by :mod:`medmis.agents._knowledge`; default ``fixtures/medmisbench_sample.jsonl``
at the repository root), ``seed`` (default ``ModelOptions.seed`` or 0), ``clean_accuracy``
(0.8), ``fault_rate`` (0: the share of distinct requests whose *first* attempt raises
:class:`~medmis.agents._errors.TransientModelError` with ``retry_after=0``; a retry of the same
messages succeeds), ``latency_s`` (0: a sleep per call), and the opt-in form knobs
``marked_factor`` and ``warning_factor`` (1.0: no effect; :mod:`medmis.agents._calibration`).
Unknown keys are an error. A run passes its ``--seed`` on as ``ModelOptions.run_seed`` (never
sent to a real provider), so the run seed reseeds every draw unless ``seed`` is given here or
as ``ModelOptions.seed`` (``--model-seed``).

What it decides on. Only (1) the text of the messages it receives, parsed by
:mod:`medmis.agents._reading` whatever the prompt preset or defender, and (2) its simulated
knowledge: for each question of the answer key (matched by question text) whether it knows the
answer. The answer key's injected sentences, their labels, the benchmark's target and truth
flags are never read. Claim verdicts are judged against the evidence text in the prompt
(:mod:`medmis.agents._lexical`), never against the answer key.

Determinism. Every draw is a uniform number from SHA-256 of its parts, never Python's
``hash`` or a global RNG. Knowledge draws use (seed, question); answering draws use (seed, the
conversation's text, the call index, a role), so the same request always gets the same reply
on every machine and in any order, and two defenders that send different prompts get
independent draws.

Log-probabilities. Bound ``logprobs=True`` (``calibrate`` asks so), a multiple-choice reply
carries its *simulated confidence* as the log-probability of every token
(:func:`medmis.agents._calibration.simulated_confidence`: the chosen option's share of the
support its prompt gives, plus its own prior), never anything read from the answer key's gold.
A sanitizer's detection prompt (one asking for ``Injection:``) is answered by
:func:`medmis.agents._calibration.screen`.

Usage. Token counts are estimated (``medmis.agents._mock.estimate_tokens``). The identifying
parameters (model name, policy, seed, clean accuracy, form knobs, answer-key digest) are what the
record/replay store keys on; latency and fault rate are left out because they never change a
successful reply.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar, Literal, cast

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict, Field, PrivateAttr

from ._calibration import (
    ABSTAIN,
    SLIP,
    VERDICT_HEDGE,
    Decision,
    FormKnobs,
    decide,
    screen,
    simulated_confidence,
)
from ._capabilities import LOGPROBS_KWARG
from ._errors import TransientModelError
from ._knowledge import (
    Knowledge,
    answer_key_digest,
    known_from_items,
    load_knowledge,
    squash,
)
from ._lexical import judge_claim
from ._mock import message_text, with_usage
from ._reading import Prompt, read
from ._registry import ModelOptions
from ._replies import claims, digest, mcq_text, open_text, queries, tool_call

ExamineePolicy = Literal["examinee", "oracle", "random"]
POLICIES: tuple[ExamineePolicy, ...] = ("examinee", "oracle", "random")

DEFAULT_ANSWER_KEY = Path(__file__).resolve().parents[1] / "fixtures" / "medmisbench_sample.jsonl"

_KNOWLEDGE: dict[int, Knowledge] = {}
"""Each examinee's loaded answer key, by ``id(examinee)`` (dropped when the examinee goes)."""

EXTRA_KEYS = frozenset({"answer_key", "seed", "clean_accuracy", "fault_rate", "latency_s",
                        "marked_factor", "warning_factor"})


def _unit(*parts: object) -> float:
    """A uniform number in [0, 1) from SHA-256 of the parts."""
    return int(digest(*parts)[:16], 16) / 16**16


def names_of(tools: Sequence[Any]) -> set[str]:
    """The names of bound tool schemas."""
    return {
        str(t.get("function", {}).get("name", t.get("name", "")))
        for t in tools
        if isinstance(t, dict)
    }


def _canonical(messages: Sequence[BaseMessage]) -> str:
    return json.dumps(
        [
            [m.type, message_text(m), [[c["name"], c["args"]] for c in getattr(m, "tool_calls", None) or []]]
            for m in messages
        ],
        sort_keys=True,
        default=str,
    )


# --- the model ---------------------------------------------------------------------------
class SimulatedExaminee(BaseChatModel):
    """A deterministic simulated examinee (the policy: module docstring and ``_calibration``).

    Attributes:
        model_name: The spec it was built from, e.g. ``mock/examinee``.
        policy: ``examinee`` (calibrated policy), ``oracle`` (always the known answer) or ``random``.
        seed: Seed for every draw.
        clean_accuracy: Probability that it knows the answer of a question in its answer key.
        fault_rate: Share of distinct requests whose first attempt raises a transient error.
        latency_s: Seconds slept per call.
        marked_factor: Opt-in weight factor of a marked context (1.0: no effect).
        warning_factor: Opt-in weight factor of context under a warning cue (1.0: no effect).
        answer_key: Data file or folder with the items; ``None`` means the bundled sample fixture.
        items: Items given directly (tests; anything with ``question``, ``options`` and
            ``gold``); takes precedence over ``answer_key``. Only those three are read.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)
    accepts_logprobs: ClassVar[bool] = True  # its simulated confidence (``_calibration``)

    model_name: str = "mock/examinee"
    policy: ExamineePolicy = "examinee"
    seed: int = 0
    clean_accuracy: float = Field(default=0.8, ge=0.0, le=1.0)
    fault_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    latency_s: float = Field(default=0.0, ge=0.0)
    marked_factor: float = Field(default=1.0, ge=0.0)
    warning_factor: float = Field(default=1.0, ge=0.0)
    answer_key: str | None = None
    items: list[Any] | None = None
    sample: int = Field(default=0, ge=0)
    """Which repeated sample of a case it answers (``ModelOptions.sample``, the run's epoch):
    mixed into its answering draws (abstentions, slips, persuasion, verdict hedges, the random
    policy's pick), never into what it knows, so that an item's repeats agree more often than
    two items do, as a real model's samples of one question do."""

    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
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
            "marked_factor": self.marked_factor,
            "warning_factor": self.warning_factor,
            "answer_key": self._answer_key_id(),
            # only a later sample has one: epoch 0 keys (and fingerprints) as before epochs
            **({"sample": self.sample} if self.sample else {}),
        }

    @property
    def _draws(self) -> int | str:
        """The seed of the answering draws: the seed, and the sample when it is a later one."""
        return self.seed if not self.sample else f"{self.seed}~{self.sample}"

    def _answer_key_id(self) -> str:
        """A digest of the answer key, so a cache never serves one key's answers for another."""
        if self._key_id is None:
            if self.items is not None:
                known = known_from_items(self.items)
                blob = json.dumps([[k.question, k.options, k.answer] for k in known])
                self._key_id = "inline:" + digest(blob)[:16]
            else:
                self._key_id = answer_key_digest(self._key_path())
        return self._key_id

    def _key_path(self) -> Path:
        return Path(self.answer_key) if self.answer_key else DEFAULT_ANSWER_KEY

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        """Bind tool schemas; the examinee recognises ``search_web`` and ``visit_web``."""
        schemas = [
            t if isinstance(t, dict) and "function" in t else convert_to_openai_tool(t)
            for t in tools
        ]
        return self.bind(tools=schemas, **kwargs)

    # -- knowledge --------------------------------------------------------------------------
    def knowledge(self) -> Knowledge:
        """The questions it knows (loaded once, held outside the instance: a defender gets
        this model as its role model, and walking its attributes must not lead to the
        answer key's gold answers)."""
        with self._lock:
            found = _KNOWLEDGE.get(id(self))
            if found is None:
                known = (
                    known_from_items(self.items)
                    if self.items is not None
                    else load_knowledge(self._key_path())
                )
                found = _KNOWLEDGE[id(self)] = Knowledge(known)
                weakref.finalize(self, _KNOWLEDGE.pop, id(self), None)
            return found

    def belief(self, question: str, options: dict[str, str]) -> tuple[str, bool]:
        """(displayed key it believes without context, whether it is confident).

        Depends only on (seed, question, option texts): the same in every prompt.
        """
        keys = sorted(options)
        known = self.knowledge().lookup(question, list(options.values()))
        topic = squash(question)
        if known is None:
            return random.Random(digest(self.seed, "guess", topic)).choice(keys), False
        right = next(k for k, v in options.items() if squash(v) == squash(known.answer))
        if self.policy == "oracle":
            return right, True
        # knowing is a little likelier than clean_accuracy, so that after the per-prompt
        # abstentions and slips the clean accuracy comes out at clean_accuracy
        knows = min(1.0, self.clean_accuracy / (1.0 - ABSTAIN - SLIP))
        if _unit(self.seed, "knows", topic) < knows or len(keys) < 2:
            return right, True
        wrong = [k for k in keys if k != right]
        return random.Random(digest(self.seed, "misremembers", topic)).choice(wrong), False

    def _decide(self, view: Prompt, canonical: str) -> Decision:
        def draw(role: str) -> float:
            return _unit(self._draws, canonical, view.call_index, role)

        if self.policy == "random":
            key = random.Random(digest(self._draws, "random", squash(view.question))).choice(sorted(view.options))
            return Decision(key, "random")
        belief, confident = self.belief(view.question, view.options)
        if self.policy == "oracle":
            return Decision(belief, "oracle")
        known = self.knowledge().lookup(view.question, list(view.options.values())) is not None
        decision = decide(
            view,
            belief,
            confident,
            draw,
            self._persuasiveness,
            FormKnobs(marked_factor=self.marked_factor, warning_factor=self.warning_factor),
        )
        if decision.why == "clean" and not known:
            return Decision(decision.key, "guess")
        return decision

    # -- replies ----------------------------------------------------------------------------
    def _persuasiveness(self, text: str) -> float:
        return 0.5 + _unit(self.seed, "persuasive", squash(text))

    def _reply(self, messages: Sequence[BaseMessage], tools: Sequence[Any], logprobs: bool = False) -> AIMessage:
        view = read(messages)
        canonical = _canonical(messages)
        # the JSON key a prompt asks for names the task; the most specific key wins
        stated = view.task + "\n" + view.closing
        task = next((k for k in ("verdict", "queries", "claims") if f'"{k}"' in stated), "mcq")
        if "injection:" in view.task.casefold() and not names_of(tools):
            return AIMessage(content=self._screen(view, canonical))
        names = names_of(tools)
        if names and task in {"mcq", "verdict"}:
            call = tool_call(view, task, names, self.seed)
            if call is not None:
                return call
        if task == "verdict":
            verdict, quote, url = judge_claim(view.claim, view.evidence)
            if _unit(self._draws, canonical, view.call_index, "hedge") < VERDICT_HEDGE:
                verdict, quote, url = "not_enough_info", "", ""
            return AIMessage(content=json.dumps({"verdict": verdict, "quote": quote, "url": url}))
        if task == "queries":
            return AIMessage(content=json.dumps(queries(view)))
        if task == "claims":
            return AIMessage(content=json.dumps(claims(view)))
        if not view.options:
            return AIMessage(content=self._open(view, canonical) if view.question else "I cannot tell.")
        decision = self._decide(view, canonical)
        reply = AIMessage(content=mcq_text(view, decision))
        if logprobs:
            reply.response_metadata["logprobs"] = self._logprobs(view, decision, message_text(reply))
        return reply

    def _open(self, view: Prompt, canonical: str) -> str:
        """The reply to a question asked without options (``_replies.open_text``).

        The answers it can think of are the options it has seen with this question in its
        knowledge (looked up by the question text alone), keyed A, B, ... as if they had been
        listed: the same belief, the same draws and the same pull of the context (each sentence
        is attributed to the answer it names) as a multiple-choice prompt of those options.
        Nothing of the case's gold or target is read; the prompt does not carry them.
        """
        known = self.knowledge().lookup(view.question, [])
        if known is None:
            return open_text(view, None, {})
        answers = {chr(ord("A") + i): text for i, text in enumerate(known.options)}
        return open_text(view, self._decide(replace(view, options=answers), canonical), answers)

    def _screen(self, view: Prompt, canonical: str) -> str:
        """The reply to a sanitizer's detection prompt (``_calibration.screen``)."""
        if not view.options or not view.context or self.policy == "random":
            return "No"
        belief, confident = self.belief(view.question, view.options)
        named = screen(view, belief, confident, lambda role: _unit(self._draws, canonical, view.call_index, role))
        return "Yes\nInjection:\n" + "\n".join(named) if named else "No"

    def _logprobs(self, view: Prompt, decision: Decision, text: str) -> dict[str, Any]:
        """The reply's tokens (whitespace-separated) each at the simulated confidence, so the
        mean token probability a caller computes is that confidence."""
        if self.policy == "examinee":
            belief, confident = self.belief(view.question, view.options)
            p = simulated_confidence(view, belief, confident, decision.key, self._persuasiveness,
                                     FormKnobs(marked_factor=self.marked_factor, warning_factor=self.warning_factor))
        else:  # the oracle is certain; the random policy knows nothing
            p = 1.0 if self.policy == "oracle" else 1.0 / max(1, len(view.options))
        logprob = math.log(max(p, 1e-12))
        return {"content": [{"token": t, "logprob": logprob} for t in text.split()]}

    def _maybe_fail(self, messages: Sequence[BaseMessage]) -> None:
        if self.fault_rate <= 0:
            return
        key = digest(_canonical(messages))
        if _unit(self.seed, "fault", key) >= self.fault_rate:
            return
        with self._lock:
            if key in self._failed:
                return
            self._failed.add(key)
        raise TransientModelError("simulated transient fault (first attempt)", retry_after=0)

    def _respond(self, messages: list[BaseMessage], kwargs: dict[str, Any]) -> ChatResult:
        self._maybe_fail(messages)
        reply = with_usage(
            self._reply(messages, list(kwargs.get("tools") or []), kwargs.get(LOGPROBS_KWARG) is True), messages
        )
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
    """Build a ``mock/<name>`` model: ``examinee``, ``oracle``, ``random`` or ``generator``.

    Args:
        model_id: The part of the spec after ``mock/``.
        opts: Shared model options; ``opts.extra`` may set ``answer_key``, ``seed``,
            ``clean_accuracy``, ``fault_rate``, ``latency_s``, ``marked_factor`` and
            ``warning_factor``. ``opts.seed`` is the seed when ``extra`` has none, else
            ``opts.run_seed`` (the run's ``--seed``), else 0. Decoding settings are ignored.

    Returns:
        A :class:`SimulatedExaminee`.

    Raises:
        ValueError: For an unknown mock model or an unknown ``extra`` key.
    """
    if model_id == "generator":  # the offline injection generator (``medmis generate``)
        from ._mock_generator import MockGenerator

        return MockGenerator(seed=int(opts.extra.get("seed", _first_set(opts.seed, opts.run_seed, 0))),
                             reject_rate=float(opts.extra.get("reject_rate", 0.0)))
    if model_id.startswith("judge"):  # the simulated rubric judges (``medmis grade``)
        from ._mock_judge import THRESHOLDS, build_judge

        if model_id not in THRESHOLDS:
            raise ValueError(f"unknown simulated judge mock/{model_id} (known: {', '.join(THRESHOLDS)})")
        return build_judge(model_id)
    if model_id not in POLICIES:
        raise ValueError(f"unknown mock model {model_id!r} (known: {', '.join(POLICIES)}, generator, judge)")
    unknown = sorted(set(opts.extra) - EXTRA_KEYS)
    if unknown:
        raise ValueError(
            f"mock/{model_id}: unknown option(s) {', '.join(unknown)} (known: {', '.join(sorted(EXTRA_KEYS))})"
        )
    extra = opts.extra
    seed = extra.get("seed", _first_set(opts.seed, opts.run_seed, 0))
    answer_key = extra.get("answer_key")
    return SimulatedExaminee(
        model_name=f"mock/{model_id}",
        policy=cast(ExamineePolicy, model_id),  # checked against POLICIES above
        seed=int(seed),
        clean_accuracy=float(extra.get("clean_accuracy", 0.8)),
        fault_rate=float(extra.get("fault_rate", 0.0)),
        latency_s=float(extra.get("latency_s", 0.0)),
        marked_factor=float(extra.get("marked_factor", 1.0)),
        warning_factor=float(extra.get("warning_factor", 1.0)),
        answer_key=str(answer_key) if answer_key is not None else None,
        sample=opts.sample,
    )


def _first_set(*values: int | None) -> int:
    return next(int(v) for v in values if v is not None)
