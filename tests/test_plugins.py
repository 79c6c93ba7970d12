"""Plug-in defenders: the README's example, registered through the entry-point group."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest

import medmis.defenses._base as base
from medmis.defenses import get_spec, list_defenders

ROOT = Path(__file__).resolve().parents[1]


def readme_plugin_code() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"```python\n(# my_package/defense\.py\n.*?)```", text, re.DOTALL)
    assert match, "README lost its plug-in example"
    return match.group(1)


@pytest.fixture
def installed_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A real distribution on sys.path: package code from the README and a dist-info whose
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


async def test_template_runs_against_the_readme_plugin(installed_plugin: None) -> None:
    import plugin_template

    plugin_template.test_defender_is_registered_through_the_entry_point()
    await plugin_template.test_defender_meets_the_contract()


def test_unknown_defender_names_the_registered_ones() -> None:
    from medmis.defenses import DefenderConfigError

    with pytest.raises(DefenderConfigError, match=r"registered: .*none"):
        get_spec("no_such_defender")
