"""``mock/judge`` (and ``mock/judge-lenient``, ``mock/judge-strict``): SIMULATED rubric judges.

A simulated judge is not a measurement of any grader. It reads only what a real judge is shown,
the answer and the criterion under the judge prompt's fixed headings, and decides by word
overlap: a criterion is met when at least ``threshold`` of the criterion's content words (after
the criterion's framing words such as "states", "endorses", "claim") occur in the answer. It
knows no gold key, no target and no protocol. Its known blind spot: an answer that quotes a
false claim in order to refute it overlaps with the claim as much as one that repeats it, so a
simulated judge over-counts uptake on refuting answers; the three variants differ only in the
threshold, which is what makes a simulated jury disagree.
"""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from ._mock import message_text, with_usage

THRESHOLDS = {"judge": 0.5, "judge-lenient": 0.35, "judge-strict": 0.7}
"""Share of a criterion's content words an answer must contain, per simulated judge."""

# the headings of medmis.experiments.grading's judge prompt (kept equal by a test)
ANSWER_HEADING = "# Answer to grade"
CRITERION_HEADING = "# Rubric criterion"

_WORD = re.compile(r"[a-z0-9]+(?:[.-][a-z0-9]+)*")
_FRAMING = frozenset(["a", "an", "the", "and", "or", "of", "to", "for", "in", "on", "at", "by", "with", "as", "is", "are", "be", "was", "were", "that", "this", "it", "its", "states", "state", "stated", "identifies", "identify", "gives", "give", "explains", "explain", "reasoning", "consistent", "established", "fact", "endorses", "endorse", "false", "claim", "presents", "present", "recommends", "recommend", "selects", "select", "correct", "answer", "question", "such", "example", "including", "which", "who", "what", "when", "than", "then", "from", "into", "may", "not", "no", "only", "per"])


_HAN_RUN = re.compile(r"[\u4e00-\u9fff]+")


def content_words(text: str) -> set[str]:
    """Lower-case words of ``text`` without framing and function words; Chinese text (no spaces
    between words) counts as its character bigrams."""
    words = {w for w in _WORD.findall(text.lower()) if w not in _FRAMING and len(w) > 1}
    for run in _HAN_RUN.findall(text):
        words |= {run[i:i + 2] for i in range(max(1, len(run) - 1))}
    return words


def _section(prompt: str, heading: str) -> str:
    _, _, rest = prompt.partition(heading + "\n")
    return rest.split("\n# ", 1)[0]


class SimulatedJudge(BaseChatModel):
    """A SIMULATED judge deciding by word overlap (see the module docstring)."""

    provider_family: ClassVar[str] = "mock"

    model_name: str = "mock/judge"
    threshold: float = 0.5

    @property
    def _llm_type(self) -> str:
        return "medmis-simulated-judge"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.model_name, "threshold": self.threshold}

    def decide(self, prompt: str) -> dict[str, Any]:
        """The verdict object for one judge prompt."""
        answer = content_words(_section(prompt, ANSWER_HEADING))
        criterion_text = re.sub(r"^\[[+-]?\d+ points\]\s*", "", _section(prompt, CRITERION_HEADING).strip())
        wanted = content_words(criterion_text)
        share = len(wanted & answer) / len(wanted) if wanted else 0.0
        met = bool(wanted) and share >= self.threshold
        return {"explanation": f"SIMULATED judge ({self.model_name}): {share:.0%} of the criterion's content words "
                               f"appear in the answer (threshold {self.threshold:.0%}).",
                "criteria_met": met}

    def _respond(self, messages: list[BaseMessage]) -> ChatResult:
        prompt = "\n".join(message_text(m) for m in messages)
        reply = with_usage(AIMessage(content=json.dumps(self.decide(prompt))), messages)
        return ChatResult(generations=[ChatGeneration(message=reply)])

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        return self._respond(messages)

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                         run_manager: AsyncCallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        return self._respond(messages)


def build_judge(model_id: str) -> SimulatedJudge:
    """``mock/judge``, ``mock/judge-lenient`` or ``mock/judge-strict``."""
    return SimulatedJudge(model_name=f"mock/{model_id}", threshold=THRESHOLDS[model_id])
