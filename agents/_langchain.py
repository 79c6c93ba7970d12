"""Any LangChain chat model: ``langchain:<provider>:<model>`` through ``init_chat_model``.

``langchain:anthropic:claude-sonnet-4-6``, ``langchain:mistralai:mistral-large-latest``,
``langchain:ollama:llama3.1`` … build the integration's own chat model with LangChain's
``init_chat_model(model, model_provider=provider, ...)``, so any installed integration plugs
in without an adapter here. The toolkit's shared options are passed under LangChain's common
argument names, and only when set: ``temperature``, ``max_tokens``, ``timeout``,
``base_url``, ``reasoning_effort``; ``max_retries=0`` so that the run's retry policy is the
only one; ``extra`` (``--model-option``) goes through verbatim as constructor arguments.
Thinking budgets and Gemini thinking levels are provider-specific: pass them in ``extra``
under the integration's own name (e.g. ``thinking={"type": "adaptive"}`` for Anthropic).

An integration whose model takes ``http_client`` and ``http_async_client`` (ChatOpenAI and
the integrations built on it) is handed the toolkit's bounded clients (:mod:`._http`:
the request deadline and the decoded reply cap), unless ``extra`` names its own. Any other
keeps the integration's own transport (often ``httpx2``), which the toolkit cannot bound
through a public API (use the toolkit's own ``anthropic/``, ``google/`` or ``openai/`` spec
for a bounded client). Such a model retries nothing
itself, and declares no structured-output support, so the ``paper`` preset asks it for JSON
through the prompt only. Its provider family — where the preset puts the answer instruction —
is the integration's ``ls_provider`` (see :func:`medmis.agents._capabilities.provider_family`).
"""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import BaseChatModel

from ._errors import ModelConfigError
from ._http import async_client, sync_client
from ._registry import ModelOptions

# The constructor arguments LangChain's OpenAI-family models make their SDK clients from.
_HTTP_CLIENT_FIELDS = ("http_client", "http_async_client")


def _init_chat_model() -> Any:
    try:
        from langchain.chat_models import init_chat_model
    except ImportError as exc:
        raise ModelConfigError(
            "langchain: langchain:<provider>:<model> specs need the langchain package "
            "(pip install langchain)"
        ) from exc
    return init_chat_model


def build(model_id: str, opts: ModelOptions) -> BaseChatModel:
    """Build the chat model for ``langchain:<provider>:<model>``.

    Args:
        model_id: ``<provider>:<model>`` (the part of the spec after ``langchain:``).
        opts: Shared generation options (see the module docstring for what is passed).

    Returns:
        The integration's chat model.

    Raises:
        ModelConfigError: When the provider is unknown to LangChain or its integration
            package is not installed (one line naming the package to install).
    """
    provider, _, model = model_id.partition(":")
    kwargs: dict[str, Any] = {"max_retries": 0, "timeout": opts.timeout_s}
    if opts.temperature is not None:
        kwargs["temperature"] = opts.temperature
    if opts.max_output_tokens is not None:
        kwargs["max_tokens"] = opts.max_output_tokens
    if opts.base_url:
        kwargs["base_url"] = opts.base_url
    if opts.reasoning_effort is not None:
        kwargs["reasoning_effort"] = opts.reasoning_effort
    kwargs.update(opts.extra)
    init_chat_model = _init_chat_model()
    try:
        chat = init_chat_model(model, model_provider=provider, **kwargs)
        fields = getattr(type(chat), "model_fields", {})
        if all(name in fields and name not in opts.extra for name in _HTTP_CLIENT_FIELDS):
            # the integration makes its SDK client from these when it is built: build it again
            # with the bounded ones (its class is known only once it exists)
            chat = init_chat_model(
                model, model_provider=provider, **kwargs,
                http_client=sync_client(opts.timeout_s, max_response_bytes=opts.max_response_bytes),
                http_async_client=async_client(opts.timeout_s, max_response_bytes=opts.max_response_bytes),
            )
        return chat  # type: ignore[no-any-return]
    except ImportError as exc:
        # LangChain's message names the package: "... requires the langchain-x package ..."
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelConfigError(f"langchain:{provider}: {first}") from exc
    except ValueError as exc:
        if "Unsupported" in str(exc) and "provider" in str(exc):
            raise ModelConfigError(
                f"langchain: unknown provider {provider!r} for init_chat_model"
            ) from exc
        raise
