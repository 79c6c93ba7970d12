"""One chat-model call without LangChain's per-call machinery, when nothing would observe it.

``BaseChatModel.ainvoke`` wraps every call in work a plain run does not use: it merges run
configs, computes invocation and LangSmith parameters for tracing, opens a callback run,
copies the input for tracers and starts a task per prompt. Measured on the throughput bench
(one chat completion per case against a local server) that was about a fifth of the
harness's CPU per call.

:func:`ainvoke_chat` makes the same call as ``runnable.ainvoke(messages)`` and returns the
same message, but goes straight to the model's ``_agenerate`` when nothing could tell the
difference: no callback handler would be configured (none passed, none on the model, none
inherited from an enclosing runnable or LangGraph node, no tracing or callback hook switched
on by the environment), no LangChain cache (the record/replay store is one), no LangChain
rate limiter, no streaming, no ``output_version="v1"`` rewriting, and a model class that
does not override the invoke chain. Otherwise, and whenever LangChain's internals are not
the ones this was written against, the call goes through ``ainvoke`` unchanged.

The result is post-processed as ``_agenerate_with_cache`` does (response metadata from the
generation info and the LLM output); the only difference is the message ``id``, which
LangChain derives from the callback run it would have opened.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage

from medmis.tools import switched_on

ENV_VARIABLE = "MEDMIS_DIRECT_CALLS"

try:  # LangChain's own helpers for the steps kept; any change there disables the direct path
    from langchain_core.callbacks.manager import AsyncCallbackManager
    from langchain_core.globals import get_llm_cache
    from langchain_core.language_models._utils import _normalize_messages
    from langchain_core.language_models.chat_models import _gen_info_and_msg_metadata
    from langchain_core.runnables import RunnableBinding
    from langchain_core.runnables.config import ensure_config

    _AVAILABLE = True
except ImportError:  # pragma: no cover - another langchain-core layout
    _AVAILABLE = False

# The invoke chain a model class must inherit unchanged for its ``_agenerate`` to be the call.
_CHAIN = ("ainvoke", "agenerate_prompt", "agenerate", "_agenerate_with_cache")
# Keyword arguments ``agenerate`` consumes itself (set by ``with_structured_output``).
_TRACING_KWARGS = ("ls_structured_output_format", "structured_output_format")


def enabled() -> bool:
    """Whether direct calls are allowed (``MEDMIS_DIRECT_CALLS`` is not ``0``)."""
    return _AVAILABLE and switched_on(ENV_VARIABLE)


def _plain_chain(cls: type) -> bool:
    return all(getattr(cls, name, None) is getattr(BaseChatModel, name) for name in _CHAIN)


def direct_target(runnable: Any) -> tuple[BaseChatModel, dict[str, Any]] | None:
    """The model and call arguments to call directly, or None when ``ainvoke`` must run.

    Only the model's own state and the calling context are consulted; the messages are not.
    """
    if not enabled():
        return None
    kwargs: dict[str, Any] = {}
    chat = runnable
    if isinstance(chat, RunnableBinding):
        if chat.config or chat.config_factories:
            return None
        kwargs = dict(chat.kwargs)
        chat = chat.bound
    if not isinstance(chat, BaseChatModel) or not _plain_chain(type(chat)):
        return None
    try:
        cache = chat.cache
        if cache is not False and (cache is not None or get_llm_cache() is not None):
            return None
        if chat.rate_limiter is not None or getattr(chat, "output_version", None) == "v1":
            return None
        if chat._should_stream(async_api=True, **kwargs):
            return None
        config = ensure_config()
        manager = AsyncCallbackManager.configure(
            config.get("callbacks"), chat.callbacks, chat.verbose,
            config.get("tags"), chat.tags, config.get("metadata"), chat.metadata,
        )
    except (AttributeError, TypeError):  # pragma: no cover - LangChain changed shape
        return None
    if manager.handlers or manager.inheritable_handlers:
        return None
    return chat, kwargs


async def ainvoke_chat(runnable: Any, messages: Sequence[BaseMessage]) -> Any:
    """``await runnable.ainvoke(list(messages))``, directly through ``_agenerate`` when unobserved."""
    target = direct_target(runnable)
    if target is None:
        return await runnable.ainvoke(list(messages))
    chat, kwargs = target
    for name in _TRACING_KWARGS:
        kwargs.pop(name, None)
    result = await chat._agenerate(_normalize_messages(list(messages)), **kwargs)
    for generation in result.generations:
        generation.message.response_metadata = _gen_info_and_msg_metadata(generation)
    if len(result.generations) == 1 and result.llm_output is not None:
        message = result.generations[0].message
        message.response_metadata = {**result.llm_output, **message.response_metadata}
    return result.generations[0].message
