"""Defenders: swappable mitigations that wrap any base model.

A defender is ``async (case, ctx) -> Answer``, made by a factory registered with
``@defender(name, options=...)``. Built-ins are registered on first lookup; plug-ins register
through the ``medmis.defenders`` entry-point group.
"""

from ._base import (
    ENTRY_POINT_GROUP,
    Defender,
    DefenderConfigError,
    DefenderContext,
    DefenderOptions,
    DefenderSpec,
    SolveFn,
    create_defender,
    defender,
    get_spec,
    is_control,
    list_defenders,
    message_to_dict,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "Defender",
    "DefenderConfigError",
    "DefenderContext",
    "DefenderOptions",
    "DefenderSpec",
    "SolveFn",
    "create_defender",
    "defender",
    "get_spec",
    "is_control",
    "list_defenders",
    "message_to_dict",
]
