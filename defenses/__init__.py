"""Defenders: swappable mitigations that wrap any base model.

A defender is ``async (view, ctx) -> Answer``, made by a factory registered with
``@defender(name, options=...)``. The built-ins are registered by importing this package
(``_builtin`` and ``_agentic`` below); plug-ins register through the ``medmis.defenders``
entry-point group, loaded on the first lookup of a name that is not built in, and a local
file's through ``load_plugins`` (``--plugin FILE``). ``view`` is a
``CaseView`` (re-exported here): question, options and context sentences, nothing more.
"""

from medmis.experiments.benchmark import CaseView
from medmis.graphs import (
    DefenderContext,
    DefenderOptions,
    SolveFn,
    answer_from_reply,
    answer_from_text,
    message_to_dict,
)

# Registration of the built-ins happens here, not in the registry module, so the registry never
# imports the graphs that import it back.
from . import _agentic, _builtin, _lit_robustrag, _lit_sanitize, _lit_trustrag  # noqa: F401
from ._base import (
    ENTRY_POINT_GROUP,
    Defender,
    DefenderConfigError,
    DefenderSpec,
    create_defender,
    defender,
    defender_prompts,
    defender_unavailable,
    get_spec,
    is_control,
    list_defenders,
    quiet_broken_plugins,
)
from ._plugins import load_plugins

__all__ = [
    "ENTRY_POINT_GROUP",
    "CaseView",
    "Defender",
    "DefenderConfigError",
    "DefenderContext",
    "DefenderOptions",
    "DefenderSpec",
    "SolveFn",
    "answer_from_reply",
    "answer_from_text",
    "create_defender",
    "defender",
    "defender_prompts",
    "defender_unavailable",
    "get_spec",
    "is_control",
    "list_defenders",
    "load_plugins",
    "message_to_dict",
    "quiet_broken_plugins",
]
