"""qosched.core.yaml_lines: lines per field, and YAML that costs no more than its size to read."""

from __future__ import annotations

import pytest

from qosched.core.errors import InputError
from qosched.core.yaml_lines import MAX_DEPTH, MAX_SPEC_CHARS, load_with_lines, read_spec_file

# 342 bytes that expand to 9**9 (387 million) strings when aliases are followed.
BILLION_LAUGHS = "".join(
    [
        'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n',
        *(
            f"{name}: &{name} [{','.join([f'*{previous}'] * 9)}]\n"
            for previous, name in zip("abcdefgh", "bcdefghi", strict=True)
        ),
    ]
)


def refused(text: str) -> InputError:
    with pytest.raises(InputError) as caught:
        load_with_lines(text, "spec.yaml")
    assert caught.value.source == "spec.yaml"
    return caught.value


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_lines_name_every_path():
    data, lines = load_with_lines("a:\n  b: [1, {c: 2}]\nd: x\n", "s")
    assert data == {"a": {"b": [1, {"c": 2}]}, "d": "x"}
    assert lines == {"": 1, "a": 1, "a.b": 2, "a.b[0]": 2, "a.b[1]": 2, "a.b[1].c": 2, "d": 3}


def test_the_billion_laughs_are_refused_at_the_first_anchor():
    assert len(BILLION_LAUGHS) == 342
    error = refused(BILLION_LAUGHS)
    assert error.line == 1 and "anchors and aliases" in error.reason


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("a: &x [*x]\n", 1),
        ("a: 1\nb: &x {c: 1}\n", 2),
        ("a: 1\nb: *x\n", 2),
        ("a: &x 1\n", 1),
    ],
    ids=["recursive-alias", "anchor-on-a-mapping", "alias-alone", "anchor-on-a-scalar"],
)
def test_anchors_and_aliases_are_refused_with_their_line(text, line):
    error = refused(text)
    assert error.line == line and "anchors and aliases" in error.reason


@pytest.mark.parametrize(
    ("text", "tag"),
    [
        ("a: 1\nb: !!timestamp null\n", "!!timestamp"),
        ("a: 1\nb: !!bool maybe\n", "!!bool"),
        ("a: 1\nb: !!set {x: null}\n", "!!set"),
        ("a: 1\nb: !!python/object:os.system x\n", "!!python/object:os.system"),
        ("a: 1\nb: !custom x\n", "!custom"),
    ],
    ids=["timestamp-of-null", "bool-of-a-word", "set", "python-object", "local-tag"],
)
def test_explicit_tags_are_refused_with_their_line(text, tag):
    error = refused(text)
    assert error.line == 2 and f"tags ({tag})" in error.reason


def test_a_merge_key_is_refused():
    error = refused("a:\n  <<: {b: 1}\n")
    assert (error.field, error.line) == ("a.<<", 2)


def test_nesting_up_to_the_limit_is_read():
    data, _ = load_with_lines(nested(MAX_DEPTH), "s")
    for _ in range(MAX_DEPTH - 1):
        data = data[0]
    assert data == []


@pytest.mark.parametrize(
    "text",
    [nested(MAX_DEPTH + 1), nested(5000), "a: {" * 5000 + "}" * 5000, "- " * 5000 + "x"],
    ids=["one-too-deep", "5000-lists", "5000-mappings", "5000-block-items"],
)
def test_deeper_nesting_is_refused_naming_the_file(text):
    error = refused(text)
    assert "nested deeper" in str(error) or "nesting depth" in str(error)


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("a: 1\nb: 2026-13-45\n", 2),
        ("a: 2026-01-01 10:00:00+99:00\n", 1),
        ("a:\n  b: " + "9" * 5000 + "\n", 2),
    ],
    ids=["month-13", "offset-over-a-day", "5000-digit-integer"],
)
def test_scalars_python_cannot_build_are_yaml_errors_with_their_line(text, line):
    error = refused(text)
    assert error.line == line and "not valid YAML" in error.reason


def test_a_lone_surrogate_is_refused_with_its_line():
    error = refused("a: 1\nb: \ud800\n")
    assert error.line == 2 and "not valid Unicode" in error.reason


@pytest.mark.parametrize(
    ("text", "line", "character"),
    [
        ("\x00\x00machine: 1\n", 1, "#x0000"),
        ("a: 1\nb: \x07x\n", 2, "#x0007"),
        ("\u00e9\u00e9: 1\nb: 2\nc: \x1b[31m\n", 3, "#x001b"),  # after 2-byte characters
        ("a: 1\n\ufffe\n", 2, "#xfffe"),
    ],
    ids=["nul", "bell", "escape-after-accents", "not-a-character"],
)
def test_a_character_yaml_forbids_is_one_line_naming_its_line(text, line, character):
    # YAML's reader says so in two lines, with a position and no line.
    error = refused(text)
    assert error.line == line
    assert error.reason == (
        f"not valid YAML: unacceptable character {character}: control characters are not allowed"
    )
    assert "\n" not in str(error)


def test_text_over_the_limit_is_refused_before_parsing():
    assert "characters" in refused("#" * (MAX_SPEC_CHARS + 1)).reason
    load_with_lines("#" * MAX_SPEC_CHARS, "s")


def test_a_file_over_the_limit_is_refused(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("é" * (MAX_SPEC_CHARS + 1), encoding="utf-8")
    with pytest.raises(InputError, match="characters") as caught:
        read_spec_file(path, "job spec")
    assert caught.value.source == str(path)


def test_a_file_of_four_byte_characters_at_the_limit_is_read(tmp_path):
    path = tmp_path / "wide.yaml"
    path.write_text("#" + "\U0001f600" * (MAX_SPEC_CHARS - 1), encoding="utf-8")
    assert len(read_spec_file(path, "job spec")) == MAX_SPEC_CHARS


def test_the_read_error_names_the_file(tmp_path):
    with pytest.raises(InputError, match="cannot read job spec"):
        read_spec_file(tmp_path / "missing.yaml", "job spec")


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("a:\n  b: " + "9" * 5000 + "\n", 2),
        ("a: 1\nb: [1,\n  2,\n  " + "7" * 4400 + "]\nc: 3\n", 4),
        ("a: {b: 1,\n  c: -" + "1" * 6000 + "}\n", 2),
    ],
    ids=["block", "flow-list", "flow-mapping-negative"],
)
def test_a_number_of_thousands_of_digits_says_so_in_the_spec_authors_terms(text, line):
    error = refused(text)
    assert error.line == line
    assert "a number of" in error.reason and "digits; no field takes more than 30" in error.reason
    assert "set_int_max_str_digits" not in str(error)
