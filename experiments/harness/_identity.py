"""What code answers a run: each defender's source (hash, plug-in distribution), the server
each model spec talks to, the simulated examinee's settings, and medmis's own version.

Each is worked out once per process (a run's fingerprint needs it once, not per call).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

__all__ = ["bare_url", "defender_code", "describe_medmis", "examinee_identity", "medmis_identity",
           "web_tool_endpoints"]


def bare_url(url: str | None) -> str | None:
    """A base URL without userinfo, query or fragment (credentials never reach the manifest)."""
    if not url:
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal keeps its brackets
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _module_file(name: str) -> Path | None:
    module = sys.modules.get(name)
    file = getattr(module, "__file__", None)
    return Path(file) if file else None


_DEFENDER_LAYERS = ("medmis.graphs.", "medmis.defenses.")
"""Packages whose modules a built-in defender's behaviour is spread over: the ones its factory
and options modules import from, transitively, are part of its code identity."""


def _imported_modules(name: str) -> set[str]:
    """The modules of the defender layers that module ``name`` imports (relative or absolute)."""
    path = _module_file(name)
    try:
        tree = ast.parse(path.read_bytes()) if path is not None else None
    except (OSError, SyntaxError, ValueError):
        return set()
    if tree is None:
        return set()
    package = name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            candidates = [base, *(f"{base}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            candidates = [a.name for a in node.names]
        else:
            continue
        if isinstance(node, ast.ImportFrom) and f"{base}.".startswith(_DEFENDER_LAYERS):
            # a name taken from a public face: the module that defines it
            face = sys.modules.get(base)
            candidates += [getattr(getattr(face, a.name, None), "__module__", None) or "" for a in node.names]
        for mod in candidates:
            if mod.startswith(_DEFENDER_LAYERS) and mod.rsplit(".", 1)[-1].startswith("_"):
                try:
                    if importlib.util.find_spec(mod) is not None:
                        found.add(mod)
                except (ImportError, ValueError):
                    continue
    return found


def _defender_modules(roots: list[str]) -> list[str]:
    """``roots`` and, for medmis's own defenders, every private module of the defender layers
    they import transitively (a shared graph helper changes what the defender does too)."""
    seen = set(roots)
    todo = [m for m in roots if m.startswith(_DEFENDER_LAYERS)]
    while todo:
        for mod in _imported_modules(todo.pop()) - seen:
            seen.add(mod)
            importlib.import_module(mod)
            todo.append(mod)
    return sorted(seen)


@functools.cache
def _plugin_distribution(module: str) -> str | None:
    """``name@version`` of the distribution whose ``medmis.defenders`` entry point loads
    ``module`` (or its package); None for medmis itself and for code no entry point names."""
    if module == "medmis" or module.startswith("medmis."):
        return None
    from medmis.defenses import ENTRY_POINT_GROUP

    top = module.split(".")[0]
    found = None
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        root = ep.module
        if module == root or module.startswith(root + "."):
            found = ep  # the entry point's own module (or a submodule of it): the best match
            break
        if found is None and root.split(".")[0] == top:
            found = ep
    dist = found.dist if found is not None else None
    return f"{dist.name}@{dist.version}" if dist is not None else None


def defender_code(name: str) -> dict[str, Any]:
    """The code identity of a registered defender: the modules of its factory and options
    class, a SHA-256 of their source files, and for a plug-in its distribution's
    ``name@version`` (medmis's own version is announced separately, never refused)."""
    from medmis.defenses import get_spec

    spec = get_spec(name)
    return _code_of(spec.factory, spec.options)


@functools.cache
def _code_of(factory: Any, options: type) -> dict[str, Any]:
    from medmis.defenses import DefenderOptions

    modules = [getattr(factory, "__module__", None)]
    if options is not DefenderOptions:  # the shared base class is no defender's own code
        modules.append(getattr(options, "__module__", None))
    roots = sorted({m for m in modules if m})
    names = _defender_modules(roots)
    digest = hashlib.sha256()
    hashed = []
    for name in names:
        path = _module_file(name)
        try:
            data = path.read_bytes() if path is not None else None
        except OSError:
            data = None
        if data is None:
            continue
        digest.update(name.encode() + b"\0" + data + b"\0")
        # a local --plugin file's module is named after its content hash (defenses._plugins)
        hashed.append("<local plug-in file>" if name.startswith("medmis_plugin_") else name)
    code: dict[str, Any] = {"modules": hashed, "sha256": digest.hexdigest() if hashed else None}
    dist = _plugin_distribution(roots[0]) if roots else None
    if dist:
        code["distribution"] = dist
    return code


def examinee_identity(model: Any) -> dict[str, Any]:
    """What a simulated model decides with: the identifying parameters it reports (for the
    simulated examinee: policy, the seed it uses, its rates, the answer key's digest), as
    JSON values. Whatever the model is built with and reports is covered, new knobs too."""
    asdict = getattr(model, "asdict", None)  # a chat model's identifying parameters (and its type)
    params = asdict() if callable(asdict) else None
    if not isinstance(params, Mapping):
        return {}
    params = {k: v for k, v in params.items() if k != "_type"}
    return json.loads(json.dumps(dict(params), default=str, sort_keys=True))


def web_tool_endpoints(search: str, visit: str, corpus_dir: str | None = None) -> dict[str, str]:
    """The web tools' backends with the server each talks to (the option's environment
    variable, else the service's default), credentials stripped; the local corpus by the
    sha256 of its documents (:func:`medmis.tools.corpus_digest`), since a changed corpus
    changes every answer a search defender gives."""
    from medmis.tools import (
        JINA_DEFAULT_BASE_URL,
        SERPER_DEFAULT_BASE_URL,
        TAVILY_DEFAULT_BASE_URL,
        corpus_digest,
    )

    servers = {
        "tavily": ("TAVILY_BASE_URL", TAVILY_DEFAULT_BASE_URL),
        "serper": ("SERPER_BASE_URL", SERPER_DEFAULT_BASE_URL),
        "jina": ("JINA_BASE_URL", JINA_DEFAULT_BASE_URL),
    }
    out = {}
    for role, backend in (("search", search), ("visit", visit)):
        if backend in servers:
            variable, default = servers[backend]
            url = (os.environ.get(variable) or "").strip() or default
            out[role] = f"{backend}@{bare_url(url.rstrip('/'))}"
        elif backend == "local" and role == "search":
            out[role] = f"local@sha256:{corpus_digest(corpus_dir)}"
        else:
            out[role] = backend
    return out


@functools.cache
def medmis_identity() -> dict[str, str | None]:
    """medmis's version and, when known, the commit it was installed from (``+dirty`` when
    a checkout has uncommitted changes)."""
    try:
        version: str | None = metadata.version("medmis")
    except metadata.PackageNotFoundError:
        version = None
    return {"version": version, "commit": _commit()}


def _commit() -> str | None:
    root = Path(__file__).resolve().parents[2]  # experiments/harness/ -> the source tree
    if (root / ".git").exists():
        return _git_commit(root)
    try:  # a non-editable install from a VCS URL records its commit
        text = metadata.distribution("medmis").read_text("direct_url.json")
        info = json.loads(text or "{}").get("vcs_info") or {}
    except (metadata.PackageNotFoundError, ValueError):
        return None
    commit = info.get("commit_id")
    return str(commit) if commit else None


def _git_commit(root: Path) -> str | None:
    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10,
                              stdin=subprocess.DEVNULL, check=False)

    try:
        head = git("rev-parse", "HEAD")
        if head.returncode != 0:
            return None
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    commit = head.stdout.strip()
    return commit + ("+dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")


def describe_medmis(identity: Mapping[str, Any] | None) -> str:
    """``0.1.0 (commit 0123456789ab+dirty)`` for an announcement line."""
    if not identity:
        return "unknown"
    version = str(identity.get("version") or "unknown version")
    commit = str(identity.get("commit") or "")
    if not commit:
        return version
    dirty = "+dirty" if commit.endswith("+dirty") else ""
    return f"{version} (commit {commit.removesuffix('+dirty')[:12]}{dirty})"
