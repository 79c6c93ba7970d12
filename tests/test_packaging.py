"""Packaging: one import name, and a wheel that works installed away from the checkout.

The source tree's import rules (no circle, every import down the layers) are
``tests/test_layout.py``'s.

The wheel test builds the real distribution and installs it into a fresh virtual environment,
so it checks what a user gets from ``pip install .``, not what the editable install happens to
expose from this checkout.
"""

from __future__ import annotations

import ast
import os
import site
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("agents", "tools", "graphs", "defenses", "experiments")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(out), str(ROOT)],
        check=True, capture_output=True, text=True, timeout=300,
    )
    (found,) = out.glob("medmis-*.whl")
    return found


def test_wheel_adds_only_the_medmis_import_name(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    top = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert top == {"medmis"}
    # every folder of the design card is inside it, the subpackages and the configs too
    for folder in FOLDERS:
        assert f"medmis/{folder}/__init__.py" in names
    for sub in ("benchmark", "harness", "analysis", "reporting", "ablation", "bench"):
        assert f"medmis/experiments/{sub}/__init__.py" in names
    # the pytest plug-in's public name is a package of its own; its folder is not installed twice
    assert "medmis/testing/__init__.py" in names
    assert not any(n.startswith("medmis/experiments/_pytest_plugin/") for n in names)
    assert "medmis/experiments/configs/demo.toml" in names
    # PEP 561: every package under the `medmis` namespace says it is typed (subpackages inherit)
    for package in (*FOLDERS, "testing"):
        assert f"medmis/{package}/py.typed" in names
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        entry_points = zf.read(meta).decode()
    assert "medmis = medmis.experiments.cli:console" in entry_points
    assert "[pytest11]\nmedmis = medmis.testing" in entry_points


def _dependency_folders() -> list[str]:
    """The running environment's site-packages: a venv's own when pytest runs in one."""
    return sorted({*site.getsitepackages(), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})


def test_installed_wheel_imports_from_outside_the_checkout(wheel: Path, tmp_path: Path) -> None:
    # A fresh venv gets the dependencies from the running environment (a venv's or the
    # interpreter's: the base interpreter of a venv lacks them) through a .pth file of plain
    # folder lines. Those folders' own .pth files are not run, so this checkout's editable
    # install hook stays out: the wheel in the venv must be what imports, and the old
    # top-level names must be gone.
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=False, with_pip=False).create(env_dir)
    python = env_dir / ("Scripts" if os.name == "nt" else "bin") / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True, timeout=60,
    ).stdout.strip()
    Path(purelib, "_running_env.pth").write_text("\n".join(_dependency_folders()) + "\n", encoding="utf-8")
    subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
        check=True, capture_output=True, text=True, timeout=300,
    )
    probe = (
        "import importlib.util, sys\n"
        "import medmis.experiments, medmis.defenses, medmis.testing\n"
        "print(medmis.experiments.__file__)\n"
        "print([n for n in ('agents', 'tools', 'graphs', 'defenses', 'experiments')"
        " if importlib.util.find_spec(n) is not None])\n"
        "print(len(medmis.defenses.list_defenders()))\n"
        # the files the defaults and the docs' replay example (docs/plugins.md) read are package data
        "from medmis.testing import bundled_fixture\n"
        "print(repr([str(bundled_fixture(f)) for f in ('medmisbench_sample.jsonl', 'corpus/documents.jsonl',"
        " 'cassettes/search_agent_hle.jsonl', 'poison/sample_pages.jsonl')]))\n"
    )
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    done = subprocess.run(
        [str(python), "-c", probe], cwd=outside, check=True, capture_output=True, text=True,
        timeout=120, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    module_file, leaked, n_defenders, bundled = done.stdout.strip().splitlines()
    assert Path(module_file).resolve().is_relative_to(env_dir.resolve())
    assert all(Path(f).resolve().is_relative_to(env_dir.resolve()) for f in ast.literal_eval(bundled))
    assert leaked == "[]"
    assert int(n_defenders) >= 9
    failed = subprocess.run(
        [str(python), "-c", "import agents"], cwd=outside, capture_output=True, text=True, timeout=60,
    )
    assert failed.returncode != 0 and "ModuleNotFoundError" in failed.stderr
