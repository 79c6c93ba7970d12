"""Plug-in defenders: the example of docs/plugins.md, registered through the entry-point group."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

import medmis.defenses._base as base
from medmis.defenses import get_spec, list_defenders

ROOT = Path(__file__).resolve().parents[1]


def readme_plugin_code() -> str:
    text = (ROOT / "docs" / "plugins.md").read_text(encoding="utf-8")
    match = re.search(r"```python\n(# my_package/defense\.py\n.*?)```", text, re.DOTALL)
    assert match, "docs/plugins.md lost its plug-in example"
    return match.group(1)


@pytest.fixture
def installed_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A real distribution on sys.path: package code from docs/plugins.md and a dist-info whose
    entry_points.txt registers it in the ``medmis.defenders`` group."""
    pkg = tmp_path / "my_package"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "defense.py").write_text(readme_plugin_code())
    dist = tmp_path / "my_package-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-package\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[medmis.defenders]\nsecond_opinion = my_package.defense\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    monkeypatch.setattr(base, "_entry_points_loaded", False)
    yield
    base._REGISTRY.pop("second_opinion", None)
    for name in [m for m in sys.modules if m.startswith("my_package")]:
        del sys.modules[name]


def test_entry_point_plugin_is_listed(installed_plugin: None) -> None:
    names = [s.name for s in list_defenders()]
    assert "second_opinion" in names
    spec = get_spec("second_opinion")
    assert "reviewer_model" in spec.options.model_fields


def test_template_runs_against_the_readme_plugin(installed_plugin: None) -> None:
    import plugin_template

    plugin_template.test_defender_is_registered_through_the_entry_point()
    plugin_template.test_defender_meets_the_contract()


def test_template_copied_into_a_fresh_project_passes(tmp_path: Path) -> None:
    # as docs/plugins.md says: the template copied into the plug-in's own tests, run by pytest in a
    # project with none of this repository's pytest configuration (no asyncio_mode = "auto")
    import shutil

    env = _broken_plugin_env(tmp_path)  # the docs' plug-in installed (and a broken one beside it)
    project = tmp_path / "my-plugin"
    (project / "tests").mkdir(parents=True)
    (project / "pytest.ini").write_text("[pytest]\n")
    shutil.copy(ROOT / "tests" / "plugin_template.py", project / "tests" / "test_second_opinion.py")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
                          cwd=project, env={**env, "PYTEST_ADDOPTS": ""}, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed" in done.stdout and "warning" not in done.stdout.lower()


def test_unknown_defender_names_the_registered_ones() -> None:
    from medmis.defenses import DefenderConfigError

    with pytest.raises(DefenderConfigError, match=r"registered: .*none"):
        get_spec("no_such_defender")


# --- a plug-in whose import fails ------------------------------------------------------------


def _broken_plugin_env(tmp_path: Path) -> dict[str, str]:
    """Two real distributions found through PYTHONPATH by a fresh interpreter: one whose
    ``medmis.defenders`` entry point names a module that raises on import, and the docs'
    working example."""
    import os

    site = tmp_path / "site"
    (site / "my_package").mkdir(parents=True)
    (site / "my_package" / "__init__.py").write_text("")
    (site / "my_package" / "defense.py").write_text(readme_plugin_code())
    good = site / "my_package-0.1.dist-info"
    good.mkdir()
    (good / "METADATA").write_text("Metadata-Version: 2.1\nName: my-package\nVersion: 0.1\n")
    (good / "entry_points.txt").write_text("[medmis.defenders]\nsecond_opinion = my_package.defense\n")
    (site / "broken_plugin_mod.py").write_text('raise RuntimeError("plug-in bug at import")\n')
    dist = site / "broken_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[medmis.defenders]\nbroken_def = broken_plugin_mod\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}


def _medmis(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "medmis.experiments.cli", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=180)


def test_a_plugin_that_fails_to_import_is_one_warning_and_the_others_still_work(tmp_path: Path) -> None:
    env = _broken_plugin_env(tmp_path)
    listed = _medmis(["defenders"], env, tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "\nnone" in "\n" + listed.stdout and "\nsecond_opinion" in "\n" + listed.stdout
    assert "broken_def" not in listed.stdout
    (warning,) = listed.stderr.strip().splitlines()
    assert warning.startswith("medmis: warning: plug-in entry point broken_def = broken_plugin_mod")
    assert "RuntimeError: plug-in bug at import" in warning

    sample = ROOT / "fixtures" / "medmisbench_sample.jsonl"
    run = ["run", "--data", str(sample), "--limit", "2", "--model", "mock/examinee", "--protocol", "clean",
           "--no-progress"]
    ran = _medmis([*run, "--defender", "none,second_opinion", "--out", str(tmp_path / "ok")], env, tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert "Traceback" not in ran.stderr
    assert [line for line in ran.stderr.splitlines() if "broken_def" in line] == [warning]  # once

    refused = _medmis([*run, "--defender", "none,broken_def", "--out", str(tmp_path / "bad")], env, tmp_path)
    assert refused.returncode == 2
    lines = [line for line in refused.stderr.strip().splitlines() if not line.startswith("medmis: warning:")]
    assert len(lines) == 1 and "Traceback" not in refused.stderr
    assert lines[0].startswith("medmis: defender 'broken_def': plug-in entry point broken_def")
    assert not (tmp_path / "bad").exists()
