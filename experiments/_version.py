"""``medmis --version``: the installed distribution's version, and the commit of a checkout."""

from __future__ import annotations

import argparse
import shutil
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["VersionAction", "version_text"]

# the repository root when this module runs from a checkout (an editable install); in a wheel
# it is site-packages/medmis, which holds no .git
_ROOT = Path(__file__).resolve().parents[1]


def _commit() -> str | None:
    git = shutil.which("git")
    if git is None or not (_ROOT / ".git").exists():
        return None
    try:
        done = subprocess.run([git, "-C", str(_ROOT), "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def version_text() -> str:
    """``medmis X.Y.Z`` from the package metadata, plus ``(git <commit>)`` from a checkout."""
    try:
        version = metadata.version("medmis")
    except metadata.PackageNotFoundError:
        version = "unknown (not installed)"
    commit = _commit()
    return f"medmis {version}" + (f" (git {commit})" if commit else "")


class VersionAction(argparse.Action):
    """``--version``: print :func:`version_text` and exit 0 (worked out only when asked)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        kwargs.setdefault("help", "print the installed version (and the git commit of a checkout) and exit")
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        print(version_text())
        parser.exit(0)
