"""Local plug-in files: a ``.py`` file whose ``@defender``s register for one run, no packaging.

``medmis run --plugin path/to/defense.py`` (and ``plugins = [...]`` in an ablation config)
imports the file as a module named after its content's SHA-256, so the defender's code
identity in the run's fingerprint (``harness._identity.defender_code``) depends on what the
file says, not on where it lies: a changed file is a ``defender_code`` change on resume.
Entry points (``medmis.defenders``) stay the way to ship a defender to others.

Every problem with a file (missing, not Python, an exception on import, no defender in it, a
name a built-in or another plug-in holds) is one :class:`DefenderConfigError` line.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from collections.abc import Iterable
from pathlib import Path

from medmis.tools import noting_signals, signals_seen

from ._base import DefenderConfigError, DefenderSpec, load_installed, registered, restore_registry

__all__ = ["MODULE_PREFIX", "load_plugins"]

MODULE_PREFIX = "medmis_plugin_"
"""Module names of local plug-in files: this prefix and the first 16 hex digits of the file's SHA-256."""

_LOADED: dict[str, list[str]] = {}  # content sha256 -> the defender names the file registered
_ORIGIN: dict[str, Path] = {}  # defender name -> the plug-in file that registered it


def load_plugins(paths: Iterable[str | Path]) -> list[str]:
    """Import each plug-in file once and return the defender names they registered.

    The same content is imported once per process (a second path to it, or a second call,
    registers nothing new). A file changed since it was loaded in this process replaces its
    own earlier defenders.

    Raises:
        DefenderConfigError: A file is missing or unreadable, fails to import, defines no
            defender, or registers a name another defender holds.
    """
    names: list[str] = []
    for path in paths:
        for name in _load_one(Path(path)):
            if name not in names:
                names.append(name)
    return names


def _load_one(path: Path) -> list[str]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise DefenderConfigError(f"plug-in {path}: no such file") from None
    except OSError as exc:
        raise DefenderConfigError(f"plug-in {path}: cannot read it ({exc.strerror or exc})") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest in _LOADED:
        return _LOADED[digest]
    load_installed()  # an installed plug-in's names are taken before a local file claims them
    module_name = MODULE_PREFIX + digest[:16]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise DefenderConfigError(f"plug-in {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    before = registered()
    sys.modules[module_name] = module  # dataclasses and pydantic look their module up while it runs
    signals = signals_seen()
    try:
        with noting_signals():
            spec.loader.exec_module(module)
    except (Exception, SystemExit, KeyboardInterrupt) as exc:  # what the file raises is its problem, in one line
        _undo(before, module_name)
        if isinstance(exc, KeyboardInterrupt) and signals_seen() > signals:
            raise  # a real Ctrl-C (or SIGTERM) during the import stops the command
        raise DefenderConfigError(f"plug-in {path}: {_why(exc)}") from None
    resolved = path.resolve()
    added = [n for n, s in registered().items() if before.get(n) is not s]
    taken = [n for n in added if n in before and _ORIGIN.get(n) != resolved]
    if taken:
        _undo(before, module_name)
        raise DefenderConfigError(f"plug-in {path}: defender {taken[0]!r} is already registered "
                                  "(a built-in or another plug-in); choose another name")
    if not added:
        _undo(before, module_name)
        raise DefenderConfigError(f"plug-in {path}: defines no defender (decorate a factory with "
                                  "@medmis.defenses.defender)")
    for name in added:
        _ORIGIN[name] = resolved
    _LOADED[digest] = sorted(added)
    return _LOADED[digest]


def _undo(before: dict[str, DefenderSpec], module_name: str) -> None:
    restore_registry(before)
    sys.modules.pop(module_name, None)


def _why(exc: BaseException) -> str:
    if isinstance(exc, SyntaxError):
        return f"syntax error at line {exc.lineno}: {exc.msg}"
    if isinstance(exc, DefenderConfigError) and "already registered" in str(exc):
        return f"{exc}; choose another name"
    lines = str(exc).strip().splitlines()
    return f"failed to import: {type(exc).__name__}" + (f": {lines[0]}" if lines else "")
