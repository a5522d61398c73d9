"""qosched.core.validate: text values from traces, CSV files and the environment."""

from __future__ import annotations

import pytest

from qosched.core.errors import InputError
from qosched.core.validate import parse_bool, parse_float, parse_int


@pytest.mark.parametrize(
    ("text", "expected"),
    [("12", 12), ("12.0", 12), ("-3", -3), ("9007199254740991", 2**53 - 1)],
    ids=["int", "whole-float", "negative", "largest"],
)
def test_parse_int_accepts(text, expected):
    assert parse_int(text, field="n") == expected


@pytest.mark.parametrize(
    ("text", "phrase"),
    [
        ("12.5", "whole number"),
        ("9007199254740992", "below 2**53"),
        ("9007199254740993", "below 2**53"),  # would read back as ...992 through a float
        ("-9007199254740992", "below 2**53"),
        ("1e400", "finite"),
        ("nan", "finite"),
        ("x", "expected a number"),
    ],
    ids=["fraction", "2^53", "2^53+1", "-2^53", "overflow", "nan", "word"],
)
def test_parse_int_refuses(text, phrase):
    with pytest.raises(InputError, match=phrase.replace("*", r"\*")) as caught:
        parse_int(text, field="n", source="t.csv", line=3)
    assert str(caught.value).startswith("t.csv:3: field 'n'")


def test_parse_float_and_bool():
    assert parse_float("0.5", field="x", positive=True) == 0.5
    with pytest.raises(InputError, match="positive"):
        parse_float("0", field="x", positive=True)
    assert (parse_bool("Yes", field="b"), parse_bool("0", field="b")) == (True, False)
    with pytest.raises(InputError):
        parse_bool("maybe", field="b")
