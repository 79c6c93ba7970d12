"""A model spec's parts and options: what the registry, the decoding presets and the providers
share (no SDK, no LangChain)."""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict, Field, model_validator

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
    """The server's base URL; with replicas, the first of ``base_urls``."""
    base_urls: tuple[str, ...] = ()
    """Replicas of one model (vLLM/SGLang servers): calls are spread over them (see
    :mod:`medmis.agents._replicas`). ``base_url`` may also be given as a list, which sets both."""
    thinking_level: Literal["minimal", "low", "medium", "high"] | None = None
    """Gemini thinking level."""
    reasoning_effort: ReasoningEffort | None = None
    """OpenAI ``reasoning_effort`` (``none`` … ``xhigh``) or Claude ``output_config.effort``
    (``low`` … ``max``); a provider refuses a level it does not have."""
    thinking_budget: int | Literal["adaptive"] | None = None
    """Claude extended thinking: a token budget (at least 1024; ``0`` turns thinking off) or
    ``"adaptive"`` (Claude decides how much to think; Sonnet/Opus 4.6 and later)."""
    timeout_s: float = 120.0
    """Seconds for one request, from sending it to the last byte of the reply (and per read)."""
    max_response_bytes: int | None = Field(default=8 * 1024 * 1024, gt=0)
    """Largest reply body accepted (bytes as sent; ``None``: no cap). A larger reply fails the
    call with ``ResponseTooLargeError``, which is not retried."""
    seed: int | None = None
    """Seed sent to the provider (``--model-seed``); none unless set (the reference sends none)."""
    run_seed: int | None = None
    """The run's ``--seed``: the simulated examinee (``mock/``) draws with it when ``seed`` is
    unset; never sent to a provider."""
    sample: int = Field(default=0, ge=0)
    """Which repeated sample of a case the model answers (the run's epoch, ``--epochs``; set by
    the harness per epoch, never by a user): never sent to a provider; the record/replay store
    keys a later sample's calls apart (``medmis.tools.attach_cache``) and the simulated examinee
    mixes it into its answering draws. Not part of a run's fingerprint (``epochs`` is)."""
    decoding: Literal["paper", "reference"] = "paper"
    """Decoding preset (:mod:`medmis.agents._decoding`): ``paper`` (temperature 0) or
    ``reference`` (the reference notebooks' per-provider settings). Fields set explicitly win."""
    extra: dict[str, Any] = {}

    @model_validator(mode="before")
    @classmethod
    def _replica_list(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        given = data.get("base_url")
        if isinstance(given, (list, tuple)):  # an ablation config's `base_url = [...]`
            if data.get("base_urls") and tuple(data["base_urls"]) != tuple(given):
                raise ValueError("base_url (a list) and base_urls disagree; give one of them")
            data["base_urls"] = tuple(given)
            data["base_url"] = given[0] if given else None
        urls = tuple(data.get("base_urls") or ())
        if not urls:
            return data
        if any(not isinstance(u, str) or not u.strip() for u in urls):
            raise ValueError(f"base_urls must be non-empty strings, got {list(urls)!r}")
        if len(set(urls)) != len(urls):
            raise ValueError(f"base_urls lists a server twice: {list(urls)!r}")
        if data.get("base_url") is None:
            data["base_url"] = urls[0]
        elif data["base_url"] != urls[0]:
            raise ValueError("base_url must be the first of base_urls when both are given")
        data["base_urls"] = urls if len(urls) > 1 else ()
        return data


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


# where the openai SDK reads its server from when no option gives one
OPENAI_BASE_URL_VARIABLE = "OPENAI_BASE_URL"


OPENAI_REASONING_PREFIXES = ("gpt-5", "o1", "o3", "o4", "o5")
"""Model ids of OpenAI's reasoning family (the reference notebook's ``call_openai`` branch:
``max_completion_tokens`` and ``reasoning_effort``, no temperature)."""


def is_openai_reasoning_model(model_id: str) -> bool:
    """Whether ``model_id`` names an OpenAI reasoning model (``gpt-5*``, ``o1``/``o3``/``o4``/
    ``o5``), wherever it is served: the last path segment decides, so a gateway's
    ``openai/gpt-5.4`` (OpenRouter) is one too."""
    return model_id.rsplit("/", 1)[-1].lower().startswith(OPENAI_REASONING_PREFIXES)


def is_openai_host(base_url: str | None) -> bool:
    """Whether ``base_url`` points at OpenAI's own API (the default when unset)."""
    if not base_url:
        return True
    host = (urlparse(base_url).hostname or "").lower()
    return host == "api.openai.com" or host.endswith(".openai.com")
