"""Shards: one run spread over machines and joined again.

``Shard`` (``--shard K/N|auto``) is a deterministic partition by item: every case of an item
(all protocols, targets, models and defenders) lands in one shard, so pairing is never split.
``merge_runs`` joins the shard folders of a ``medmis run`` (``medmis merge``), ``merge_grids``
those of a ``medmis ablate`` grid, into the folder one machine would have written;
``medmis ablate --ray`` runs a grid's shards as Ray tasks and merges them.
"""

from medmis.experiments.records import SCHEDULER_VARIABLES, Shard, shard_of

from ._merge import MergeRefused, ShardsIncomplete, merge_grids, merge_runs
from ._merge import merge_command as merge_command  # `medmis merge` (importable; not in __all__)
from ._ray import (
    ablate_on_ray as ablate_on_ray,  # `medmis ablate --ray` (importable; not in __all__)
)

__all__ = [
    "SCHEDULER_VARIABLES",
    "MergeRefused",
    "Shard",
    "ShardsIncomplete",
    "merge_grids",
    "merge_runs",
    "shard_of",
]
