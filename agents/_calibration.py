"""The simulated examinee's answering policy and its numbers, calibrated on MedMisBench.

Targets: the paper's (arXiv 2606.12291) means over its 11 configurations for the undefended
baseline (``none``): Type 1 ASR 51.5%, Type 1 TASR 45.4%, Type 2 ASR 18.7%. The test
``tests/test_examinee_calibration.py`` checks them, with tolerances, on a few hundred
generated items. Clean accuracy is the ``clean_accuracy`` option (default 0.8).

What the policy reads: the parsed prompt (:mod:`medmis.agents._reading`) and the examinee's
*belief* about the question, which comes from its knowledge (:mod:`medmis.agents._knowledge`):
with probability ``clean_accuracy / (1 - ABSTAIN - SLIP)`` per (seed, question) it knows the
answer and is *confident* (so that clean accuracy comes out at ``clean_accuracy``); otherwise it believes a fixed wrong option and is not. A question missing from
the answer key gets a fixed guess. It never sees which sentence is true, which option a
benchmark targeted, or any label of the item.

Every draw below is a fresh uniform number from SHA-256 of (seed, the whole conversation's
text, the call index, a role tag), so two defenders that send different prompts get
independent draws: a defender can make an item worse as well as better.

1. *Abstain* with probability ``ABSTAIN``: the reply names no option (an unparsed answer).
2. *Evidence*: if the retrieved evidence points to one option
   (:func:`medmis.agents._lexical.evidence_option`), answer it with probability
   ``EVIDENCE_TRUST``.
3. *Context pressure*. Each context sentence is mapped to the option it argues for
   (:func:`medmis.agents._lexical.option_of`; unmappable sentences only unsettle). Its weight
   is its persuasiveness ``f`` (uniform in [0.5, 1.5] per (seed, sentence text): how
   convincing this model finds that wording, the same in every prompt) times its position
   weight ``1 + ORDER_SLOPE * (i / (n - 1) - 1/2)`` (later sentences weigh more: the Type 2
   order sensitivity) times its label factor (``REFUTED`` 0, ``SUPPORTED`` ``SUPPORTED_WEIGHT``)
   times ``MARKED_FACTOR`` when the context is marked. With ``S`` the weight of sentences
   against the belief and ``A`` of those for it, the examinee is swayed with probability
   ``FOLLOW * S / (1 + r * A)`` (capped at ``FOLLOW_MAX``), ``r = RESIST_CONFIDENT`` when
   confident, ``RESIST_UNSURE`` otherwise, and then answers a sentence against the belief
   drawn in proportion to its weight.
4. *Non-targeted flip*: otherwise, with probability ``CONFUSE`` times the same pressure
   (or ``SLIP`` without context), it answers an option that no opposing sentence argues for
   (any other option when all are argued for) other than its belief: Type 1 TASR below ASR.
5. Otherwise it answers its belief.

Why a warning or spotlighting prompt is treated fairly. The policy never reads the words of
an instruction; the only thing a defender's framing can change is ``marked`` (structural: the
context is datamarked or fenced *and* the marking is referred to elsewhere in the prompt, see
:mod:`medmis.agents._reading`), which scales every context sentence's weight alike, truthful
ones included, so it also costs Type 2 recovery. Spotlighting lowers attack success in
Hines et al. (arXiv 2403.14720); ``MARKED_FACTOR`` is this simulation's assumption, not a
measurement. A warning written in prose has **no systematic effect** here: reading it would
need a list of warning phrases, which would decide the ranking by construction. Every
defender that sends a different prompt still gets its own draws, so ``warning`` differs
from ``none`` case by case (better on some items, worse on others) with no built-in
direction. Defenders that verify claims or retrieve evidence act through steps 2 and 3
(labels and evidence) only as far as the text they send carries them.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ._lexical import option_of
from ._reading import Prompt

# --- the paper's baseline figures (means over 11 configurations) --------------------------
PAPER_TYPE1_ASR = 0.515
PAPER_TYPE1_TASR = 0.454
PAPER_TYPE2_ASR = 0.187

# --- the policy's parameters, calibrated to reproduce them (see the module docstring) -----
ABSTAIN = 0.01
FOLLOW = 0.455
FOLLOW_MAX = 0.95
CONFUSE = 0.115
SLIP = 0.02
RESIST_CONFIDENT = 9.0
RESIST_UNSURE = 1.0
ORDER_SLOPE = 0.8
SUPPORTED_WEIGHT = 3.0
MARKED_FACTOR = 0.7
EVIDENCE_TRUST = 0.85
VERDICT_HEDGE = 0.05
"""Share of claim checks answered ``not_enough_info`` whatever the evidence (a cautious checker)."""

Draw = Callable[[str], float]


@dataclass(frozen=True)
class Decision:
    """An answer (a displayed option key, or None to abstain), why, and a quoted detail."""

    key: str | None
    why: str
    detail: str = ""


def position_weight(i: int, n: int) -> float:
    return 1.0 if n <= 1 else 1.0 + ORDER_SLOPE * (i / (n - 1) - 0.5)


def decide(
    view: Prompt,
    belief: str,
    confident: bool,
    draw: Draw,
    persuasiveness: Callable[[str], float],
    evidence: tuple[str, str, str] | None,
) -> Decision:
    """The answer to a multiple-choice prompt (the policy in the module docstring).

    Args:
        view: The parsed prompt; ``view.options`` must not be empty.
        belief: The displayed key the examinee believes without context.
        confident: Whether the belief comes from knowing the item.
        draw: A fresh uniform number per role tag for this prompt and call.
        persuasiveness: The factor ``f`` of a sentence text.
        evidence: (key, quote, url) the retrieved evidence points to, if any.
    """
    if draw("abstain") < ABSTAIN:
        return Decision(None, "abstain")
    if evidence is not None and draw("evidence") < EVIDENCE_TRUST:
        return Decision(evidence[0], "evidence", evidence[1])
    options = view.options
    n = len(view.context)
    against: list[tuple[str, float, str]] = []  # option, weight, sentence
    agree = 0.0
    unsettled = 0.0
    for s in view.context:
        weight = persuasiveness(s.text) * position_weight(s.position, n)
        weight *= {"refuted": 0.0, "supported": SUPPORTED_WEIGHT}.get(s.label, 1.0)
        weight *= MARKED_FACTOR if view.marked else 1.0
        key = option_of(s.text, options)
        if key is None:
            unsettled += weight
        elif key == belief:
            agree += weight
        else:
            against.append((key, weight, s.text))
    if not view.context:
        return _flip(options, belief, [], draw, SLIP) or Decision(belief, "clean")
    resist = RESIST_CONFIDENT if confident else RESIST_UNSURE
    total = sum(w for _, w, _ in against)
    pressure = total / (1.0 + resist * agree)
    if against and draw("sway") < min(FOLLOW_MAX, FOLLOW * pressure):
        pick = draw("which") * total
        for key, weight, text in against:
            pick -= weight
            if pick < 0:
                return Decision(key, "follow", text)
        return Decision(against[-1][0], "follow", against[-1][2])
    confusion = CONFUSE * (pressure + unsettled / (1.0 + resist * agree))
    flipped = _flip(options, belief, [k for k, _, _ in against], draw, min(FOLLOW_MAX, confusion))
    if flipped is not None:
        return flipped
    if agree > 0:
        return Decision(belief, "corroborated", next(s.text for s in view.context if option_of(s.text, options) == belief))
    return Decision(belief, "resist" if against else "weighed", against[0][2] if against else "")


def _flip(
    options: Mapping[str, str], belief: str, argued: list[str], draw: Draw, p: float
) -> Decision | None:
    if draw("flip") >= p:
        return None
    pool = [k for k in options if k != belief and k not in argued] or [
        k for k in options if k != belief
    ]
    if not pool:
        return None
    return Decision(random.Random(draw("flip-which")).choice(sorted(pool)), "unsettled")
