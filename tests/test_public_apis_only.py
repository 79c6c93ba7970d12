"""One process, one event loop, other libraries' public APIs only: read from the source with ``ast``.

Over every ``.py`` file of the five package folders (nothing is imported):

1. **No process machinery**: no call or import of ``os.fork``, ``os._exit``, ``gc.freeze``,
   ``atexit._run_exitfuncs`` or ``asyncio._set_running_loop``, and no ``MEDMIS_*`` environment
   switch (a string constant naming one).
2. **No private name of another library**: no ``from <lib> import _x``, no import of a private
   module (``langchain_core._api``), and no underscore attribute reached through a name bound to
   one of those libraries (``types.GenerateContentResponse._from_response``), for LangChain,
   LangGraph, httpx, httpx2, openai, anthropic, google-genai, aiohttp and Ray. One shim is allowed, in
   :data:`SHIM` (the batch result parsing, which says why in its code).
3. **No private attribute of another object**: ``x._name`` only through ``self``, ``cls`` or
   ``super()`` (a LangChain model's ``_agenerate``, another module's ``_cells``, the harness's
   ``_trace_file`` all count), except namedtuple's public ``_replace``/``_asdict``/``_fields``
   and the few uses :data:`OWN_PRIVATE` lists with their reasons.

A violation names the file and line.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("agents", "tools", "graphs", "defenses", "experiments")
LIBRARIES = ("langchain", "langchain_core", "langchain_openai", "langchain_anthropic", "langgraph",
             "httpx", "httpx2", "openai", "anthropic", "google.genai", "aiohttp", "ray")
FORBIDDEN_CALLS = {("os", "fork"), ("os", "_exit"), ("gc", "freeze"), ("atexit", "_run_exitfuncs"),
                   ("asyncio", "_set_running_loop")}
SHIM = {"experiments/harness/_batch_model.py"}
"""The one file allowed private names of those libraries: a provider batch job's results come
back as JSON that only the SDKs' private parsers turn into their response objects."""


NAMEDTUPLE_API = frozenset({"_replace", "_asdict", "_fields", "_make"})
OWN_PRIVATE = {
    # the batch shim (see SHIM): the adapters' request builders and parsers
    ("experiments/harness/_batch_model.py", "_get_request_payload"),
    ("experiments/harness/_batch_model.py", "_prepare"),
    ("experiments/harness/_batch_model.py", "_result"),
    ("experiments/harness/_batch_model.py", "_from_response"),
    # the replica model's cache key and tracing parameters are its first member's; LangChain has
    # no public accessor for either (said in agents/_replicas.py)
    ("agents/_replicas.py", "_get_llm_string"),
    ("agents/_replicas.py", "_get_ls_params"),
    # a classmethod filling the private fields of the instance of its own class it builds
    ("experiments/analysis/_metrics.py", "_units"),
    ("experiments/analysis/_metrics.py", "_identical"),
    ("experiments/analysis/_metrics.py", "_cells"),
    # the standard library's type of a sub-parser table (argparse has no public name for it)
    ("experiments/generate/_cli.py", "_SubParsersAction"),
}
"""``(file, attribute)``: the private attributes read through another object, each with its reason."""


def foreign_private(path: Path, rel: str, allowed: set[tuple[str, str]] = OWN_PRIVATE) -> list[tuple[str, str]]:
    """Rule 3: each ``x._name`` where ``x`` is not ``self``, ``cls`` or ``super()``, as
    ``(location, attribute)``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=rel)):
        if not isinstance(node, ast.Attribute) or not _private(node.attr) or node.attr in NAMEDTUPLE_API:
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
            continue
        if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super":
            continue
        if (rel, node.attr) not in allowed:
            found.append((f"{rel}:{node.lineno}: {ast.unparse(node)}", node.attr))
    return found


def _library(module: str) -> bool:
    return any(module == lib or module.startswith(lib + ".") for lib in LIBRARIES)


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _root_and_chain(node: ast.Attribute) -> tuple[str | None, list[str]]:
    chain: list[str] = []
    current: ast.expr = node
    while isinstance(current, ast.Attribute):
        chain.append(current.attr)
        current = current.value
    return (current.id if isinstance(current, ast.Name) else None), chain[::-1]


def violations(path: Path, rel: str) -> list[str]:
    """What ``path`` does that the two rules forbid, one line each."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
    found: list[str] = []
    bound: dict[str, str] = {}  # local name -> the module or object of a library it names
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in ("os", "gc", "atexit", "asyncio"):
                    bound[alias.asname or alias.name] = alias.name
                if _library(alias.name):
                    bound[alias.asname or alias.name.split(".")[0]] = alias.name
                    if any(_private(part) for part in alias.name.split(".")):
                        found.append(f"{rel}:{node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                if (node.module, alias.name) in FORBIDDEN_CALLS:
                    found.append(f"{rel}:{node.lineno}: from {node.module} import {alias.name}")
            if _library(node.module):
                if any(_private(part) for part in node.module.split(".")):
                    found.append(f"{rel}:{node.lineno}: from {node.module} import ...")
                for alias in node.names:
                    if _private(alias.name):
                        found.append(f"{rel}:{node.lineno}: from {node.module} import {alias.name}")
                    bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            root, chain = _root_and_chain(node)
            if root is None or root not in bound:
                continue
            if (bound[root], chain[0]) in FORBIDDEN_CALLS:
                found.append(f"{rel}:{node.lineno}: {root}.{chain[0]}")
            elif _library(bound[root]) and any(_private(part) for part in chain):
                found.append(f"{rel}:{node.lineno}: {root}.{'.'.join(chain)}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("MEDMIS_"):
            found.append(f"{rel}:{node.lineno}: environment switch {node.value}")
    return sorted(set(found))


def _files() -> list[tuple[Path, str]]:
    return [(path, path.relative_to(ROOT).as_posix())
            for folder in FOLDERS for path in sorted((ROOT / folder).rglob("*.py"))]


def test_the_packages_use_one_process_and_public_apis_only() -> None:
    found = [v for path, rel in _files() if rel not in SHIM for v in violations(path, rel)]
    assert not found, "\n".join(found)


def test_no_private_attribute_is_read_through_another_object() -> None:
    found = [where for path, rel in _files() for where, _ in foreign_private(path, rel)]
    assert not found, "\n".join(found)
    # an allowance nobody uses any more is removed, so that it cannot cover a new use
    used = {(rel, attr) for path, rel in _files() for _, attr in foreign_private(path, rel, set())}
    assert used >= OWN_PRIVATE, sorted(OWN_PRIVATE - used)


def test_the_shim_still_needs_its_allowance() -> None:
    # an allowance nobody uses any more is removed, so that it cannot cover a new use
    for rel in SHIM:
        assert violations(ROOT / rel, rel), f"{rel} no longer uses a private name: drop it from SHIM"


@pytest.mark.parametrize(("source", "expected"), [
    ("async def f(model):\n    return await model._agenerate([])\n", "model._agenerate"),
    ("def f(harness):\n    return harness._trace_file('m', 'd')\n", "harness._trace_file"),
    ("class A:\n    def f(self):\n        return self._x + super()._y()\n", None),
    ("def f(row):\n    return row._replace(a=1)\n", None),
])
def test_rule_three_finds_a_private_attribute_of_another_object(tmp_path: Path, source: str,
                                                                expected: str | None) -> None:
    path = tmp_path / "probe.py"
    path.write_text(source, encoding="utf-8")
    found = [where for where, _ in foreign_private(path, "probe.py")]
    assert (not found) if expected is None else any(expected in v for v in found), found


@pytest.mark.parametrize(("source", "expected"), [
    ("import os\nos.fork()\n", "os.fork"),
    ("import os as o\no._exit(0)\n", "o._exit"),
    ("import gc\ngc.freeze()\n", "gc.freeze"),
    ("import atexit\natexit._run_exitfuncs()\n", "atexit._run_exitfuncs"),
    ("import asyncio\nasyncio._set_running_loop(None)\n", "asyncio._set_running_loop"),
    ("from os import fork\n", "from os import fork"),
    ("import os\nos.environ.get('MEDMIS_FAST_EXIT')\n", "environment switch MEDMIS_FAST_EXIT"),
    ("from langchain_core.language_models._utils import _normalize_messages\n", "_utils import"),
    ("from langchain_core.language_models.chat_models import _gen_info_and_msg_metadata\n",
     "import _gen_info_and_msg_metadata"),
    ("from langchain_core._api import suppress_langchain_beta_warning\n", "from langchain_core._api"),
    ("import httpx\nclient = httpx.AsyncClient()\nclient._cookies = None\n", None),
    ("import httpx\nhttpx._client.AsyncClient\n", "httpx._client.AsyncClient"),
    ("from google.genai import types\ntypes.GenerateContentResponse._from_response({})\n",
     "types.GenerateContentResponse._from_response"),
    ("import aiohttp\naiohttp.ClientSession()\n", None),
    ("import os\nos.getpid()\n", None),
])
def test_the_checker_finds_what_it_forbids(tmp_path: Path, source: str, expected: str | None) -> None:
    path = tmp_path / "probe.py"
    path.write_text(source, encoding="utf-8")
    found = violations(path, "probe.py")
    if expected is None:
        assert not found, found
    else:
        assert found and any(expected in v for v in found), found
