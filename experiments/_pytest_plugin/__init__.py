"""``medmis.testing``: medmis's pytest plug-in under its public name (entry point ``pytest11``).

This folder is installed as ``medmis.testing`` (pyproject's ``package-dir``; the top-level
folders are fixed, so the name is mapped rather than given a folder of its own). The fixtures,
the hook and the classes have one home, :mod:`medmis.experiments.testing`, and are re-exported
here as the same objects: ``medmis.testing.Replay is medmis.experiments.testing.Replay``, so a
test may import either name without holding a second copy of a class. The fixtures are
documented there (and in docs/plugins.md, "Testing with medmis's pytest plug-in").
"""

from typing import TYPE_CHECKING, Any

from medmis.experiments import testing as _home
from medmis.experiments.testing import (
    BUNDLED_FIXTURES,
    NetworkBlocked,
    Replay,
    bundled_fixture,
    medmis_case_view,
    medmis_no_network,
    medmis_replay,
    medmis_scripted_model,
)
from medmis.experiments.testing import (  # the plug-in's hook: pytest finds it here by name
    pytest_configure as pytest_configure,
)

if TYPE_CHECKING:
    from medmis.defenses.testing import check_defender

__all__ = [
    "BUNDLED_FIXTURES",
    "NetworkBlocked",
    "Replay",
    "bundled_fixture",
    "check_defender",
    "medmis_case_view",
    "medmis_no_network",
    "medmis_replay",
    "medmis_scripted_model",
]


def __getattr__(name: str) -> Any:
    # ``check_defender`` loads on first use, as in the home module (it imports the defenders)
    if name == "check_defender":
        return _home.check_defender
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

