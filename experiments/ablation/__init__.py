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
from ._folders import (
    STABILITY_DIR as STABILITY_DIR,  # the re-runs' folder (importable; not in __all__)
)
from ._preflight import (
    check_keys as check_keys,  # the missing-key line `medmis ablate` refuses with (importable; not in __all__)
)

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
