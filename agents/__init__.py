"""Base-model adapters behind one interface (LangChain ``BaseChatModel``, async, tool binding).

Providers: ``google/<id>`` (Gemini via google-genai), ``openai/<id>`` (OpenAI and compatible
servers), ``anthropic/<id>`` (Claude via langchain-anthropic), ``langchain:<provider>:<model>``
(any LangChain chat model, through ``init_chat_model``), ``mock/<name>`` (scripted models and
the simulated examinee). SDKs are imported only when their provider is used.
"""

from typing import TYPE_CHECKING

from medmis.tools._lazy import lazy_exports

if TYPE_CHECKING:
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

# Exports load on first use: a module that needs one adapter piece (the report's prompt
# tables need ``_capabilities``) does not import LangChain's model stack through this package.
_HOME = {
    **dict.fromkeys(("BlockedResponseError", "MalformedResponseError", "MissingKeyError", "ModelConfigError",
                     "ModelError", "TransientModelError"), "_errors"),
    **dict.fromkeys(("ScriptedChatModel", "cycle", "estimate_tokens", "message_text"), "_mock"),
    **dict.fromkeys(("PROVIDERS", "REASONING_EFFORTS", "ModelOptions", "load_model", "parse_spec"), "_registry"),
    **dict.fromkeys(("RetryPolicy", "classify", "retry_async"), "_retry"),
    "aclose_transports": "_transport",
}
__getattr__ = lazy_exports(__name__, _HOME, globals())

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
