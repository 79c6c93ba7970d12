"""Loading the release from the Hugging Face hub (optional ``datasets`` package)."""

from __future__ import annotations

from collections.abc import Iterator

from ._dataset import DataError
from ._labels import canonical_subset
from ._readers import Row
from ._types import SUBSETS

HUB_REPO = "AI4HealthResearch/MedMisBench"


def parse_hub(source: str, subset: str | None) -> tuple[str, str] | None:
    """(repo, config) for hub addresses, None for local paths."""
    if source.startswith("hub:"):
        repo, config = HUB_REPO, source.removeprefix("hub:").strip("/")
    elif source.startswith("hf://"):
        parts = source.removeprefix("hf://").strip("/").split("/")
        if len(parts) < 2:
            raise DataError(f"{source}: expected hf://OWNER/NAME/CONFIG")
        repo, config = "/".join(parts[:2]), "/".join(parts[2:])
    else:
        return None
    if config and subset and canonical_subset(config) != subset:
        raise DataError(f"{source}: conflicts with subset={subset!r}")
    config = config or subset or ""
    if not config:
        raise DataError(f"{source}: name a config, e.g. hub:MEDMISHLE ({', '.join(SUBSETS)})")
    if repo == HUB_REPO:
        config = canonical_subset(config)
        if config not in SUBSETS:
            raise DataError(
                f"{source}: unknown config {config!r} (use one of {', '.join(SUBSETS)})"
            )
    return repo, config


def hub_rows(repo: str, config: str, address: str) -> Iterator[tuple[str, Row]]:
    try:
        import datasets  # optional extra: medmis[hub]
    except ImportError:
        raise DataError(
            f"{address}: loading from the hub needs the optional 'datasets' package "
            "(pip install 'medmis[hub]')"
        ) from None
    try:
        loaded = datasets.load_dataset(repo, config)
    except Exception as exc:  # offline, missing repo, auth: all end the load the same way
        first = (str(exc).strip().splitlines() or [""])[0]
        raise DataError(
            f"{address}: could not load from the hub: {type(exc).__name__}: {first}"
        ) from exc
    splits = loaded.items() if hasattr(loaded, "items") else [("data", loaded)]
    for split, rows in splits:
        for i, row in enumerate(rows, 1):
            yield f"{address}/{split}", (i, row)
