"""Ambient misinformation (``RunConfig.search_ambient``): a named, opt-in condition in which a
file of false passages is searched with the local corpus by every case of the run.

The default local corpus is the clean web: it holds no passage written to argue for a wrong
option. Background misinformation on the web is a condition a study may want, so it is one
that has a name: the file's sha256 is part of the run's fingerprint (a changed file is refused
on resume) and the manifest records the file, its sha256 and its passage count, which every
surface showing the run's results names (report, verdict, poison section, exports).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ._config import RunConfig, RunSetupError

__all__ = ["ambient_fingerprint", "ambient_manifest", "check_ambient"]


def check_ambient(config: RunConfig) -> dict[str, Any] | None:
    """The run's ambient condition as the manifest records it (None without one), checked
    before anything is created.

    Raises:
        RunSetupError: The search is not the local corpus, or the file is missing, unreadable
            or holds no passage (one line).
    """
    from medmis.tools import ToolError, load_ambient

    if config.search_ambient is None:
        return None
    if config.search != "local":
        raise RunSetupError(f"--search-ambient {config.search_ambient}: ambient passages join the local "
                            f"corpus; use --search local (not {config.search})")
    try:
        passages = load_ambient(config.search_ambient)
    except ToolError as exc:
        raise RunSetupError(f"--search-ambient: {exc.message}") from None
    except OSError as exc:
        raise RunSetupError(f"--search-ambient: cannot read {config.search_ambient} ({exc.strerror or exc})") from None
    return {"file": str(config.search_ambient), "sha256": _digest(config.search_ambient),
            "passages": len(passages)}


def ambient_fingerprint(path: str | Path) -> dict[str, Any]:
    """The fingerprint's ``search_ambient``: the file's sha256 (not its path)."""
    return {"sha256": _digest(path)}


def ambient_manifest(path: str | Path) -> dict[str, Any]:
    """The manifest's ``search_ambient``: the file, its sha256 and how many passages it holds."""
    from medmis.tools import load_ambient

    return {"file": str(path), "sha256": _digest(path), "passages": len(load_ambient(path))}


def _digest(path: str | Path) -> str:
    from medmis.tools import ambient_digest

    try:
        return ambient_digest(path)
    except OSError as exc:
        raise RunSetupError(f"--search-ambient: cannot read {path} ({exc.strerror or exc})") from None
