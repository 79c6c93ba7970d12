"""The benchmark side of the data flow: rows -> ``Item`` -> ``Case``, and the reply -> choice.

Core types (``Item``, ``Case``, ``Answer``, ``Record`` ...), loading and validating the released
MedMisBench schema, the delivery protocols (clean / Type 1 / Type 2), the prompt presets
(``paper``: the reference evaluation's wording; ``toolkit``) and answer extraction. Nothing here imports a model provider, a defender or the harness.
"""

from typing import TYPE_CHECKING

from medmis.tools import lazy_exports

if TYPE_CHECKING:
    from ._data import (
        DataError,
        Dataset,
        RowIssue,
        canonical_content,
        canonical_provenance,
        canonical_subset,
        load_dataset,
    )
    from ._extract import Extraction, extract_answer
    from ._hub import is_hub_address
    from ._labels import subset_from_path
    from ._prompts import (
        PRESETS,
        PROMPT_NAMES,
        PromptMessages,
        PromptName,
        PromptPreset,
        prompt_preset,
        render_prompt,
    )
    from ._protocols import (
        CONTEXT_HEADING,
        SYSTEM_PROMPT,
        Type1Targets,
        answer_instruction,
        build_cases,
        cases_for_item,
        plan_cases,
        render_context,
        render_options,
        render_question,
        render_user_prompt,
        stable_rng,
        type1_target,
    )
    from ._readers import files_in, read_file
    from ._types import (
        CONTENT_TYPES,
        DEFAULT_PROMPT,
        PROTOCOLS,
        PROVENANCES,
        SUBSETS,
        Answer,
        Case,
        CaseView,
        ContextSentence,
        Item,
        ProtocolName,
        Record,
        TraceStep,
        Usage,
        as_view,
    )
    from ._validate import validate_command as validate_command  # `medmis validate`

# Loaded on first use: a module that needs one core type (``Record`` for the records file, the
# columnar scan) does not pay for the prompt presets and LangChain's message types.
_HOME = {
    "subset_from_path": "_labels",
    "read_file": "_readers",
    "files_in": "_readers",
    **dict.fromkeys(
        (
            "DataError", "Dataset", "RowIssue", "canonical_content", "canonical_provenance",
            "canonical_subset", "load_dataset"
        ),
        "_data",
    ),
    **dict.fromkeys(
        (
            "Extraction", "extract_answer"
        ),
        "_extract",
    ),
    **dict.fromkeys(
        (
            "PRESETS", "PROMPT_NAMES", "PromptMessages", "PromptName", "PromptPreset",
            "prompt_preset", "render_prompt"
        ),
        "_prompts",
    ),
    **dict.fromkeys(
        (
            "CONTEXT_HEADING", "SYSTEM_PROMPT", "answer_instruction", "build_cases",
            "cases_for_item", "render_context", "render_options", "render_question",
            "render_user_prompt", "stable_rng", "type1_target"
        ),
        "_protocols",
    ),
    **dict.fromkeys(
        (
            "Answer", "CONTENT_TYPES", "Case", "CaseView", "ContextSentence", "DEFAULT_PROMPT",
            "Item", "PROTOCOLS", "PROVENANCES", "ProtocolName", "Record", "SUBSETS", "TraceStep",
            "Usage", "as_view"
        ),
        "_types",
    ),
    **dict.fromkeys(
        (
            "validate_command",
        ),
        "_validate",
    ),
    **dict.fromkeys(("is_hub_address",), "_hub"),
    **dict.fromkeys(("Type1Targets", "plan_cases"), "_protocols"),
}
__getattr__ = lazy_exports(__name__, _HOME, globals())

__all__ = [
    "CONTENT_TYPES",
    "CONTEXT_HEADING",
    "DEFAULT_PROMPT",
    "PRESETS",
    "PROMPT_NAMES",
    "PROTOCOLS",
    "PROVENANCES",
    "SUBSETS",
    "SYSTEM_PROMPT",
    "Answer",
    "Case",
    "CaseView",
    "ContextSentence",
    "DataError",
    "Dataset",
    "Extraction",
    "Item",
    "PromptMessages",
    "PromptName",
    "PromptPreset",
    "ProtocolName",
    "Record",
    "RowIssue",
    "TraceStep",
    "Type1Targets",
    "Usage",
    "answer_instruction",
    "as_view",
    "build_cases",
    "canonical_content",
    "canonical_provenance",
    "canonical_subset",
    "cases_for_item",
    "extract_answer",
    "files_in",
    "is_hub_address",
    "load_dataset",
    "plan_cases",
    "prompt_preset",
    "read_file",
    "render_context",
    "render_options",
    "render_prompt",
    "render_question",
    "render_user_prompt",
    "stable_rng",
    "subset_from_path",
    "type1_target",
]
