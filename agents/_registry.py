"""Model specs resolved to chat models, importing SDKs lazily.

Specs: ``google/<id>``, ``openai/<id>``, ``anthropic/<id>``, ``mock/<name>``, and
``langchain:<provider>:<model>`` for any chat model LangChain's ``init_chat_model`` knows.
"""

from __future__ import annotations

import importlib
from typing import Any

from langchain_core.language_models import BaseChatModel

from medmis.tools import remember_url

from ._decoding import resolve
from ._options import (
    HTTP_LIMITS,
    PROVIDERS,
    REASONING_EFFORTS,
    ModelOptions,
    ReasoningEffort,
    parse_spec,
)

# Re-exported: the provider modules and the harness import the option types from here too.
__all__ = ["HTTP_LIMITS", "PROVIDERS", "REASONING_EFFORTS", "ModelOptions", "ReasoningEffort",
           "effective_base_url", "load_model", "parse_spec"]



def load_model(spec: str, options: ModelOptions | None = None, **kwargs: Any) -> BaseChatModel:
    """Build the chat model for ``spec`` (``google/<id>``, ``openai/<id>``,
    ``anthropic/<id>``, ``langchain:<provider>:<model>``, ``mock/<name>``).

    With several ``options.base_urls`` it builds one model per replica and returns a
    :class:`~medmis.agents._replicas.ReplicaChatModel` over them."""
    provider, model_id = parse_spec(spec)
    opts = resolve(spec, options or ModelOptions(**kwargs))
    for url in (opts.base_url, *opts.base_urls):
        remember_url(url)  # a ``user:pass@`` URL's credentials are masked in everything written
    module_name, func = PROVIDERS[provider].split(":")
    build = getattr(importlib.import_module(module_name), func)
    if len(opts.base_urls) > 1:
        from ._replicas import ReplicaChatModel

        urls = list(opts.base_urls)
        members = [build(model_id, opts.model_copy(update={"base_url": u, "base_urls": ()})) for u in urls]
        return ReplicaChatModel(members=members, urls=urls)
    return build(model_id, opts)


# The environment variable each provider reads its server's address from when no option gives
# one; a LangChain integration by its provider name (its own SDK reads the variable).
BASE_URL_VARIABLES: dict[str, tuple[str, ...]] = {
    "openai": ("OPENAI_BASE_URL",),
    "google": ("GOOGLE_GEMINI_BASE_URL",),
    "anthropic": ("ANTHROPIC_BASE_URL",),
}
_LANGCHAIN_BASE_URL_VARIABLES: dict[str, tuple[str, ...]] = {
    "openai": ("OPENAI_BASE_URL", "OPENAI_API_BASE"),
    "anthropic": ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_URL"),
    "google_genai": ("GOOGLE_GEMINI_BASE_URL",),
    "ollama": ("OLLAMA_HOST",),
}


def effective_base_url(spec: str, opts: ModelOptions, model: BaseChatModel | None = None) -> str | None:
    """The server a spec's requests go to: the address the built ``model`` reports (the
    adapters here report ``base_url``, the option's or the environment's or the provider's
    default), else ``opts.base_url``, else the environment variable the provider reads.
    None when nothing names one (a LangChain integration's own default, a mock model)."""
    import os

    provider, model_id = parse_spec(spec)
    if model is not None and provider != "langchain":
        url = model.asdict().get("base_url")  # the identifying parameters, and the type
        if isinstance(url, str) and url:
            return url
    if opts.base_url:
        return opts.base_url
    if provider == "langchain":
        variables = _LANGCHAIN_BASE_URL_VARIABLES.get(model_id.partition(":")[0], ())
    else:
        variables = BASE_URL_VARIABLES.get(provider, ())
    return next((os.environ[v] for v in variables if os.environ.get(v)), None)
