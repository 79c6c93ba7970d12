"""Ablation grids from a TOML config: models x defenders (with option sweeps) x protocols.

``load_config`` validates a config, ``estimate`` prices it (``--dry-run``), ``run_ablation``
runs the grid as one resumable run under an optional budget cap.
"""

from ._ablate import (
    AblationConfig,
    CellEstimate,
    DefenderEntry,
    Delivery,
    ModelEntry,
    estimate,
    format_estimates,
    load_config,
    run_ablation,
)
from ._ablate import (
    ablate_command as ablate_command,  # `medmis ablate` (importable; not in __all__)
)
from ._ray import ablate_on_ray as ablate_on_ray  # `medmis ablate --ray` (importable; not in __all__)

__all__ = [
    "AblationConfig",
    "CellEstimate",
    "DefenderEntry",
    "Delivery",
    "ModelEntry",
    "estimate",
    "format_estimates",
    "load_config",
    "run_ablation",
]
