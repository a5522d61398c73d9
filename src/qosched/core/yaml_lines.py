"""YAML specs read with every field's line: parse once, keep the node tree, refuse duplicates.

Spec readers (``core.spec_reader``) report errors as ``file:line: field 'a.b[2]'``; this module
gives them the data and a map from each dotted path to its 1-based line.

A spec may come from anyone who can reach the API, so reading one costs time linear in its size:
anchors and aliases are refused (a few hundred bytes of nested aliases expand to billions of
nodes, and a recursive one never ends), nesting is limited to ``MAX_DEPTH`` (the composer
recurses once per level), and the text to ``MAX_SPEC_CHARS``. Explicit tags (``!!timestamp``,
``!!set``) are refused too: no spec needs one, and PyYAML's constructors fail on odd tagged
values with exceptions of every kind.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from qosched.core.bounds import number_problem
from qosched.core.errors import InputError

#: The most characters a spec may have. Specs are a few kilobytes; the costliest shape of this
#: size (bench/spec_yaml_cost.py) takes about 3 s to read on a busy 2-core machine. (The API's
#: body limit, 1 MiB, is every route's.)
MAX_SPEC_CHARS = 1 << 18
#: The deepest nesting of mappings and lists a spec may have (the specs need about five).
MAX_DEPTH = 100
_MERGE_TAG = "tag:yaml.org,2002:merge"


# libyaml's parser and composer when PyYAML has them (its wheels do): PyYAML's pure-Python scanner
# costs time proportional to size x nesting depth (over a minute for 1 MiB of nested brackets).
# libyaml also stops at 1,000 levels by itself, before _check_events sees the 101st.
_BaseLoader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BaseLoader):  # type: ignore[misc,valid-type]
    """The safe loader, with a value its constructors cannot build reported as a YAML error."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            # A scalar YAML resolves but Python refuses: 2026-13-45, a +99:00 offset, an integer
            # of over 4300 digits. (PyYAML's constructors raise the other kinds for explicitly
            # tagged values, which _check_events refuses first.)
            problem = number_problem(exc) if isinstance(exc, ValueError) else str(exc)
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read {node.value!r:.60}: {problem}", node.start_mark
            ) from exc


def _check_events(text: str) -> None:
    """Refuse anchors, aliases, explicit tags and deep nesting from the parser's events, before
    composing: iteratively, so neither a recursive alias nor 5,000 levels can recurse."""
    depth = 0
    for event in yaml.parse(text, Loader=_BaseLoader):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise yaml.composer.ComposerError(
                None,
                None,
                "anchors and aliases (&name, *name) are not accepted in a spec; "
                "write the value out in full",
                event.start_mark,
            )
        if getattr(event, "tag", None) is not None:
            tag = event.tag.replace("tag:yaml.org,2002:", "!!")
            raise yaml.composer.ComposerError(
                None,
                None,
                f"tags ({tag}) are not accepted in a spec; quote a value to make it text",
                event.start_mark,
            )
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(
                    None,
                    None,
                    f"nested deeper than {MAX_DEPTH} levels of mappings and lists",
                    event.start_mark,
                )
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def read_spec_file(path: str | Path, what: str) -> str:
    """A spec file's text; InputError naming the file (and ``what`` it is) when it cannot be
    read as UTF-8 or is longer than MAX_SPEC_CHARS."""
    path = Path(path)
    try:
        with path.open("rb") as file:
            # UTF-8 takes at most 4 bytes a character: read no more than a too-long spec needs.
            data = file.read(4 * MAX_SPEC_CHARS + 1)
    except OSError as exc:
        raise InputError(f"cannot read {what}: {exc.strerror}", source=path) from exc
    if len(data) > 4 * MAX_SPEC_CHARS:
        raise _too_long(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text: {exc.reason}", source=path) from exc
    if len(text) > MAX_SPEC_CHARS:
        raise _too_long(path)
    return text


def join_path(path: str, key: str) -> str:
    """``a.b`` from ``a`` and ``b``; the key alone at the top."""
    return f"{path}.{key}" if path else key


def load_with_lines(text: str, source: str | Path) -> tuple[Any, dict[str, int]]:
    """The document's data (as ``yaml.safe_load`` builds it) and the line of every dotted path
    (``""`` for the document). InputError with the line for invalid YAML, a duplicate key, an
    anchor or alias, nesting deeper than MAX_DEPTH; naming the file for text over
    MAX_SPEC_CHARS."""
    if len(text) > MAX_SPEC_CHARS:
        raise _too_long(source)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        # A lone surrogate (from a JSON escape like \ud800, or a str built in code): no parser
        # can read it, and libyaml's fails with this error rather than a YAML one.
        line = text.count("\n", 0, exc.start) + 1
        raise InputError(f"not valid Unicode text: {exc.reason}", source=source, line=line) from exc
    loader = _Loader(text)
    try:
        _check_events(text)
        node = loader.get_single_node()
        lines: dict[str, int] = {}
        if node is not None:
            # Before constructing, so a duplicate key is reported rather than silently merged.
            _record_lines(node, "", lines, source)
        data = loader.construct_document(node) if node is not None else None
    except yaml.reader.ReaderError as exc:
        # A character YAML does not allow (a NUL, a control character, U+FFFE): its str() is
        # two lines and it has no mark, only a position, in UTF-8 bytes for libyaml.
        data: str | bytes = text if _BaseLoader is yaml.SafeLoader else text.encode("utf-8")
        line = data.count("\n" if isinstance(data, str) else b"\n", 0, exc.position) + 1
        raise InputError(
            f"not valid YAML: unacceptable character #x{exc.character:04x}: {exc.reason}",
            source=source,
            line=line,
        ) from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"not valid YAML: {problem}", source=source, line=line) from exc
    finally:
        loader.dispose()
    return data, lines


def _too_long(source: str | Path) -> InputError:
    return InputError(
        f"the spec has over {MAX_SPEC_CHARS} characters; no spec needs that many", source=source
    )


def _record_lines(node: yaml.Node, path: str, lines: dict[str, int], source: str | Path) -> None:
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue  # a non-string key is reported by the reader, which sees its value
            key = key_node.value
            child = join_path(path, key)
            if key_node.tag == _MERGE_TAG:
                # Merge keys exist to repeat an anchored mapping, and anchors are refused.
                raise InputError(
                    "merge keys ('<<') are not accepted in a spec; write the keys out",
                    source=source,
                    line=key_node.start_mark.line + 1,
                    field=child,
                )
            if key in seen:
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
