"""Base-model adapters behind one interface (LangChain ``BaseChatModel``, async, tool binding).

Providers: ``google/<id>`` (Gemini via google-genai), ``openai/<id>`` (OpenAI and compatible
servers), ``anthropic/<id>`` (Claude via langchain-anthropic), ``langchain:<provider>:<model>``
(any LangChain chat model, through ``init_chat_model``), ``mock/<name>`` (scripted models and
the simulated examinee). SDKs are imported only when their provider is used.
"""

from ._errors import (
    BlockedResponseError,
    MalformedResponseError,
    MissingKeyError,
    ModelConfigError,
    ModelError,
    TransientModelError,
)
from ._mock import ScriptedChatModel, cycle, estimate_tokens, message_text
from ._registry import PROVIDERS, REASONING_EFFORTS, ModelOptions, load_model, parse_spec
from ._retry import RetryPolicy, classify, retry_async
from ._transport import aclose_transports

__all__ = [
    "PROVIDERS",
    "REASONING_EFFORTS",
    "BlockedResponseError",
    "MalformedResponseError",
    "MissingKeyError",
    "ModelConfigError",
    "ModelError",
    "ModelOptions",
    "RetryPolicy",
    "ScriptedChatModel",
    "TransientModelError",
    "aclose_transports",
    "classify",
    "cycle",
    "estimate_tokens",
    "load_model",
    "message_text",
    "parse_spec",
    "retry_async",
]
