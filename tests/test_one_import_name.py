"""From the clone's root the folders are importable under their bare names (``import agents``),
which would give a second copy of every class; each package refuses that in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("folder", ["agents", "tools", "graphs", "defenses", "experiments"])
def test_a_bare_folder_import_fails_naming_the_package(folder: str) -> None:
    out = subprocess.run([sys.executable, "-c", f"import {folder}"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert last == (f"ImportError: import medmis.{folder}, not {folder}: the folder {folder}/ "
                    f"is installed as medmis.{folder} (pip install -e .)")


def test_the_installed_names_still_import() -> None:
    probe = "import medmis.agents, medmis.tools, medmis.graphs, medmis.defenses, medmis.experiments"
    subprocess.run([sys.executable, "-c", probe], cwd=ROOT, check=True)
