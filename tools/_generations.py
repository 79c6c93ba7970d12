"""A stored model value (``{"generations": [...]}``) loaded back into LangChain generations; the
chat-model cache (:mod:`._llm_cache`) replays them, the store's shape check (:mod:`._shapes`)
tries them."""

from __future__ import annotations

import warnings
from typing import Any

from langchain_core.load import Serializable, load
from langchain_core.messages import AIMessage, AIMessageChunk
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, Generation, GenerationChunk

_GENERATION_CLASSES: list[type[Serializable]] = [
    Generation,
    GenerationChunk,
    ChatGeneration,
    ChatGenerationChunk,
    AIMessage,
    AIMessageChunk,
]


def load_generations(value: dict[str, Any]) -> list[Any]:
    """The LangChain generations of a stored model value (``{"generations": [...]}``)."""
    with warnings.catch_warnings():
        # ``load`` is marked beta (a DeprecationWarning subclass); matched by its message,
        # since the warning's class lives in a private LangChain module
        warnings.filterwarnings("ignore", message="The function `load` is in beta", category=DeprecationWarning)
        return [load(g, allowed_objects=_GENERATION_CLASSES) for g in value["generations"]]
