"""Base-model adapters behind one interface (LangChain ``BaseChatModel``, async, tool binding).

Providers: ``google/<id>`` (Gemini via google-genai), ``openai/<id>`` (OpenAI and compatible
servers), ``anthropic/<id>`` (Claude via langchain-anthropic), ``langchain:<provider>:<model>``
(any LangChain chat model, through ``init_chat_model``), ``mock/<name>`` (scripted models and
the simulated examinee). SDKs are imported only when their provider is used.
"""

# The folder is the package ``medmis.agents``; imported as ``agents`` from the clone's root it
# would be a second copy of every class (isinstance checks and registries silently split).
if __name__ != "medmis.agents":
    raise ImportError(f"import medmis.agents, not {__name__}: the folder agents/ is installed as medmis.agents (pip install -e .)")

from typing import TYPE_CHECKING

from medmis.tools import lazy_exports

if TYPE_CHECKING:
    from ._capabilities import (
        CALL_SETTINGS_KWARG,
        GOOGLE_FAMILIES,
        LOGPROBS_KWARG,
        STRUCTURED_OUTPUT_KWARG,
        CallSettings,
        StructuredOutput,
        accepts_call_settings,
        accepts_logprobs,
        accepts_structured_output,
        provider_family,
        reply_logprobs,
    )
    from ._decoding import decoding_fingerprint, decoding_record, decoding_table
    from ._errors import (
        BlockedResponseError,
        MalformedResponseError,
        MissingKeyError,
        ModelConfigError,
        ModelError,
        TransientModelError,
    )
    from ._http import aclose_transports
    from ._limiter import AdaptiveLimiter, LimiterState, RateBudget
    from ._mock import ScriptedChatModel, cycle, estimate_tokens, message_text
    from ._registry import (
        PROVIDERS,
        REASONING_EFFORTS,
        ModelOptions,
        effective_base_url,
        load_model,
        parse_spec,
    )
    from ._retry import RetryPolicy, classify, retry_async
    from ._text import content_text
    from ._usage import Usage

# Exports load on first use: a module that needs one adapter piece (the report's prompt
# tables need ``_capabilities``) does not import LangChain's model stack through this package.
_HOME = {
    **dict.fromkeys(("BlockedResponseError", "MalformedResponseError", "MissingKeyError", "ModelConfigError",
                     "ModelError", "TransientModelError"), "_errors"),
    **dict.fromkeys(("ScriptedChatModel", "cycle", "estimate_tokens", "message_text"), "_mock"),
    **dict.fromkeys(
        (
            "PROVIDERS", "REASONING_EFFORTS", "ModelOptions", "load_model", "parse_spec"
        ),
        "_registry",
    ),
    **dict.fromkeys(("RetryPolicy", "classify", "retry_async"), "_retry"),
    "aclose_transports": "_http",
    **dict.fromkeys(
        (
            "CALL_SETTINGS_KWARG", "CallSettings", "GOOGLE_FAMILIES", "LOGPROBS_KWARG",
            "STRUCTURED_OUTPUT_KWARG", "StructuredOutput", "accepts_call_settings", "accepts_logprobs",
            "accepts_structured_output", "provider_family", "reply_logprobs"
        ),
        "_capabilities",
    ),
    **dict.fromkeys(("decoding_fingerprint", "decoding_record", "decoding_table"), "_decoding"),
    **dict.fromkeys(("AdaptiveLimiter", "LimiterState", "RateBudget"), "_limiter"),
    **dict.fromkeys(("effective_base_url",), "_registry"),
    **dict.fromkeys(("content_text",), "_text"),
    "Usage": "_usage",
}
__getattr__ = lazy_exports(__name__, _HOME, globals())

__all__ = [
    "CALL_SETTINGS_KWARG",
    "GOOGLE_FAMILIES",
    "LOGPROBS_KWARG",
    "PROVIDERS",
    "REASONING_EFFORTS",
    "STRUCTURED_OUTPUT_KWARG",
    "AdaptiveLimiter",
    "BlockedResponseError",
    "CallSettings",
    "LimiterState",
    "MalformedResponseError",
    "MissingKeyError",
    "ModelConfigError",
    "ModelError",
    "ModelOptions",
    "RateBudget",
    "RetryPolicy",
    "ScriptedChatModel",
    "StructuredOutput",
    "TransientModelError",
    "Usage",
    "accepts_call_settings",
    "accepts_logprobs",
    "accepts_structured_output",
    "aclose_transports",
    "classify",
    "content_text",
    "cycle",
    "decoding_fingerprint",
    "decoding_record",
    "decoding_table",
    "effective_base_url",
    "estimate_tokens",
    "load_model",
    "message_text",
    "parse_spec",
    "provider_family",
    "reply_logprobs",
    "retry_async",
]
