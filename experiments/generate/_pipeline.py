"""One item through the generator: option extraction (free-text sources), then either the
paper's two stages (applicability filter, option-aligned generation) or the reference's merged
call. Every reply is validated against its schema; what fails is an :class:`Outcome` with a
reason, never a row."""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage

from medmis.agents import RetryPolicy, StructuredOutput, message_text, retry_async

from . import _prompts as P
from ._release import release_row
from ._schemas import (
    ExtractReply,
    FilterReply,
    GenerationReply,
    MergedReply,
    ReplyError,
    check_injections,
    extract_schema,
    filter_schema,
    generation_schema,
    merged_schema,
    parse_reply,
)
from ._sources import SourceItem, match_gold

Stages = Literal["two", "one"]
Status = Literal["generated", "rejected", "malformed", "error"]
FINAL_STATUSES: frozenset[str] = frozenset({"generated", "rejected", "malformed"})


def sample_provenance(seed: int, subset: str, item_id: str) -> str:
    """The provenance frame for an item: seeded on the run seed and the item's namespaced key,
    so it does not depend on order, ``--limit`` or concurrency (the reference draws unseeded)."""
    digest = hashlib.sha256(f"{seed}:provenance:{subset}/{item_id}".encode()).digest()
    return random.Random(digest).choice(list(P.PROVENANCE_TYPES))


@dataclass(frozen=True)
class Job:
    """What to generate for one item. ``content`` is set when it is held fixed (regeneration):
    stage 1 is then skipped and stage 2 writes sentences for that content type."""

    item: SourceItem
    provenance: str
    content: str | None = None


class SidecarRow:
    """An outcome line of ``OUT.generation.jsonl``: every field but the written row, and
    whether one was written."""

    row: dict[str, Any] | None

    def sidecar(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "row"}
        out["written"] = self.row is not None
        return out


@dataclass
class Outcome(SidecarRow):
    """The result for one item, as written to the sidecar."""

    id: str
    subset: str
    status: Status
    provenance: str
    reason: str | None = None
    row: dict[str, Any] | None = None
    content: str | None = None
    stage1: dict[str, Any] | None = None
    scores: dict[str, int] | None = None
    replies: list[dict[str, Any]] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    calls: int = 0


async def structured_call(
    model: BaseChatModel, prompt: str, schema: StructuredOutput, retry: RetryPolicy
) -> tuple[str, int, int]:
    """One generator call under a JSON schema: (reply text, input tokens, output tokens)."""
    bound = model.bind(structured_output=schema)
    message = await retry_async(lambda: bound.ainvoke([HumanMessage(prompt)]), retry)
    text = message_text(message) if isinstance(message, AIMessage) else str(message)
    usage = getattr(message, "usage_metadata", None) or {}
    return text, int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0))


class _Rejected(Exception):
    def __init__(self, status: Status, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


class Pipeline:
    """Runs :class:`Job` s against a generator model (and an extraction model at temperature 0,
    as the reference extracts)."""

    def __init__(
        self,
        model: BaseChatModel,
        extract_model: BaseChatModel,
        *,
        stages: Stages = "two",
        retry: RetryPolicy | None = None,
    ) -> None:
        self.model = model
        self.extract_model = extract_model
        self.stages = stages
        self.retry = retry or RetryPolicy()

    async def _call(self, out: Outcome, step: str, model: BaseChatModel, prompt: str, schema: StructuredOutput) -> str:
        text, tokens_in, tokens_out = await structured_call(model, prompt, schema, self.retry)
        out.input_tokens += tokens_in
        out.output_tokens += tokens_out
        out.calls += 1
        out.replies.append({"step": step, "schema": schema["name"], "text": text})
        return text

    async def run(self, job: Job) -> Outcome:
        """Generate one item; provider failures after retries are ``error`` (retried on resume)."""
        item = job.item
        out = Outcome(item.id, item.subset, "error", job.provenance, content=job.content)
        try:
            options, gold = await self._options(out, item)
            if job.content is not None:
                content = job.content
            elif self.stages == "two":
                content = await self._filter(out, item, options, gold)
            else:
                content, sentences = await self._merged(out, item, options, gold, job.provenance)
            if job.content is not None or self.stages == "two":
                prompt = P.generation_prompt(item.question, options, gold, content, job.provenance, item.language)
                text = await self._call(out, "generation", self.model, prompt, generation_schema(list(options)))
                sentences = check_injections(parse_reply(text, GenerationReply).injections, list(options))
            out.content = content
            out.row = release_row(item, options, gold, sentences, content, job.provenance)
            out.status = "generated"
        except _Rejected as exc:
            out.status, out.reason = exc.status, exc.reason
        except ReplyError as exc:
            out.status, out.reason = "malformed", str(exc)
        except Exception as exc:  # provider and SDK failures, after the retry policy gave up
            # recorded on the item's outcome and retried on resume, as the harness records them
            out.status, out.reason = "error", f"{type(exc).__name__}: {exc}"[:300]
        return out

    async def _options(self, out: Outcome, item: SourceItem) -> tuple[dict[str, str], str]:
        if item.options is not None and item.gold is not None:
            return item.options, item.gold
        text = await self._call(out, "extraction", self.extract_model,
                                P.extract_prompt(item.question, item.language), extract_schema())
        options = {str(k).strip(): str(v).strip() for k, v in parse_reply(text, ExtractReply).options.items()
                   if str(v).strip()}
        if len(options) < 2:
            raise _Rejected("rejected", "extraction found fewer than two options")
        gold = match_gold(options, item.gold_text or "")
        if gold is None:
            raise _Rejected("rejected", "the answer matches no single extracted option")
        return options, gold

    async def _filter(self, out: Outcome, item: SourceItem, options: dict[str, str], gold: str) -> str:
        text = await self._call(out, "filter", self.model, P.filter_prompt(item.question, options, gold),
                                filter_schema())
        decision = parse_reply(text, FilterReply)
        out.stage1 = decision.model_dump()
        if not decision.is_viable or decision.content_type == P.NOT_APPLICABLE:
            raise _Rejected("rejected", f"not viable: {decision.reason}".strip())
        return decision.content_type

    async def _merged(
        self, out: Outcome, item: SourceItem, options: dict[str, str], gold: str, provenance: str
    ) -> tuple[str, dict[str, str]]:
        prompt = P.merged_prompt(item.question, options, gold, provenance, item.language)
        reply = parse_reply(await self._call(out, "merged", self.model, prompt, merged_schema(list(options))),
                            MergedReply)
        out.scores = {"difficulty": reply.difficulty_score, "mislead": reply.mislead_score}
        out.stage1 = {"is_viable": reply.is_viable, "content_type": reply.chosen_misinfo_type}
        if not reply.is_viable or reply.chosen_misinfo_type == P.NOT_APPLICABLE:
            raise _Rejected("rejected", "not viable")
        return reply.chosen_misinfo_type, check_injections(reply.injections, list(options))
