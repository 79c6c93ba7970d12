"""The package's import layout, read from the source with ``ast`` (nothing is imported).

Three rules, checked over every ``.py`` file of the five folders under their installed names
(``agents`` -> ``medmis.agents`` ...; the mapping is pyproject's ``package-dir``, so
``experiments/_pytest_plugin`` is ``medmis.testing``):

1. **No import circle between the project's files.** Every ``import`` / ``from ... import``
   statement is an edge from its file to the project file it names: ``from .x import f`` and
   ``import medmis.tools._x`` point at ``_x.py``; ``from . import _x`` points at ``_x.py`` when
   that module exists, else at the package's ``__init__.py``; ``from medmis.tools import f``
   points at ``tools/__init__.py``. Imports at module level and imports inside functions both
   count (a function-level import only moves the circle to run time); imports under
   ``if TYPE_CHECKING:`` do not (they never run). Dynamic imports (``importlib.import_module``
   in a package's lazy ``__getattr__``) are not statements and are not seen. Importing
   ``a.b.c`` also runs ``a/b/__init__.py``, but that implied edge is not counted: every module
   of a package would otherwise be in a circle with an ``__init__`` that re-exports it.

2. **A subpackage's private modules are its own.** A file in one subpackage may not import a
   ``_private`` module of another; it imports the name from that subpackage's ``__init__`` (its
   public face). The subpackages: ``medmis.agents``, ``medmis.tools``, ``medmis.graphs``,
   ``medmis.defenses``, ``medmis.testing``, each ``medmis.experiments.<sub>`` folder, and
   ``medmis.experiments``'s own top-level modules as one more.

3. **Every import points down the layers** (:data:`LAYERS`, bottom first: tools < agents <
   defenses < graphs < experiments.records < benchmark < harness < CLI plumbing < analysis <
   reporting < view/export/review < generate/ablation/bench < experiments' top-level modules <
   medmis.testing). The one dynamic import the layering allows, the registry's
   ``importlib.import_module("medmis.graphs")``, is not a statement and so not an edge.

A violation names the file and line, so a new one is found by running this test.
"""

from __future__ import annotations

import ast
import functools
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("agents", "tools", "graphs", "defenses", "experiments")


@dataclass(frozen=True)
class Edge:
    source: str  # module name of the importing file
    target: str  # module name of the imported project file
    path: str  # the importing file, relative to the repository
    line: int


def package_dirs(root: Path = ROOT) -> dict[Path, str]:
    """pyproject's ``package-dir``: folder -> installed package name."""
    with (root / "pyproject.toml").open("rb") as fh:
        mapping = tomllib.load(fh)["tool"]["setuptools"]["package-dir"]
    return {(root / folder).resolve(): name for name, folder in mapping.items()}


def project_modules(root: Path = ROOT) -> dict[str, Path]:
    """Every project module by its installed name (a package by its own name); a file is named
    after the most specific ``package-dir`` folder holding it (``experiments/_pytest_plugin`` is
    ``medmis.testing``)."""
    dirs = package_dirs(root)
    modules: dict[str, Path] = {}
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            home = max((d for d in dirs if path.resolve().is_relative_to(d)), key=lambda d: len(d.parts))
            parts = list(path.resolve().relative_to(home).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join([dirs[home], *parts])] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _statements(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Import statements anywhere in the file except under ``if TYPE_CHECKING:``."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:  # the ``else:`` branch does run
                visit(child)
            return
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def import_edges(modules: dict[str, Path], root: Path = ROOT) -> list[Edge]:
    edges: list[Edge] = []
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        rel = str(path.relative_to(root))
        for node in _statements(ast.parse(path.read_text(encoding="utf-8"), filename=rel)):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                origin = _resolve(module, is_package, node)
                targets = [
                    f"{origin}.{alias.name}" if f"{origin}.{alias.name}" in modules else origin
                    for alias in node.names
                ]
            for target in targets:
                # ``import medmis.tools._x.y`` names the deepest project module it reaches
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != module:
                    edges.append(Edge(module, target, rel, node.lineno))
    return edges


def import_cycles(edges: list[Edge]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    graph: dict[str, set[str]] = {}
    for edge in edges:
        graph.setdefault(edge.source, set()).add(edge.target)
        graph.setdefault(edge.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def strongconnect(node: str) -> None:
        # iterative: the graph is a few hundred modules, but recursion depth is not ours to spend
        work = [(node, iter(sorted(graph[node])))]
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        while work:
            current, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[current] = min(low[current], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[current])
            if low[current] == index[current]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == current:
                        break
                if len(component) > 1:
                    components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            strongconnect(node)
    return sorted(components)


def subpackage(module: str, modules: dict[str, Path]) -> str:
    """``medmis.experiments.harness._runner`` -> ``medmis.experiments.harness``; the top-level
    modules of ``medmis.experiments`` (and its ``__init__``) are the subpackage
    ``medmis.experiments``."""
    parts = module.split(".")
    if parts[1] != "experiments":
        return ".".join(parts[:2])
    if len(parts) >= 3 and f"medmis.experiments.{parts[2]}" in modules and modules[
        f"medmis.experiments.{parts[2]}"
    ].name == "__init__.py":
        return ".".join(parts[:3])
    return "medmis.experiments"


def private_crossings(edges: list[Edge], modules: dict[str, Path]) -> list[str]:
    found = []
    for edge in edges:
        home = subpackage(edge.target, modules)
        if home == subpackage(edge.source, modules):
            continue
        private = [part for part in edge.target[len(home) :].split(".") if part.startswith("_")]
        if private:
            found.append(f"{edge.path}:{edge.line}: imports {edge.target} (private to {home})")
    return sorted(set(found))


@functools.cache
def project_graph() -> tuple[dict[str, Path], list[Edge]]:
    """The project's modules and import edges, read once per process when a test first asks
    (not at collection, which every xdist worker does: parsing 47,000 lines takes 2 s)."""
    modules = project_modules()
    return modules, import_edges(modules)


def test_no_import_cycle_between_project_files() -> None:
    _, edges = project_graph()
    cycles = import_cycles(edges)
    lines = []
    for cycle in cycles:
        members = set(cycle)
        lines.append(" <-> ".join(cycle))
        lines += [
            f"    {e.path}:{e.line}: {e.source} -> {e.target}"
            for e in edges
            if e.source in members and e.target in members
        ]
    assert not cycles, "import circles:\n" + "\n".join(lines)


def test_no_private_module_imported_across_subpackages() -> None:
    modules, edges = project_graph()
    crossings = private_crossings(edges, modules)
    assert not crossings, "private modules imported from another subpackage:\n" + "\n".join(
        crossings
    )


# The checker itself, on small trees: each rule fails when it should.
def test_every_name_taken_from_a_public_face_is_there() -> None:
    """A lazy face (``_HOME`` + ``TYPE_CHECKING`` imports) can list a name for the type checker
    and miss it at run time: every ``from medmis.X import name`` of the project and its tests
    must resolve when it runs."""
    import importlib

    modules = project_modules()
    missing = []
    for path in [*modules.values(), *sorted((ROOT / "tests").rglob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in modules
                    and modules[node.module].name == "__init__.py"):
                continue
            face = importlib.import_module(node.module)
            for alias in node.names:
                if alias.name != "*" and not hasattr(face, alias.name):
                    try:  # a submodule taken by name (``from medmis import testing``)
                        importlib.import_module(f"{node.module}.{alias.name}")
                    except ImportError:
                        missing.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.module}.{alias.name}")
    assert not missing, "names a public face does not have:\n  " + "\n  ".join(missing)


def _write(root: Path, files: dict[str, str]) -> dict[str, Path]:
    modules = {}
    for name, text in files.items():
        parts = name.split(".")
        path = root.joinpath(*parts[1:]).with_suffix(".py")
        if name in {f.rpartition(".")[0] for f in files}:
            path = root.joinpath(*parts[1:], "__init__.py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        modules[name] = path
    return modules


@pytest.mark.parametrize(
    ("a_text", "expect_cycle"),
    [
        ("from ._b import g\n", True),
        ("def f():\n    from ._b import g\n", True),  # a function-level import still counts
        ("from . import _b\n", True),
        ("import medmis.x._b\n", True),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ._b import g\n", False),
        ("import typing\nif typing.TYPE_CHECKING:\n    from ._b import g\n", False),
        ("from ._c import h\n", False),
    ],
)
def test_checker_finds_cycles(tmp_path: Path, a_text: str, expect_cycle: bool) -> None:
    modules = _write(
        tmp_path,
        {
            "medmis.x": "",
            "medmis.x._a": a_text,
            "medmis.x._b": "from ._a import f\n",
            "medmis.x._c": "h = 1\n",
        },
    )
    assert bool(import_cycles(import_edges(modules, tmp_path))) is expect_cycle


def test_checker_names_private_crossings(tmp_path: Path) -> None:
    modules = _write(
        tmp_path,
        {
            "medmis.tools": "from ._store import RecordStore\n",
            "medmis.tools._store": "class RecordStore: ...\n",
            "medmis.experiments": "",
            "medmis.experiments._cli": "from medmis.tools import RecordStore\n",
            "medmis.experiments.harness": "",
            "medmis.experiments.harness._runner": (
                "from medmis.tools._store import RecordStore\n"
                "from .._cli import x\n"
                "from medmis.experiments import harness\n"
            ),
        },
    )
    found = private_crossings(import_edges(modules, tmp_path), modules)
    assert [line.split(": ", 1)[1] for line in found] == [
        "imports medmis.tools._store (private to medmis.tools)",  # line 1
        "imports medmis.experiments._cli (private to medmis.experiments)",  # line 2
    ]
    assert all(line.startswith("experiments/harness/_runner.py:") for line in found)


# --- 3. Layers read bottom-up -----------------------------------------------------------------

LAYERS: tuple[tuple[str, ...], ...] = (
    ("medmis.tools",),
    ("medmis.agents",),
    ("medmis.defenses",),
    ("medmis.graphs",),
    ("medmis.experiments.records",),
    ("medmis.experiments.benchmark",),
    ("medmis.experiments.harness",),
    # the shared CLI plumbing (argument types, request flags, the CLI error) the subcommands'
    # parsers build on; it names the harness's acceptable fingerprint changes
    ("medmis.experiments._errors", "medmis.experiments._argtypes", "medmis.experiments._cli_flags",
     "medmis.experiments.cli_args"),
    ("medmis.experiments.analysis", "medmis.experiments.grading"),
    ("medmis.experiments.reporting",),
    ("medmis.experiments.view", "medmis.experiments.export", "medmis.experiments.review"),
    ("medmis.experiments.generate", "medmis.experiments.ablation", "medmis.experiments.bench",
     "medmis.experiments.shards"),
    ("medmis.experiments",),  # the CLI, the API and the rest of the top-level modules
    ("medmis.testing",),
)
"""The layer order, bottom first: a module may import its own layer and the ones below.

``tools`` (errors, web tools, stores) < ``agents`` (models) < ``defenses`` (the defender
contract: CaseView, Answer, prompts, answer reading, DefenderContext, the registry) <
``graphs`` (every built-in defender) < the experiment pipeline, itself ordered: ``records``
(run folders, LangChain-free) < ``benchmark`` (dataset, protocols) < ``harness`` (runs) <
CLI plumbing < ``analysis`` < ``reporting`` < ``view`` / ``export`` / ``review`` <
``generate`` / ``ablation`` / ``bench`` < ``medmis.experiments``'s top-level modules (``cli``,
``api``) < ``medmis.testing`` (the pytest plug-in).

Allowed by name (:data:`UPWARD_ALLOWED`): none as statements. The registry reaches the
built-ins above it with one ``importlib.import_module(BUILTINS_PACKAGE)`` in
``defenses/_base.py``, which is not an import statement and so not an edge here.
"""

UPWARD_ALLOWED: frozenset[tuple[str, str]] = frozenset({
    # the contract kit drives a defender the way a run does, over dataset items and cases
    # (``toy_item``, ``toy_case``); it sits with the tests at the top of the stack
    ("medmis.defenses.testing", "medmis.experiments.benchmark"),
})


def layer_of(module: str, modules: dict[str, Path]) -> int:
    """The index in :data:`LAYERS` of the most specific entry naming ``module`` or a parent."""
    best, rank = -1, -1
    for i, names in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > best:
                best, rank = len(name), i
    if rank < 0:
        raise ValueError(f"{module} is in no layer of LAYERS")
    return rank


def upward_imports(edges: list[Edge], modules: dict[str, Path]) -> list[str]:
    found = []
    for edge in edges:
        if (edge.source, subpackage(edge.target, modules)) in UPWARD_ALLOWED:
            continue
        if layer_of(edge.target, modules) > layer_of(edge.source, modules):
            found.append(f"{edge.path}:{edge.line}: {edge.source} imports {edge.target}, a layer above it")
    return sorted(set(found))


def test_every_import_points_down_the_layers() -> None:
    modules, edges = project_graph()
    upward = upward_imports(edges, modules)
    assert not upward, "imports that point up the layers:\n" + "\n".join(upward)


def test_checker_names_upward_imports(tmp_path: Path) -> None:
    modules = _write(
        tmp_path,
        {
            "medmis.defenses": "from ._base import defender\n",
            "medmis.defenses._base": "def defender(): ...\n",
            "medmis.graphs": "from medmis.defenses import defender\n",
            "medmis.defenses._context": "x = 1\nfrom medmis.graphs import y\n",
        },
    )
    found = upward_imports(import_edges(modules, tmp_path), modules)
    assert found == [
        "defenses/_context.py:2: medmis.defenses._context imports medmis.graphs, a layer above it"
    ]
