"""Loading the release from the Hugging Face hub (optional ``datasets`` package).

The release is published under two names with the same dataset card, one config (and one
split, named after it) per subset: ``AI4HealthResearch/MedMisBench`` (the name the reference
evaluation notebooks load, our default) and ``HongjianZhou/MedMisBench`` (the name the
reference repository's README links). Other repositories (a private mirror) are accepted too;
their config names are passed through unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from ._dataset import DataError
from ._labels import canonical_subset
from ._readers import Row
from ._types import SUBSETS

HUB_REPO = "AI4HealthResearch/MedMisBench"
HUB_REPOS: tuple[str, ...] = (HUB_REPO, "HongjianZhou/MedMisBench")
ALL_CONFIGS = "all"


def is_hub_address(source: str) -> bool:
    """Whether ``source`` names the hub (``hub:...`` or ``hf://...``) rather than a path."""
    return source.startswith(("hub:", "hf://"))


def parse_hub(
    source: str, subset: str | None, repo: str | None = None
) -> tuple[str, list[str]] | None:
    """``(repo, configs)`` for a hub address, None for a local path.

    Args:
        source: ``hub:CONFIG`` (in ``repo``, default ``HUB_REPO``), ``hub:all`` (every
            subset), or ``hf://OWNER/NAME/CONFIG``; ``hub:`` alone takes its config from
            ``subset``.
        subset: The canonical ``--subset``, if any; it must agree with a named config.
        repo: The ``--hub-repo`` choice.

    Raises:
        DataError: A malformed address, an unknown config of a known repository, a config
            that contradicts ``subset``, or ``repo`` given for a local path.
    """
    if source.startswith("hub:"):
        config = source.removeprefix("hub:").strip("/")
        repo = repo or HUB_REPO
    elif source.startswith("hf://"):
        parts = source.removeprefix("hf://").strip("/").split("/")
        if len(parts) < 2:
            raise DataError(f"{source}: expected hf://OWNER/NAME/CONFIG")
        named, config = "/".join(parts[:2]), "/".join(parts[2:])
        if repo and repo != named:
            raise DataError(f"{source}: conflicts with hub repo {repo!r}")
        repo = named
    else:
        if repo:
            raise DataError(f"{source}: a hub repo applies only to hub: or hf:// addresses")
        return None
    if config.lower() == ALL_CONFIGS:
        if subset:
            return repo, [subset]
        if repo not in HUB_REPOS:
            # a mirror's configs are not known to us, so "all" cannot be expanded safely
            raise DataError(f"{source}: name the configs of {repo} one at a time")
        return repo, list(SUBSETS)
    if config and subset and canonical_subset(config) != subset:
        raise DataError(f"{source}: conflicts with subset={subset!r}")
    config = config or subset or ""
    if not config:
        raise DataError(
            f"{source}: name a config, e.g. hub:MEDMISHLE, or hub:all ({', '.join(SUBSETS)})"
        )
    if repo in HUB_REPOS:
        config = canonical_subset(config)
        if config not in SUBSETS:
            raise DataError(
                f"{source}: unknown config {config!r} (use one of {', '.join(SUBSETS)} or all)"
            )
    return repo, [config]


def hub_rows(repo: str, configs: Sequence[str], address: str) -> Iterator[tuple[str, str, Row]]:
    """``(config, where, (row number, row))`` for every row of every split of the configs.

    ``where`` names the split for problem reports: ``ADDRESS/SPLIT`` (with the config in
    between when several configs are loaded and the split is not named after it).

    Raises:
        DataError: ``datasets`` is not installed, or the hub could not be reached.
    """
    try:
        import datasets  # optional extra: medmis[hub]
    except ImportError:
        raise DataError(
            f"{address}: loading from the hub needs the optional 'datasets' package "
            "(pip install 'medmis[hub]')"
        ) from None
    for config in configs:
        try:
            loaded = datasets.load_dataset(repo, config)
        except Exception as exc:  # offline, missing repo, auth: all end the load the same way
            first = (str(exc).strip().splitlines() or [""])[0]
            raise DataError(
                f"{address}: could not load {repo} {config} from the hub: "
                f"{type(exc).__name__}: {first}"
            ) from exc
        splits = loaded.items() if hasattr(loaded, "items") else [("data", loaded)]
        for split, rows in splits:
            middle = f"/{config}" if len(configs) > 1 and split != config else ""
            for i, row in enumerate(rows, 1):
                yield config, f"{address}{middle}/{split}", (i, row)
