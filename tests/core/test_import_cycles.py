"""No import cycle in src/qosched, and every package imports only the layers below it.

The graph is built from the source text (``ast``), not by importing it: every ``import`` and
``from ... import`` counts wherever it stands (module level, inside a function, under
``TYPE_CHECKING``), because a late import only hides a cycle, it does not remove it. An import
names the qosched module it resolves to (``from a.b import c`` names ``a.b.c`` where that is a
module, ``a.b`` otherwise) and the packages that enclose it, whose ``__init__`` runs first; a
package's ``__init__`` is a module like any other. The packages that enclose the importing module
itself are not counted: they are being imported already when it runs. So a package's
``__init__`` may import (re-export) its own submodules; a submodule that imports its package's
``__init__`` by name closes a cycle like any other import.

The layers (docs/ARCHITECTURE.md, "Layers and imports"): a package imports only packages of a
lower layer, never a sibling of its own layer.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

#: Layer by package, lowest first. ``qosched`` is the package's own ``__init__`` (its version).
LAYERS: dict[str, int] = {
    "qosched": 0,
    "qosched.core": 0,  # errors, bounds, spec reading, registries, timelines: what all share
    "qosched.backends": 0,  # its empty __init__, run by every import of a backend
    "qosched.sim": 1,  # the event engine
    "qosched.hardware": 1,
    "qosched.graph": 1,
    "qosched.workloads": 1,
    "qosched.cluster": 2,  # the three levels: none imports another
    "qosched.placement": 2,
    "qosched.gpushare": 2,
    "qosched.trainingjob": 2,  # a job's spec and runner protocol, shared by backends and job
    "qosched.report": 3,  # figures of the levels' results
    "qosched.colocate": 3,  # the GPU level's estimates as the cluster level's sharing model
    "qosched.backends.local": 3,  # the backends run the cluster level
    "qosched.backends.kubernetes": 3,
    "qosched.job": 3,  # what a job's script calls
    "qosched.integrations": 4,  # training-library callbacks over qosched.job
    "qosched.cli": 5,
    "qosched.__main__": 6,
}


def module_files(src: Path) -> dict[str, Path]:
    """Every module under ``src`` by dotted name; a package by its own name (its __init__)."""
    found = {}
    for path in sorted(src.rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _named(module: str, known: Mapping[str, Path]) -> str | None:
    """The longest known module that ``module`` is or lies in (None: not one of ours)."""
    while module and module not in known:
        module = module.rpartition(".")[0]
    return module or None


def _targets(name: str, is_package: bool, node: ast.AST, known: Mapping[str, Path]) -> set[str]:
    if isinstance(node, ast.Import):
        return {t for alias in node.names if (t := _named(alias.name, known))}
    if not isinstance(node, ast.ImportFrom):
        return set()
    if node.level:
        base = name.split(".") if is_package else name.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        source = ".".join([*base, *([node.module] if node.module else [])])
    else:
        source = node.module or ""
    found = set()
    for alias in node.names:
        submodule = f"{source}.{alias.name}"
        target = submodule if submodule in known else _named(source, known)
        if target:
            found.add(target)
    return found


def _with_packages(target: str, importer: str, known: Mapping[str, Path]) -> set[str]:
    """``target`` and each package enclosing it whose __init__ the import runs: those that do
    not also enclose ``importer``."""
    names = {target}
    parts = target.split(".")
    for end in range(1, len(parts)):
        package = ".".join(parts[:end])
        if package in known and not (importer + ".").startswith(package + "."):
            names.add(package)
    return names


def import_graph(src: Path) -> dict[str, set[str]]:
    """Module -> the modules of ``src`` it imports (see the module docstring for what counts)."""
    known = module_files(src)
    graph = {}
    for name, path in known.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        is_package = path.name == "__init__.py"
        edges = set()
        for node in ast.walk(tree):
            for target in _targets(name, is_package, node, known):
                edges |= _with_packages(target, name, known)
        edges.discard(name)
        graph[name] = edges
    return graph


def strongly_connected(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The groups of modules that reach each other, more than one module each (Tarjan's
    algorithm, iterative), each sorted, in the order of their first module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups = []
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return sorted(groups)


def a_cycle(graph: Mapping[str, set[str]], group: list[str]) -> list[str]:
    """The shortest cycle through the group's first module, as ``[a, b, ..., a]``."""
    start, members = group[0], set(group)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node] & members):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if child not in came_from:
                    came_from[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"no cycle through {start} in {group}")


def describe_cycles(graph: Mapping[str, set[str]]) -> list[str]:
    """Each cycle as one line: a shortest cycle, and every module of its group."""
    return [
        " -> ".join(a_cycle(graph, group)) + f"  (modules in this cycle: {', '.join(group)})"
        for group in strongly_connected(graph)
    ]


def package_of(module: str) -> str:
    """The package of ``LAYERS`` that ``module`` belongs to."""
    parts = module.split(".")
    if len(parts) >= 3 and parts[1] == "backends":
        return ".".join(parts[:3])
    return ".".join(parts[:2])


def package_graph(graph: Mapping[str, set[str]]) -> dict[str, set[str]]:
    packages: dict[str, set[str]] = {}
    for module, targets in graph.items():
        mine = package_of(module)
        packages.setdefault(mine, set()).update(
            package_of(t) for t in targets if package_of(t) != mine
        )
    return packages


def layer_violations(graph: Mapping[str, set[str]]) -> list[str]:
    """Each import of a package of the same or a higher layer."""
    found = []
    for module, targets in sorted(graph.items()):
        mine = package_of(module)
        for target in sorted(targets):
            theirs = package_of(target)
            if theirs == mine:
                continue
            if LAYERS[theirs] >= LAYERS[mine]:
                found.append(
                    f"{module} imports {target}: {mine} is layer {LAYERS[mine]}, "
                    f"{theirs} layer {LAYERS[theirs]}"
                )
    return found


# The checker itself, on small trees whose cycles are known by construction.


def write_tree(root: Path, files: Mapping[str, str]) -> Path:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


CYCLE_CASES = {
    "late import in a function": (
        {
            "p/__init__.py": "",
            "p/a.py": "from p.b import f\n",
            "p/b.py": "def f():\n    from p.c import g\n",
            "p/c.py": "import p.a\n",
        },
        ["p.a -> p.b -> p.c -> p.a  (modules in this cycle: p.a, p.b, p.c)"],
    ),
    "under TYPE_CHECKING": (
        {
            "p/__init__.py": "",
            "p/a.py": "import typing\nif typing.TYPE_CHECKING:\n    from p.b import B\n",
            "p/b.py": "from p import a\n",
        },
        ["p.a -> p.b -> p.a  (modules in this cycle: p.a, p.b)"],
    ),
    "relative imports": (
        {
            "p/__init__.py": "",
            "p/q/__init__.py": "",
            "p/q/a.py": "from . import b\n",
            "p/q/b.py": "from ..r import c\n",
            "p/r.py": "from .q.a import x\n",
        },
        ["p.q.a -> p.q.b -> p.r -> p.q.a  (modules in this cycle: p.q.a, p.q.b, p.r)"],
    ),
    "through the __init__ of the package imported from": (
        {
            "p/__init__.py": "",
            "p/a.py": "from p.reg.base import create\n",
            "p/reg/__init__.py": "from p.reg import impl\n",
            "p/reg/base.py": "",
            "p/reg/impl.py": "from p.a import x\n",
        },
        ["p.a -> p.reg -> p.reg.impl -> p.a  (modules in this cycle: p.a, p.reg, p.reg.impl)"],
    ),
    "a submodule importing its own package's __init__ by name": (
        {
            "p/__init__.py": "from p.a import x\n",
            "p/a.py": "from p import y\n",
        },
        ["p -> p.a -> p  (modules in this cycle: p, p.a)"],
    ),
    "an __init__ re-exporting its submodules is no cycle": (
        {
            "p/__init__.py": "from p.a import x\nfrom p.b import y\n",
            "p/a.py": "from p.b import y\n",
            "p/b.py": "import os\nimport numpy\n",
        },
        [],
    ),
}


@pytest.mark.parametrize("files, expected", CYCLE_CASES.values(), ids=CYCLE_CASES)
def test_the_checker_finds_each_kind_of_cycle(tmp_path, files, expected):
    graph = import_graph(write_tree(tmp_path, files))
    assert describe_cycles(graph) == expected


def test_layer_violations_name_the_import():
    graph = {
        "qosched.core.a": {"qosched.cluster.b"},
        "qosched.cluster.b": {"qosched.core.a"},
        "qosched.placement.c": {"qosched.gpushare.d", "qosched.placement.e"},
        "qosched.cli.f": {"qosched.cluster.b"},
        "qosched.job": {"qosched.trainingjob.protocol", "qosched.backends.local.store"},
    }
    assert layer_violations(graph) == [
        "qosched.core.a imports qosched.cluster.b: qosched.core is layer 0, "
        "qosched.cluster layer 2",
        "qosched.job imports qosched.backends.local.store: qosched.job is layer 3, "
        "qosched.backends.local layer 3",
        "qosched.placement.c imports qosched.gpushare.d: qosched.placement is layer 2, "
        "qosched.gpushare layer 2",
    ]


# The source tree.


@pytest.fixture(scope="module")
def graph():
    return import_graph(SRC)


def test_no_module_imports_itself_back(graph):
    assert "qosched.cli.main" in graph and len(graph) > 100  # the tree was read
    cycles = describe_cycles(graph)
    assert not cycles, "import cycles in src/qosched:\n" + "\n".join(cycles)


def test_no_package_imports_itself_back(graph):
    cycles = describe_cycles(package_graph(graph))
    assert not cycles, "import cycles between packages:\n" + "\n".join(cycles)


def test_packages_import_only_lower_layers(graph):
    unplaced = sorted(set(package_graph(graph)) - set(LAYERS))
    assert unplaced == [], "packages without a layer in LAYERS"
    violations = layer_violations(graph)
    assert not violations, "imports against the layers:\n" + "\n".join(violations)
