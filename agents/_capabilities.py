"""What a chat model can be asked for beyond plain messages, read without importing any SDK.

Two things vary by provider and matter to the evaluation protocol:

* **The provider family** (``"google"``, ``"openai"``, ``"anthropic"``, ``"mock"``...). A prompt
  preset may place its answer instruction differently per family: the reference evaluation
  appends it to the user text for Gemini and sends it as the system message elsewhere. An
  adapter declares its family as a class attribute ``provider_family``; a LangChain
  integration (``langchain:<provider>:<model>``) is known by the ``ls_provider`` it reports
  for tracing (``"anthropic"``, ``"openai"``, ``"google_genai"``...); anything else counts
  as ``"other"``.
* **Structured output.** A request for a JSON reply of a given schema travels as the call
  argument ``structured_output={"name": ..., "schema": <JSON schema>}`` (bound with
  ``model.bind(structured_output=...)``). Each adapter that sets the class attribute
  ``accepts_structured_output = True`` maps it onto its API (Gemini ``response_schema``,
  OpenAI ``response_format``) or deliberately ignores it; it is never sent to a model that
  does not declare it, so a LangChain model from elsewhere never receives an argument it
  does not know.
* **Per-call settings.** A graph that fixes one call's sampling (the paper's search agent:
  temperature 0.1 and 4096 tokens for its planner and loop, 0.0 and 2048 for its finaliser,
  a JSON-mode planner) binds ``call_settings={"temperature", "max_output_tokens",
  "json_mode"}`` (any subset). Adapters that set ``accepts_call_settings = True`` map it onto
  their API (see :func:`apply_openai_settings` and the adapters); others never receive it
  (the simulated examinee ignores decoding).
* **Token log-probabilities.** A defender that weighs the model's confidence (``calibrate``,
  after ClashEval) binds ``logprobs=True`` (:data:`LOGPROBS_KWARG`), the name LangChain's
  ``ChatOpenAI`` already takes, so OpenAI and OpenAI-compatible servers (vLLM, SGLang) get
  ``"logprobs": true`` in the request body. Other adapters that set ``accepts_logprobs =
  True`` map it onto their API (Gemini ``response_logprobs``) or simulate it (the simulated
  examinee). Every one of them returns the sampled tokens' log-probabilities in
  ``response_metadata["logprobs"]["content"]`` as ``[{"token", "logprob"}, ...]`` (OpenAI's
  shape), read back by :func:`reply_logprobs`. A model that declares nothing (Anthropic
  returns no log-probabilities) is refused before a run that needs them.
"""

from __future__ import annotations

from typing import Any

STRUCTURED_OUTPUT_KWARG = "structured_output"
CALL_SETTINGS_KWARG = "call_settings"
LOGPROBS_KWARG = "logprobs"

CallSettings = dict[str, Any]
"""``{"temperature": float, "max_output_tokens": int, "json_mode": bool}`` (any subset)."""

StructuredOutput = dict[str, Any]
"""``{"name": <schema name>, "schema": <JSON schema of the reply object>}``."""

GOOGLE_FAMILIES = frozenset({"google", "google_genai", "google_vertexai"})
"""Families served by Gemini (this toolkit's adapter, or LangChain's Google integrations)."""


# A LangChain integration lives in its provider's package (langchain_openai, langchain_anthropic,
# langchain_google_genai, ...); the package name is the family. The core and community packages
# hold no one provider's models.
_NO_FAMILY_PACKAGES = frozenset({"langchain_core", "langchain_community", "langchain"})


def provider_family(model: Any) -> str:
    """The provider family a chat model declares (``"other"`` when it declares none): its
    ``provider_family`` attribute, else the provider package of a LangChain integration."""
    family = getattr(model, "provider_family", None)
    if isinstance(family, str) and family:
        return family
    package = type(model).__module__.partition(".")[0]
    if package.startswith("langchain_") and package not in _NO_FAMILY_PACKAGES:
        return package.removeprefix("langchain_")
    return "other"


def accepts_structured_output(model: Any) -> bool:
    """Whether ``model`` understands the ``structured_output`` call argument."""
    return getattr(model, "accepts_structured_output", False) is True


def check_structured_output(value: Any) -> StructuredOutput:
    """Validate a ``structured_output`` argument.

    Raises:
        ValueError: When it is not ``{"name": str, "schema": dict}``.
    """
    if (
        not isinstance(value, dict)
        or not isinstance(value.get("name"), str)
        or not isinstance(value.get("schema"), dict)
    ):
        raise ValueError(f"structured_output must be {{'name': str, 'schema': dict}}, got {value!r}")
    return value


def accepts_call_settings(model: Any) -> bool:
    """Whether ``model`` understands the ``call_settings`` call argument."""
    return getattr(model, "accepts_call_settings", False) is True


def check_call_settings(value: Any) -> CallSettings:
    """Validate a ``call_settings`` argument.

    Raises:
        ValueError: For unknown keys or values of the wrong type.
    """
    known = {"temperature", "max_output_tokens", "json_mode"}
    if not isinstance(value, dict) or set(value) - known:
        raise ValueError(f"call_settings must be a dict with keys from {sorted(known)}, got {value!r}")
    return value


def apply_openai_settings(payload: dict[str, Any], settings: CallSettings, *, openai_host: bool) -> dict[str, Any]:
    """A chat-completions payload with per-call settings, as the reference harness's
    ``_chat_openai_compat`` / ``_tools_openai_compat`` send them: the temperature only to a
    model that is sent one (a reasoning model built without a temperature gets none, as the
    reference sends none to ``gpt-5``/``o*`` models), the cap as ``max_completion_tokens`` on
    OpenAI's API (``max_tokens`` elsewhere), ``response_format {"type": "json_object"}`` for
    JSON mode unless a structured output is asked for."""
    check_call_settings(settings)
    if settings.get("temperature") is not None and "temperature" in payload:
        payload["temperature"] = settings["temperature"]
    if settings.get("max_output_tokens") is not None:
        payload.pop("max_tokens", None)
        payload.pop("max_completion_tokens", None)
        payload["max_completion_tokens" if openai_host else "max_tokens"] = settings["max_output_tokens"]
    if settings.get("json_mode") and "response_format" not in payload:
        payload["response_format"] = {"type": "json_object"}
    return payload


def accepts_logprobs(model: Any) -> bool:
    """Whether ``model`` returns token log-probabilities when bound ``logprobs=True``.

    True for adapters declaring ``accepts_logprobs = True`` and for LangChain's ``ChatOpenAI``
    (and its subclasses: this toolkit's ``openai/`` adapter, ``langchain:openai:<model>``),
    which sends ``logprobs`` in the request body and returns them in ``response_metadata``.
    """
    if getattr(model, "accepts_logprobs", False) is True:
        return True
    try:
        from langchain_openai import ChatOpenAI
    except ImportError:  # pragma: no cover - langchain-openai is a core dependency
        return False
    return isinstance(model, ChatOpenAI)


def reply_logprobs(reply: Any) -> list[dict[str, Any]] | None:
    """The sampled tokens' ``[{"token", "logprob"}, ...]`` of a reply, or None when it has none.

    Read from ``response_metadata["logprobs"]["content"]`` (module docstring); an entry whose
    ``logprob`` is not a number makes the whole list unusable (None), never a guessed value.
    """
    meta = getattr(reply, "response_metadata", None) or {}
    block = meta.get("logprobs") if isinstance(meta, dict) else None
    content = block.get("content") if isinstance(block, dict) else None
    if not isinstance(content, list) or not content:
        return None
    out: list[dict[str, Any]] = []
    for entry in content:
        if not isinstance(entry, dict) or isinstance(entry.get("logprob"), bool) \
                or not isinstance(entry.get("logprob"), (int, float)):
            return None
        out.append({"token": str(entry.get("token", "")), "logprob": float(entry["logprob"])})
    return out
