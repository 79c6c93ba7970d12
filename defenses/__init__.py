"""The defender contract: what a defender is given, what it returns, and how it registers.

A defender is ``async (view, ctx) -> Answer``, made by a factory registered with
``@defender(name, options=..., source=..., cost=...)``. ``view`` is a :class:`CaseView`
(question, options and context sentences, nothing more); ``ctx`` is a
:class:`DefenderContext` through which every model and tool call is traced, retried and
redacted. :func:`render_prompt` words a view in the run's prompt preset and
:func:`answer_from_reply` reads the choice out of a reply.

The built-in defenders live in ``medmis.graphs`` (one module each) and register when the
registry first looks a name up; plug-ins register through the ``medmis.defenders``
entry-point group, and a local file's through :func:`load_plugins` (``--plugin FILE``).
"""

# The folder is the package ``medmis.defenses``; imported as ``defenses`` from the clone's root it
# would be a second copy of every class (isinstance checks and registries silently split).
if __name__ != "medmis.defenses":
    raise ImportError(f"import medmis.defenses, not {__name__}: the folder defenses/ is installed as medmis.defenses (pip install -e .)")

from ._base import (
    BUILTINS_PACKAGE,
    DEFAULT_COST,
    ENTRY_POINT_GROUP,
    CostHint,
    Defender,
    DefenderConfigError,
    DefenderSpec,
    ProtocolCost,
    create_defender,
    defender,
    defender_prompts,
    defender_unavailable,
    get_spec,
    is_control,
    list_defenders,
    mcq_only,
    quiet_broken_plugins,
)
from ._case import (
    ANSWER_FORMATS,
    DEFAULT_PROMPT,
    Answer,
    AnswerFormat,
    CaseView,
    TraceStep,
    Viewable,
    as_view,
)
from ._context import (
    DefenderContext,
    DefenderOptions,
    SolveFn,
    answer_from_reply,
    answer_from_text,
    message_to_dict,
)
from ._extract import Extraction, extract_answer
from ._plugins import load_plugins
from ._prompts import (
    CONTEXT_HEADING,
    OPEN_INSTRUCTION,
    PRESETS,
    PROMPT_NAMES,
    SYSTEM_PROMPT,
    PromptMessages,
    PromptName,
    PromptPreset,
    Shown,
    answer_instruction,
    prompt_preset,
    render_context,
    render_options,
    render_prompt,
    render_question,
    render_user_prompt,
)

__all__ = [
    "ANSWER_FORMATS",
    "BUILTINS_PACKAGE",
    "CONTEXT_HEADING",
    "DEFAULT_COST",
    "DEFAULT_PROMPT",
    "ENTRY_POINT_GROUP",
    "OPEN_INSTRUCTION",
    "PRESETS",
    "PROMPT_NAMES",
    "SYSTEM_PROMPT",
    "Answer",
    "AnswerFormat",
    "CaseView",
    "CostHint",
    "Defender",
    "DefenderConfigError",
    "DefenderContext",
    "DefenderOptions",
    "DefenderSpec",
    "Extraction",
    "PromptMessages",
    "PromptName",
    "PromptPreset",
    "ProtocolCost",
    "Shown",
    "SolveFn",
    "TraceStep",
    "Viewable",
    "answer_from_reply",
    "answer_from_text",
    "answer_instruction",
    "as_view",
    "create_defender",
    "defender",
    "defender_prompts",
    "defender_unavailable",
    "extract_answer",
    "get_spec",
    "is_control",
    "list_defenders",
    "load_plugins",
    "mcq_only",
    "message_to_dict",
    "prompt_preset",
    "quiet_broken_plugins",
    "render_context",
    "render_options",
    "render_prompt",
    "render_question",
    "render_user_prompt",
]
