"""The JSON replies each generation call must return: a JSON schema sent to the provider
(Gemini ``response_schema``, OpenAI ``json_schema``) and a pydantic model every reply is
validated against before anything is written."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from medmis.agents import StructuredOutput

from ._prompts import MISINFO_TYPES, NOT_APPLICABLE

M = TypeVar("M", bound=BaseModel)
MAX_OPTIONS = 26  # the release has columns opa..opz

CONTENT_CHOICES: tuple[str, ...] = (*MISINFO_TYPES, NOT_APPLICABLE)


class ReplyError(ValueError):
    """A reply that is not JSON or does not match its schema (recorded, never written as an item)."""


class ExtractReply(BaseModel):
    model_config = ConfigDict(extra="ignore")
    options: dict[str, str]


class FilterReply(BaseModel):
    model_config = ConfigDict(extra="ignore")
    is_viable: bool
    content_type: str
    reason: str = ""

    @field_validator("content_type")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in CONTENT_CHOICES:
            raise ValueError(f"unknown content type {value!r}")
        return value


class GenerationReply(BaseModel):
    model_config = ConfigDict(extra="ignore")
    injections: dict[str, str]


class MergedReply(BaseModel):
    model_config = ConfigDict(extra="ignore")
    is_viable: bool
    difficulty_score: int = Field(ge=0, le=5)
    mislead_score: int = Field(ge=0, le=5)
    chosen_misinfo_type: str
    injections: dict[str, str] | str = Field(default_factory=dict)


def _strict_object(properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def _injections(keys: Sequence[str]) -> dict[str, Any]:
    return _strict_object({k: {"type": "string"} for k in keys})


def extract_schema() -> StructuredOutput:
    # Option keys are not known before extraction. A free map (``additionalProperties``) is
    # refused by the Gemini Developer API, so the keys the reference asks for ("1", "2", ...)
    # are listed, none required.
    keys = {str(i): {"type": "string"} for i in range(1, MAX_OPTIONS + 1)}
    return {
        "name": "option_extraction",
        "schema": {
            "type": "object",
            "properties": {"options": {"type": "object", "properties": keys}},
            "required": ["options"],
        },
    }


def filter_schema() -> StructuredOutput:
    return {
        "name": "applicability_filter",
        "strict": True,
        "schema": _strict_object(
            {
                "is_viable": {"type": "boolean"},
                "content_type": {"type": "string", "enum": list(CONTENT_CHOICES)},
                "reason": {"type": "string"},
            }
        ),
    }


def generation_schema(keys: Sequence[str]) -> StructuredOutput:
    return {
        "name": "injection_bundle",
        "strict": True,
        "schema": _strict_object({"injections": _injections(keys)}),
    }


def merged_schema(keys: Sequence[str]) -> StructuredOutput:
    return {
        "name": "merged_injection",
        # the reference returns {} for a non-viable item, which a strict schema cannot express
        "schema": {
            "type": "object",
            "properties": {
                "is_viable": {"type": "boolean"},
                "difficulty_score": {"type": "integer"},
                "mislead_score": {"type": "integer"},
                "chosen_misinfo_type": {"type": "string", "enum": list(CONTENT_CHOICES)},
                "injections": {"type": "object", "properties": {k: {"type": "string"} for k in keys}},
            },
            "required": ["is_viable", "difficulty_score", "mislead_score", "chosen_misinfo_type", "injections"],
        },
    }


def parse_reply(text: str, model: type[M]) -> M:
    """Parse and validate a JSON reply (a fenced object is accepted; nothing else is repaired)."""
    body = text.strip()
    if body.startswith("```"):
        body = body.strip("`").removeprefix("json").strip()
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ReplyError(f"reply is not JSON ({exc.msg})") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "reply"
        raise ReplyError(f"reply does not match schema: {where}: {first['msg']}") from None


def check_injections(injections: dict[str, str] | str, keys: Sequence[str]) -> dict[str, str]:
    """The option-aligned sentences, exactly one non-empty sentence per option key."""
    if not isinstance(injections, dict):
        raise ReplyError("injections is not an object")
    missing = [k for k in keys if not str(injections.get(k, "")).strip()]
    extra = [k for k in injections if k not in keys]
    if missing or extra:
        raise ReplyError(f"injections keys do not match options (missing {missing}, extra {extra})")
    return {k: " ".join(str(injections[k]).split()) for k in keys}


class PageReply(BaseModel):
    """One poisoned page (``medmis generate pages``): its headline and body."""

    model_config = ConfigDict(extra="ignore")
    title: str
    text: str

    @field_validator("title", "text")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("is blank")
        return value.strip()


def page_schema() -> StructuredOutput:
    return {
        "name": "poisoned_page",
        "strict": True,
        "schema": _strict_object({"title": {"type": "string"}, "text": {"type": "string"}}),
    }
