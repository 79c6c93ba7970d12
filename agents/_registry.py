"""Model specs (``provider/model-id``) resolved to chat models, importing SDKs lazily."""

from __future__ import annotations

import importlib
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel
from pydantic import BaseModel, ConfigDict

# provider prefix -> "module:function"; the module is imported only when the provider is used
PROVIDERS: dict[str, str] = {
    "google": "medmis.agents._google:build",
    "openai": "medmis.agents._openai:build",
    "mock": "medmis.agents._examinee:build",
}


class ModelOptions(BaseModel):
    """Generation options shared by all providers (each ignores what it cannot honour)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    temperature: float | None = 0.0
    max_output_tokens: int | None = None
    base_url: str | None = None
    thinking_level: Literal["minimal", "low", "medium", "high"] | None = None
    reasoning_effort: Literal["minimal", "low", "medium", "high"] | None = None
    timeout_s: float = 120.0
    seed: int | None = None
    extra: dict[str, Any] = {}


# httpx keeps only 20 idle connections by default; with more concurrent cases than that, every
# extra request would open a fresh connection. Keep as many as the pool may hold.
HTTP_LIMITS = {"max_connections": 256, "max_keepalive_connections": 256}


def parse_spec(spec: str) -> tuple[str, str]:
    provider, sep, model_id = spec.partition("/")
    if not sep or not model_id:
        raise ValueError(f"model spec must look like provider/model-id, got {spec!r}")
    if provider not in PROVIDERS:
        raise ValueError(f"unknown model provider {provider!r} (known: {', '.join(sorted(PROVIDERS))})")
    return provider, model_id


def load_model(spec: str, options: ModelOptions | None = None, **kwargs: Any) -> BaseChatModel:
    """Build the chat model for ``spec`` (``google/<id>``, ``openai/<id>``, ``mock/<name>``)."""
    provider, model_id = parse_spec(spec)
    opts = options or ModelOptions(**kwargs)
    module_name, func = PROVIDERS[provider].split(":")
    build = getattr(importlib.import_module(module_name), func)
    return build(model_id, opts)
