"""The benchmark side of the data flow: rows -> ``Item`` -> ``Case``, and the delivery protocols.

Dataset types (``Item``, ``Case``, ``Record`` ...), loading and validating the released
MedMisBench schema and the delivery protocols (clean / Type 1 / Type 2). What a defender is
given and returns (``CaseView``, ``Answer``), the prompt presets and answer extraction are the
defender contract's (``medmis.defenses``); they are re-exported here for the experiment
pipeline, which reads them beside the dataset types. Nothing here imports a model provider,
a built-in defender or the harness.
"""

from medmis.agents import Usage
from medmis.defenses import (
    CONTEXT_HEADING,
    DEFAULT_PROMPT,
    PRESETS,
    PROMPT_NAMES,
    SYSTEM_PROMPT,
    Answer,
    CaseView,
    Extraction,
    PromptMessages,
    PromptName,
    PromptPreset,
    TraceStep,
    answer_instruction,
    as_view,
    extract_answer,
    prompt_preset,
    render_context,
    render_options,
    render_prompt,
    render_question,
    render_user_prompt,
)
from medmis.experiments.records import PROTOCOLS, ProtocolName, Record

from ._data import (
    DataError,
    Dataset,
    RowIssue,
    canonical_content,
    canonical_provenance,
    canonical_subset,
    load_dataset,
)
from ._hub import is_hub_address
from ._labels import subset_from_path
from ._protocols import (
    Type1Targets,
    build_cases,
    cases_for_item,
    plan_cases,
    stable_rng,
    type1_target,
)
from ._readers import files_in, read_file
from ._types import (
    CONTENT_TYPES,
    PROVENANCES,
    SUBSETS,
    Case,
    ContextSentence,
    Item,
)
from ._validate import validate_command as validate_command  # `medmis validate`; not in __all__

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
