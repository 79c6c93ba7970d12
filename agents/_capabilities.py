"""What a chat model can be asked for beyond plain messages, read without importing any SDK.

Two things vary by provider and matter to the evaluation protocol:

* **The provider family** (``"google"``, ``"openai"``, ``"anthropic"``, ``"mock"``...). A prompt
  preset may place its answer instruction differently per family: the reference evaluation
  appends it to the user text for Gemini and sends it as the system message elsewhere. An
  adapter declares its family as a class attribute ``provider_family``; models that declare
  none (plain LangChain models) count as ``"other"``.
* **Structured output.** A request for a JSON reply of a given schema travels as the call
  argument ``structured_output={"name": ..., "schema": <JSON schema>}`` (bound with
  ``model.bind(structured_output=...)``). Each adapter that sets the class attribute
  ``accepts_structured_output = True`` maps it onto its API (Gemini ``response_schema``,
  OpenAI ``response_format``) or deliberately ignores it; it is never sent to a model that
  does not declare it, so a LangChain model from elsewhere never receives an argument it
  does not know.
"""

from __future__ import annotations

from typing import Any

STRUCTURED_OUTPUT_KWARG = "structured_output"

StructuredOutput = dict[str, Any]
"""``{"name": <schema name>, "schema": <JSON schema of the reply object>}``."""

GOOGLE_FAMILIES = frozenset({"google", "google_genai", "google_vertexai"})
"""Families served by Gemini (this toolkit's adapter, or LangChain's Google integrations)."""


def provider_family(model: Any) -> str:
    """The provider family a chat model declares (``"other"`` when it declares none)."""
    family = getattr(model, "provider_family", None)
    return family if isinstance(family, str) and family else "other"


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
