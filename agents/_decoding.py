"""Decoding presets: the generation settings a model is called with, per provider.

``ModelOptions.decoding`` names the preset; :func:`resolve` turns it into the options one
model is built with. A value the user set explicitly (a field given to ``ModelOptions``, such
as ``--temperature`` or ``model_options.temperature``, or a key of ``extra``) always wins.

* ``paper`` (default): temperature 0, as the paper's App. C.1 states ("All main-evaluation
  configurations use temperature 0"); no token cap, thinking or reasoning setting beyond what
  the user asks for.
* ``reference``: what the reference evaluation (AI-in-Health/MedMisBench,
  ``medmisbench_no_harness_eval.ipynb``) sends with its default knobs - cell 4 sets
  ``TEMPERATURE = 1.0``, ``MAX_OUTPUT_TOKENS = 2048``, ``OPENAI_REASONING_EFFORT = "medium"``,
  ``GEMINI_REASONING_EFFORT = "high"``, ``CLAUDE_REASONING_EFFORT = "medium"``; cell 6 sends
  them per provider (``call_gemini``, ``call_openai``, ``call_anthropic``, ``call_sglang``,
  ``gemini_reasoning_to_thinking_config``, ``anthropic_uses_adaptive_thinking``,
  ``build_sglang_extra_body``, ``GEMINI_SAFETY_SETTINGS``):

  - ``google/``: temperature 1.0, safety ``BLOCK_NONE`` for hate speech, harassment,
    sexually explicit and dangerous content (in that order), and for Gemini 3 models
    ``thinking_config {thinking_level: HIGH, include_thoughts: false}`` (Gemini 2.5:
    ``thinking_budget 24576``); no output cap.
  - ``openai/`` ``gpt-5*`` and ``o1``/``o3``/``o4``/``o5`` models (call_openai's reasoning
    branch), wherever the request goes (OpenAI's API, or a gateway or compatible server:
    LiteLLM, Azure, OpenRouter's ``openai/gpt-5.4``; the model id decides, not the host):
    ``max_completion_tokens 2048`` and ``reasoning_effort medium``, no temperature.
  - other ``openai/`` models on OpenAI's API: temperature 1.0 and a 2048-token cap.
  - other ``openai/`` models on another server (the reference's SGLang path): temperature 1.0,
    ``max_tokens 2048``, and for ``Qwen/`` and ``zai-org/GLM`` models
    ``chat_template_kwargs {enable_thinking: false}``.
  - ``anthropic/``: temperature 1.0, ``max_tokens 2048``, ``output_config.effort medium``,
    and adaptive thinking for Sonnet 4.6, Opus 4.6 and Opus 4.7.
  - ``langchain:``: the notebook's global knobs (temperature 1.0, 2048 tokens).

No preset sends a ``seed``: the reference sends none. A seed reaches a provider only when the
user sets ``ModelOptions.seed`` (``--model-seed``). The simulated examinee (``mock/``) ignores
decoding settings (its draws use ``ModelOptions.seed``, else the run seed).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

from ._options import (
    OPENAI_BASE_URL_VARIABLE,
    OPENAI_REASONING_PREFIXES,  # noqa: F401  (kept importable here, where it was defined)
    ModelOptions,
    is_openai_host,
    is_openai_reasoning_model,
    parse_spec,
)

Decoding = Literal["paper", "reference"]

# fields a preset may set (a field the user set explicitly is left alone)
DECODING_FIELDS = ("temperature", "max_output_tokens", "thinking_level", "reasoning_effort", "thinking_budget")

# the notebook's global knobs (medmisbench_no_harness_eval.ipynb, cell 4)
REFERENCE_TEMPERATURE = 1.0
REFERENCE_MAX_OUTPUT_TOKENS = 2048
REFERENCE_OPENAI_EFFORT = "medium"
REFERENCE_GEMINI_EFFORT = "high"
REFERENCE_CLAUDE_EFFORT = "medium"
# GEMINI_SAFETY_SETTINGS (cell 6): these categories, in this order, at BLOCK_NONE
REFERENCE_SAFETY = [
    {"category": c, "threshold": "BLOCK_NONE"}
    for c in ("HARM_CATEGORY_HATE_SPEECH", "HARM_CATEGORY_HARASSMENT",
              "HARM_CATEGORY_SEXUALLY_EXPLICIT", "HARM_CATEGORY_DANGEROUS_CONTENT")
]
# gemini_reasoning_to_thinking_config: Gemini 2.5's budget for "high"
GEMINI_25_HIGH_BUDGET = 24576
# anthropic_uses_adaptive_thinking
ADAPTIVE_CLAUDE = ("claude-sonnet-4-6", "claude-opus-4-6", "claude-opus-4-7")
# call_openai: models sent max_completion_tokens and reasoning_effort (no temperature) are
# ``._options.OPENAI_REASONING_PREFIXES`` (is_openai_reasoning_model, read by the adapter too)
# build_sglang_extra_body: models whose chat template gets enable_thinking false
NO_THINKING_PREFIXES = ("qwen/", "zai-org/glm")


def _reference(provider: str, model_id: str, base_url: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(option fields, ``extra`` keys) the reference preset sets for one model."""
    if provider == "google":
        extra: dict[str, Any] = {"safety_settings": REFERENCE_SAFETY}
        name = model_id.lower()
        if "gemini-2.5" in name:
            extra["thinking_config"] = {"thinking_budget": GEMINI_25_HIGH_BUDGET, "include_thoughts": False}
        elif "gemini-3" in name:
            extra["thinking_config"] = {"thinking_level": REFERENCE_GEMINI_EFFORT.upper(), "include_thoughts": False}
        return {"temperature": REFERENCE_TEMPERATURE}, extra
    if provider == "openai":
        # the model decides the reasoning branch: a gateway in front of OpenAI (or any server
        # serving a gpt-5 / o-series id) takes the same fields as OpenAI's own API
        if is_openai_reasoning_model(model_id):
            return {"temperature": None, "max_output_tokens": REFERENCE_MAX_OUTPUT_TOKENS,
                    "reasoning_effort": REFERENCE_OPENAI_EFFORT}, {}
        url = base_url or os.environ.get(OPENAI_BASE_URL_VARIABLE) or None
        if is_openai_host(url):
            return {"temperature": REFERENCE_TEMPERATURE, "max_output_tokens": REFERENCE_MAX_OUTPUT_TOKENS}, {}
        extra = ({"chat_template_kwargs": {"enable_thinking": False}}
                 if model_id.lower().startswith(NO_THINKING_PREFIXES) else {})
        return {"temperature": REFERENCE_TEMPERATURE, "max_output_tokens": REFERENCE_MAX_OUTPUT_TOKENS}, extra
    if provider == "anthropic":
        fields: dict[str, Any] = {"temperature": REFERENCE_TEMPERATURE,
                                  "max_output_tokens": REFERENCE_MAX_OUTPUT_TOKENS,
                                  "reasoning_effort": REFERENCE_CLAUDE_EFFORT}
        if any(name in model_id.lower() for name in ADAPTIVE_CLAUDE):
            fields["thinking_budget"] = "adaptive"
        return fields, {}
    return {"temperature": REFERENCE_TEMPERATURE, "max_output_tokens": REFERENCE_MAX_OUTPUT_TOKENS}, {}


def resolve(spec: str, opts: ModelOptions) -> ModelOptions:
    """The options ``spec`` is built with under ``opts.decoding`` (explicit values win).

    The simulated examinee's options are returned as they are (it ignores decoding)."""
    provider, model_id = parse_spec(spec)
    if provider == "mock" or opts.decoding == "paper":
        return opts
    fields, extra = _reference(provider, model_id, opts.base_url)
    update = {k: v for k, v in fields.items() if k not in opts.model_fields_set}
    added = {k: v for k, v in extra.items() if k not in opts.extra}
    if added:
        update["extra"] = {**added, **opts.extra}
    if not update:
        return opts
    return opts.model_copy(update=update)


def resolved_values(spec: str, opts: ModelOptions) -> dict[str, Any]:
    """What ``spec`` is sent under ``opts`` (the manifest's and report's record): the decoding
    fields, the seed and the provider extras; for ``mock/`` models, only the seed it draws
    with."""
    provider, _ = parse_spec(spec)
    if provider == "mock":
        seed = opts.extra.get("seed", opts.seed if opts.seed is not None else opts.run_seed)
        return {"simulated": True, "seed": seed if seed is not None else 0}
    final = resolve(spec, opts)
    out: dict[str, Any] = {k: getattr(final, k) for k in DECODING_FIELDS}
    out["seed"] = final.seed
    out.update({k: v for k, v in final.extra.items() if k in ("safety_settings", "thinking_config",
                                                              "chat_template_kwargs")})
    return out


def explicit_overrides(opts: ModelOptions) -> dict[str, Any]:
    """The decoding fields the user set explicitly (they override the preset)."""
    return {k: getattr(opts, k) for k in DECODING_FIELDS if k in opts.model_fields_set}


def decoding_fingerprint(opts: ModelOptions) -> dict[str, Any]:
    """The preset and the user's overrides: with the model spec, what decides every value sent."""
    return {"preset": opts.decoding, "overrides": explicit_overrides(opts)}


def decoding_table(models: Mapping[str, tuple[str, ModelOptions]]) -> dict[str, dict[str, Any]]:
    """Per model name (name -> its spec and the options it is built with), the values the
    preset resolved to (:func:`resolved_values`)."""
    return {name: resolved_values(spec, opts) for name, (spec, opts) in sorted(models.items())}


def decoding_record(opts: ModelOptions, models: Mapping[str, tuple[str, ModelOptions]]) -> dict[str, Any]:
    """The manifest's ``decoding``: the run's ``preset`` and ``overrides`` (the user's values)
    and ``resolved`` (per model name, every value sent, a model's own options included)."""
    return {**decoding_fingerprint(opts), "resolved": decoding_table(models)}
