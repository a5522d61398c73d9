"""YAML specs read with every field's line: parse once, keep the node tree, refuse duplicates.

Spec readers (training jobs, GPU-sharing apps) report errors as ``file:line: field 'a.b[2]'``;
this module gives them the data and a map from each dotted path to its 1-based line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from qosched.core.errors import InputError


def read_spec_file(path: str | Path, what: str) -> str:
    """A spec file's text; InputError naming the file (and ``what`` it is) when it cannot be
    read as UTF-8."""
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read {what}: {exc.strerror}", source=path) from exc
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text: {exc.reason}", source=path) from exc


def join_path(path: str, key: str) -> str:
    """``a.b`` from ``a`` and ``b``; the key alone at the top."""
    return f"{path}.{key}" if path else key


def load_with_lines(text: str, source: str | Path) -> tuple[Any, dict[str, int]]:
    """The document's data (as ``yaml.safe_load`` builds it) and the line of every dotted path
    (``""`` for the document). InputError with the line for invalid YAML or a duplicate key."""
    loader = yaml.SafeLoader(text)
    try:
        # Compose and construct in one pass, as yaml.safe_load does, keeping the node tree.
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise InputError(f"not valid YAML: {problem}", source=source, line=line) from exc
    finally:
        loader.dispose()
    lines: dict[str, int] = {}
    if node is not None:
        _record_lines(node, "", lines, source)
    return data, lines


def _record_lines(node: yaml.Node, path: str, lines: dict[str, int], source: str | Path) -> None:
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue  # a non-string key is reported by the reader, which sees its value
            key = key_node.value
            child = join_path(path, key)
            if key in seen and key != "<<":
                raise InputError(
                    f"duplicate key {key!r}; YAML would silently keep only the last one",
                    source=source,
                    line=key_node.start_mark.line + 1,
                    field=child,
                )
            seen.add(key)
            lines[child] = key_node.start_mark.line + 1
            _record_lines(value_node, child, lines, source)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _record_lines(item, f"{path}[{index}]", lines, source)


def show_value(value: Any) -> str:
    """A value as an error message shows it: YAML words for null and booleans, the kind of a
    mapping or list, otherwise its repr cut at 60 characters."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."
