"""No function in src/qosched longer than a reader holds at once, none with more paths than a
reader can follow (issue 54, "Done means").

Each function (a method, a nested function) counts on its own: its lines from ``def`` to its
last line, docstring and comments included (``ast``), and its cyclomatic complexity as radon
counts it (a nested function's paths are its own, not its parent's). Data literals (argument
parsers, manifests) may be long, never complex: ``DATA_LITERALS`` lists them by name.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from radon.complexity import cc_visit

SRC = Path(__file__).resolve().parents[2] / "src"

MAX_LINES = 120
MAX_COMPLEXITY = 25

#: Functions that build one data literal, long because what they build is long: (module, name).
DATA_LITERALS = frozenset(
    {
        ("qosched.cli.local", "add_commands"),  # the local service's argument parser
        ("qosched.cli.k8s", "add_commands"),  # the k8s commands' argument parser
        ("qosched.backends.kubernetes.manifests", "deployment"),  # the scheduler's install
        ("qosched.backends.kubernetes.manifests", "job"),  # a job's objects
    }
)


@dataclass(frozen=True, slots=True)
class Shape:
    """One function: where it is, how long, how many paths."""

    module: str
    name: str  # qualified within its module: ``Class.method``, ``outer.inner``
    path: Path
    line: int
    lines: int
    complexity: int

    @property
    def key(self) -> tuple[str, str]:
        return (self.module, self.name)


def module_name(src: Path, path: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _functions(
    body: Iterable[ast.stmt], prefix: str = ""
) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function under ``body`` with its qualified name, nested ones included."""
    for node in body:
        if isinstance(node, ast.ClassDef):
            yield from _functions(node.body, f"{prefix}{node.name}.")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield f"{prefix}{node.name}", node
            yield from _functions(node.body, f"{prefix}{node.name}.")
        else:  # functions under if/try/with at any depth
            for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                yield from _functions(getattr(node, field, None) or [], prefix)


def _complexities(text: str) -> dict[int, int]:
    """Cyclomatic complexity by the line of each function's ``def`` (radon's count)."""
    found: dict[int, int] = {}
    blocks = [b for b in cc_visit(text) if not hasattr(b, "methods")]  # classes: their methods
    while blocks:
        block = blocks.pop()
        found[block.lineno] = block.complexity
        blocks.extend(block.closures)
    return found


def shapes(src: Path) -> list[Shape]:
    """Every function of every module under ``src``."""
    found = []
    for path in sorted(src.rglob("*.py")):
        text = path.read_text()
        tree = ast.parse(text, filename=str(path))
        complexity = _complexities(text)
        module = module_name(src, path)
        for name, node in _functions(tree.body):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            found.append(
                Shape(module, name, path, node.lineno, lines, complexity.get(node.lineno, 0))
            )
    return found


def offences(
    found: Iterable[Shape], *, literals: frozenset[tuple[str, str]] = frozenset()
) -> list[str]:
    """Each function over a limit, named with where it is and by how much."""
    said = []
    for shape in found:
        where = f"{shape.module}.{shape.name} ({shape.path.name}:{shape.line})"
        if shape.lines > MAX_LINES and shape.key not in literals:
            said.append(f"{where}: {shape.lines} lines, more than {MAX_LINES}")
        if shape.complexity > MAX_COMPLEXITY:
            said.append(
                f"{where}: cyclomatic complexity {shape.complexity}, more than {MAX_COMPLEXITY}"
            )
    return said


# The checker itself, on small trees whose offences are known by construction.


def _function(name: str, *, statements: int = 1, branches: int = 0, indent: str = "") -> str:
    """``def name(x):`` of ``statements`` + ``branches`` body lines (so 1 + both lines in all),
    complexity ``1 + branches``."""
    body = [f"{indent}    x += 1\n"] * statements + [
        f"{indent}    if x: x = {i}\n" for i in range(branches)
    ]
    return f"{indent}def {name}(x):\n" + "".join(body)


def _tree(tmp_path: Path, text: str) -> list[Shape]:
    package = tmp_path / "p"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "m.py").write_text(text)
    return [s for s in shapes(tmp_path) if s.module == "p.m"]


def test_the_limits_are_inclusive_and_each_offence_named(tmp_path):
    text = (
        _function("fits", statements=MAX_LINES - 1)
        + _function("too_long", statements=MAX_LINES)
        + _function("branchy", branches=MAX_COMPLEXITY - 1)
        + _function("too_branchy", branches=MAX_COMPLEXITY)
    )
    found = {s.name: s for s in _tree(tmp_path, text)}
    assert (found["fits"].lines, found["too_long"].lines) == (MAX_LINES, MAX_LINES + 1)
    assert (found["branchy"].complexity, found["too_branchy"].complexity) == (25, 26)
    assert offences(found.values()) == [
        f"p.m.too_long (m.py:{found['too_long'].line}): 121 lines, more than 120",
        f"p.m.too_branchy (m.py:{found['too_branchy'].line}): cyclomatic complexity 26, "
        "more than 25",
    ]


def test_methods_and_nested_functions_count_on_their_own(tmp_path):
    text = (
        "class A:\n"
        + _function("method", branches=MAX_COMPLEXITY, indent="    ")
        + "def outer(x):\n"
        + "    if x: x = 1\n"
        + _function("inner", branches=MAX_COMPLEXITY, indent="    ")
        + "    return inner\n"
        + "if True:\n"
        + _function("guarded", branches=MAX_COMPLEXITY, indent="    ")
    )
    found = {s.name: s.complexity for s in _tree(tmp_path, text)}
    assert found == {"A.method": 26, "outer": 2, "outer.inner": 26, "guarded": 26}


def test_a_data_literal_may_be_long_never_complex(tmp_path):
    text = _function("literal", statements=MAX_LINES, branches=MAX_COMPLEXITY)
    found = _tree(tmp_path, text)
    exempt = frozenset({("p.m", "literal")})
    assert offences(found, literals=exempt) == [
        f"p.m.literal (m.py:1): cyclomatic complexity 26, more than {MAX_COMPLEXITY}"
    ]


# The source tree.


@pytest.fixture(scope="module")
def source_shapes() -> list[Shape]:
    return shapes(SRC)


def test_no_function_is_too_long_or_too_complex(source_shapes):
    assert len(source_shapes) > 1000  # the tree was read
    said = offences(source_shapes, literals=DATA_LITERALS)
    assert not said, "functions over the limits (split them into named steps):\n" + "\n".join(said)


def test_every_exception_is_still_needed(source_shapes):
    by_key = {s.key: s for s in source_shapes}
    missing = sorted(DATA_LITERALS - by_key.keys())
    assert missing == [], "exceptions naming functions that are gone"
    # An exception no longer needed would let a long or complex function come back unnoticed.
    short = sorted(k for k in DATA_LITERALS if by_key[k].lines <= MAX_LINES)
    assert short == [], "DATA_LITERALS lists functions within the line limit"
