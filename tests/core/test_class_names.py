"""One name per thing: no class name is defined twice in src/qosched (issue 54).

Classes are read from the source text (``ast``), nested and private ones included: two
``_App`` classes in two modules are two things a reader must tell apart by their path. A name
bound by assignment (an alias kept for an earlier public name) is no class definition.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


def class_definitions(src: Path) -> dict[str, list[str]]:
    """Class name -> where each class of that name is defined (``path:line``), in path order."""
    found: dict[str, list[str]] = {}
    for path in sorted(src.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        where = path.relative_to(src).as_posix()
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                found.setdefault(node.name, []).append(f"{where}:{node.lineno}")
    for places in found.values():
        places.sort(key=lambda place: (place.rpartition(":")[0], int(place.rpartition(":")[2])))
    return found


def defined_twice(definitions: Mapping[str, list[str]]) -> list[str]:
    """One line per class name defined more than once: the name and each place."""
    return [
        f"{name}: {', '.join(places)}"
        for name, places in sorted(definitions.items())
        if len(places) > 1
    ]


def test_the_check_names_each_class_defined_twice(tmp_path):
    files = {
        "p/__init__.py": "",
        "p/a.py": "class Plan:\n    pass\n\n\nclass Only:\n    class Inner:\n        pass\n",
        "p/b.py": "Alias = int\n\n\ndef f():\n    class Plan:\n        pass\n",
        "p/c/__init__.py": "class Inner:\n    pass\n",
    }
    for relative, text in files.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert defined_twice(class_definitions(tmp_path)) == [
        "Inner: p/a.py:6, p/c/__init__.py:1",
        "Plan: p/a.py:1, p/b.py:5",
    ]


def test_no_class_name_is_defined_twice_in_src():
    definitions = class_definitions(SRC)
    assert "LocalService" in definitions and len(definitions) > 300  # the tree was read
    twice = defined_twice(definitions)
    assert not twice, "class names defined more than once in src/qosched:\n" + "\n".join(twice)
