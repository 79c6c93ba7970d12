"""Model specs resolved to chat models, importing SDKs lazily.

Specs: ``google/<id>``, ``openai/<id>``, ``anthropic/<id>``, ``mock/<name>``, and
``langchain:<provider>:<model>`` for any chat model LangChain's ``init_chat_model`` knows.
"""

from __future__ import annotations

import importlib
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel
from pydantic import BaseModel, ConfigDict

# provider prefix -> "module:function"; the module is imported only when the provider is used
PROVIDERS: dict[str, str] = {
    "google": "medmis.agents._google:build",
    "openai": "medmis.agents._openai:build",
    "anthropic": "medmis.agents._anthropic:build",
    "langchain": "medmis.agents._langchain:build",
    "mock": "medmis.agents._examinee:build",
}


ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]
REASONING_EFFORTS: tuple[str, ...] = ("none", "minimal", "low", "medium", "high", "xhigh", "max")


class ModelOptions(BaseModel):
    """Generation options shared by all providers (each ignores what it cannot honour)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    temperature: float | None = 0.0
    max_output_tokens: int | None = None
    base_url: str | None = None
    thinking_level: Literal["minimal", "low", "medium", "high"] | None = None
    """Gemini thinking level."""
    reasoning_effort: ReasoningEffort | None = None
    """OpenAI ``reasoning_effort`` (``none`` … ``xhigh``) or Claude ``output_config.effort``
    (``low`` … ``max``); a provider refuses a level it does not have."""
    thinking_budget: int | Literal["adaptive"] | None = None
    """Claude extended thinking: a token budget (at least 1024; ``0`` turns thinking off) or
    ``"adaptive"`` (Claude decides how much to think; Sonnet/Opus 4.6 and later)."""
    timeout_s: float = 120.0
    seed: int | None = None
    extra: dict[str, Any] = {}


# httpx keeps only 20 idle connections by default; with more concurrent cases than that, every
# extra request would open a fresh connection. Keep as many as the pool may hold.
HTTP_LIMITS = {"max_connections": 256, "max_keepalive_connections": 256}


def parse_spec(spec: str) -> tuple[str, str]:
    """Split a spec into (provider, model id); ``langchain:p:m`` gives ``("langchain", "p:m")``.

    Raises:
        ValueError: For a malformed spec or an unknown provider.
    """
    if spec.startswith("langchain:"):
        rest = spec.removeprefix("langchain:")
        lc_provider, sep, lc_model = rest.partition(":")
        if not sep or not lc_provider or not lc_model:
            raise ValueError(f"a LangChain spec must look like langchain:<provider>:<model>, got {spec!r}")
        return "langchain", rest
    provider, sep, model_id = spec.partition("/")
    if not sep or not model_id:
        raise ValueError(f"model spec must look like provider/model-id, got {spec!r}")
    if provider not in PROVIDERS or provider == "langchain":
        raise ValueError(f"unknown model provider {provider!r} (known: {', '.join(sorted(PROVIDERS))})")
    return provider, model_id


def load_model(spec: str, options: ModelOptions | None = None, **kwargs: Any) -> BaseChatModel:
    """Build the chat model for ``spec`` (``google/<id>``, ``openai/<id>``,
    ``anthropic/<id>``, ``langchain:<provider>:<model>``, ``mock/<name>``)."""
    provider, model_id = parse_spec(spec)
    opts = options or ModelOptions(**kwargs)
    module_name, func = PROVIDERS[provider].split(":")
    build = getattr(importlib.import_module(module_name), func)
    return build(model_id, opts)
