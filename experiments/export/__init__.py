"""A run folder in other tools' formats: Inspect AI eval logs and a Parquet results dataset.

``export_inspect(run_dir)`` writes one Inspect log per model x defender (needs the
``medmis[inspect]`` extra); ``export_parquet(run_dir)`` writes a folder laid out as a Hugging
Face dataset (Parquet tables and a ``README.md`` card). ``medmis export inspect|parquet`` runs them.
"""

# `medmis export`: importable for the CLI, not in __all__
from ._cli import add_export_parser as add_export_parser
from ._cli import run_export as run_export
from ._dataset import (
    CONFIGS,
    Coverage,
    config_file,
    dataset_card,
    export_parquet,
    item_languages,
    text_language,
)
from ._inspect import INSTALL_HINT, SCORERS, export_inspect

__all__ = [
    "CONFIGS",
    "INSTALL_HINT",
    "SCORERS",
    "Coverage",
    "config_file",
    "dataset_card",
    "export_inspect",
    "export_parquet",
    "item_languages",
    "text_language",
]
