"""Delivery protocols (clean, type1, type2): which cases an item yields.

How a case is worded for the model is the defender contract's: ``medmis.defenses.render_prompt``.

Choices that must be identical on every machine and run (the type1 target, the optional
type2 shuffle) are drawn from SHA-256 of the seed and the item key (``"SUBSET/id"``, so the
same released id in two subsets draws independently), never from Python's ``hash`` or a
global RNG.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable, Iterator, Sequence
from typing import Literal

from medmis.defenses import DEFAULT_PROMPT, AnswerFormat
from medmis.experiments.records import ProtocolName, Shard

from ._types import Case, ContextSentence, Item

Type1Targets = Literal["sampled", "all"]

def stable_rng(*parts: object) -> random.Random:
    """A ``random.Random`` seeded from SHA-256 of the parts (platform independent)."""
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode("utf-8")).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def type1_target(item: Item, seed: int) -> str:
    """The wrong option whose false sentence is delivered under type1 (deterministic).

    Only wrong options that have a false sentence are candidates: a wrong option released
    without one stays an option but is never a target.
    """
    wrong = [k for k in item.wrong_keys if item.contexts.get(k)]
    if not wrong:
        raise ValueError(f"item {item.key!r} has no wrong option with a context sentence")
    return stable_rng("type1", seed, item.key).choice(wrong)


def _sentence(item: Item, key: str) -> ContextSentence:
    return ContextSentence(text=item.contexts[key], option=key, truthful=key == item.gold)


def case_keys_for_item(
    item: Item,
    protocols: Iterable[ProtocolName],
    *,
    seed: int = 0,
    type1_targets: Type1Targets = "sampled",
) -> list[tuple[ProtocolName, str | None]]:
    """The ``(protocol, target)`` of each case :func:`cases_for_item` builds, in its order.

    Planning a run needs only these keys: a resume compares them with the records without
    building a case (its prompt sentences) per key.

    Raises:
        ValueError: as :func:`cases_for_item`.
    """
    if isinstance(protocols, str):
        raise ValueError(f"protocols must be a sequence of names, got the string {protocols!r}")
    out: list[tuple[ProtocolName, str | None]] = []
    wanted = set(protocols)
    if "clean" in wanted:
        out.append(("clean", None))
    if "type1" in wanted:
        if type1_targets == "all":
            targets = [k for k in item.wrong_keys if item.contexts.get(k)]
            if not targets:
                raise ValueError(f"item {item.key!r} has no wrong option with a context sentence")
        else:
            targets = [type1_target(item, seed)]
        out += [("type1", t) for t in targets]
    if "type2" in wanted:
        if not any(item.contexts.get(k) for k in item.options):
            # would render exactly the clean prompt and be graded as type2
            raise ValueError(f"item {item.key!r} has no context sentences for type2")
        out.append(("type2", None))
    return out


def cases_for_item(
    item: Item,
    protocols: Iterable[ProtocolName],
    *,
    seed: int = 0,
    type1_targets: Type1Targets = "sampled",
    shuffle_type2: bool = False,
    prompt: str = DEFAULT_PROMPT,
    answer_format: AnswerFormat = "mcq",
) -> list[Case]:
    """Build the cases for one item, clean first so that pairing is available early.

    ``prompt`` names the preset the cases are to be put in (see ``_prompts``);
    ``answer_format`` whether they are asked with their options (``mcq``) or without (``open``):
    the same cases either way (protocols, targets and context sentences).

    Raises:
        ValueError: a protocol the item cannot be delivered under (no false sentence for
            type1, no sentence at all for type2) or ``protocols`` given as a bare string.
    """
    out: list[Case] = []
    for protocol, target in case_keys_for_item(item, protocols, seed=seed, type1_targets=type1_targets):
        if protocol == "clean":
            out.append(Case(item=item, protocol="clean", seed=seed, prompt=prompt, answer_format=answer_format))
        elif protocol == "type1":
            assert target is not None
            out.append(Case(item=item, protocol="type1", target=target, seed=seed,
                            context=(_sentence(item, target),), prompt=prompt, answer_format=answer_format))
        else:
            keys = [k for k in item.options if item.contexts.get(k)]
            if shuffle_type2:
                stable_rng("type2", seed, item.key).shuffle(keys)
            out.append(Case(item=item, protocol="type2", seed=seed,
                            context=tuple(_sentence(item, k) for k in keys), prompt=prompt,
                            answer_format=answer_format))
    return out


def held_items(items: Sequence[Item], shard: Shard | None) -> Iterator[tuple[int, Item]]:
    """``(index, item)`` of the items ``shard`` holds (all of them without one): the one place
    a shard's items are chosen, for :func:`plan_cases` and :func:`build_cases` alike."""
    return ((i, item) for i, item in enumerate(items) if shard is None or shard.holds(item.key))


def plan_cases(
    items: Sequence[Item],
    protocols: Iterable[ProtocolName] = ("clean", "type1", "type2"),
    *,
    seed: int = 0,
    type1_targets: Type1Targets = "sampled",
    shard: Shard | None = None,
) -> list[tuple[int, ProtocolName, str | None]]:
    """``(item index, protocol, target)`` of every case of :func:`build_cases`, in its order.

    The same cases as ``build_cases`` with the same arguments, without building them: a
    run plans its keys with this and builds only the cases it still has to run. With a
    ``shard``, only the cases of the items it holds (item indexes stay those of ``items``).
    """
    if isinstance(protocols, str):
        raise ValueError(f"protocols must be a sequence of names, got the string {protocols!r}")
    wanted = tuple(protocols)  # a generator is read once, not once per item
    order = {"clean": 0, "type1": 1, "type2": 2}
    planned = [
        (i, protocol, target)
        for i, item in held_items(items, shard)
        for protocol, target in case_keys_for_item(item, wanted, seed=seed, type1_targets=type1_targets)
    ]
    return sorted(planned, key=lambda c: order[c[1]])  # stable: item order kept


def build_cases(
    items: Sequence[Item],
    protocols: Iterable[ProtocolName] = ("clean", "type1", "type2"),
    *,
    seed: int = 0,
    type1_targets: Type1Targets = "sampled",
    shuffle_type2: bool = False,
    prompt: str = DEFAULT_PROMPT,
    answer_format: AnswerFormat = "mcq",
    shard: Shard | None = None,
) -> list[Case]:
    """All cases for a dataset, ordered clean -> type1 -> type2 across items (with a
    ``shard``, of the items it holds only: :func:`held_items`)."""
    order = {"clean": 0, "type1": 1, "type2": 2}
    cases = [
        c
        for _, item in held_items(items, shard)
        for c in cases_for_item(
            item, protocols, seed=seed, type1_targets=type1_targets,
            shuffle_type2=shuffle_type2, prompt=prompt, answer_format=answer_format,
        )
    ]
    return sorted(cases, key=lambda c: order[c.protocol])  # stable: item order kept
