"""qosched.core.spec_reader: each kind of field, accepted and refused, with file, line and field."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qosched.core.bounds import COUNT_LIMIT, LATEST_TIME_S
from qosched.core.errors import InputError
from qosched.core.spec_reader import MAX_DURATION_S, SpecReader, format_duration

LINES = {"": 1, "spec": 2, "spec.work": 3, "spec.command": 5, "spec.command[1]": 6}
READER = SpecReader("job.yaml", LINES)
NOW = datetime(2026, 1, 1, tzinfo=UTC).timestamp()


def refused(call, *args, **kwargs) -> InputError:
    with pytest.raises(InputError) as caught:
        call(*args, **kwargs)
    return caught.value


# --- where errors point ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "line"),
    [
        ("spec.work", 3),
        ("spec.work.iterations", 3),  # missing: its mapping's line
        ("spec.command[1]", 6),
        ("spec.command[2]", 5),  # beyond the list: the list's line
        ("spec.command[1].x", 6),
        ("other", 1),
    ],
    ids=["known", "missing-key", "list-item", "missing-item", "below-an-item", "top"],
)
def test_line_is_the_nearest_enclosing_field(path, line):
    assert READER.line(path) == line


def test_an_error_reads_file_line_field():
    error = READER.error("spec.command[1]", "bad")
    assert str(error) == "job.yaml:6: field 'spec.command[1]': bad"


def test_a_reader_without_lines_names_the_field_alone():
    error = SpecReader("stored").error("spec.seed", "bad")
    assert (str(error), error.line) == ("stored: field 'spec.seed': bad", None)


# --- mappings --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("deadlin", "unknown key 'deadlin'; did you mean 'deadline'? (valid keys: work, deadline)"),
        ("WORK", "unknown key 'WORK'; did you mean 'work'? (valid keys: work, deadline)"),
        ("gpus", "unknown key 'gpus' (valid keys: work, deadline)"),
    ],
    ids=["typo", "case", "nothing-close"],
)
def test_an_unknown_key_is_named_with_a_suggestion(key, message):
    error = refused(READER.mapping, {key: 1}, "spec", ("work", "deadline"))
    assert (error.field, error.reason) == (f"spec.{key}", message)


@pytest.mark.parametrize(
    ("value", "message"),
    [([1], "expected a mapping, got a list"), ({1: "a"}, "keys must be strings, got 1")],
    ids=["list", "int-key"],
)
def test_a_mapping_must_be_one_with_string_keys(value, message):
    assert refused(READER.mapping, value, "spec", ("a",)).reason == message


@pytest.mark.parametrize("data", [{}, {"work": None}], ids=["missing", "null"])
def test_required_names_the_missing_key(data):
    error = refused(READER.required, data, "spec", "work")
    assert (error.field, error.line, error.reason) == (
        "spec.work",
        3,
        "required; it is missing or null",
    )


# --- counts and numbers ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [(1, 1), (12.0, 12), (COUNT_LIMIT - 1, COUNT_LIMIT - 1)],
    ids=["one", "whole-float", "largest"],
)
def test_whole_accepts(value, expected):
    assert READER.whole(value, "spec.work", 1) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, "expected a whole number >= 1, got 0"),
        (True, "expected a whole number >= 1, got true"),
        ("12", "expected a whole number >= 1, got '12'"),
        (None, "expected a whole number >= 1, got null"),
        (4.5, "expected a whole number >= 1, got 4.5"),
        (math.nan, "expected a whole number >= 1, got nan"),
        (COUNT_LIMIT, f"expected a whole number below 2**53, got {COUNT_LIMIT}"),
        (10**400, "expected a whole number below 2**53, got a 401-digit number"),
    ],
    ids=["below-minimum", "bool", "text", "null", "fraction", "nan", "2^53", "401-digits"],
)
def test_whole_refuses(value, message):
    error = refused(READER.whole, value, "spec.work", 1)
    assert (error.reason, error.line, error.source) == (message, 3, "job.yaml")


def test_whole_with_a_maximum_says_the_range():
    error = refused(READER.whole, 9, "n", 1, 8)
    assert error.reason == "expected a whole number <= 8, got 9"


@pytest.mark.parametrize(
    ("value", "expected"),
    [(2, 2.0), (0.5, 0.5), ("1.0e9", 1e9), ("-2.5E-3", -2.5e-3)],
    ids=["int", "float", "yaml-1.2-exponent", "signed-exponent"],
)
def test_number_accepts_numbers_and_yaml_1_2_float_text(value, expected):
    assert READER.number(value, "x") == expected


@pytest.mark.parametrize(
    "value",
    [math.inf, -math.inf, math.nan, 10**400, True, "fast", "inf", "1_000", None],
    ids=["inf", "-inf", "nan", "401-digits", "bool", "word", "inf-text", "underscore", "null"],
)
def test_number_refuses(value):
    assert refused(READER.number, value, "x").field == "x"


@pytest.mark.parametrize("value", [0, -1, 0.0], ids=["zero", "negative", "zero-float"])
def test_positive_refuses_zero_and_below(value):
    assert "expected a positive number" in refused(READER.positive, value, "x").reason


def test_number_range_is_inclusive_and_named():
    assert READER.number(2, "x", minimum=1, maximum=2) == 2.0
    assert refused(READER.number, 3, "x", minimum=1, maximum=2).reason == (
        "expected a finite number in [1, 2], got 3"
    )


# --- text ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "phrase"),
    [
        ("", "non-empty string"),
        ("  ", "non-empty string"),
        (3, "non-empty string"),
        ("a\x00b", "NUL"),
        ("a\ud800", "not valid Unicode"),
    ],
    ids=["empty", "blank", "number", "nul", "lone-surrogate"],
)
def test_text_refuses(value, phrase):
    assert phrase in refused(READER.text, value, "metadata.name").reason


@pytest.mark.parametrize(
    ("value", "field", "phrase"),
    [
        ([], "spec.command", "expected a non-empty list of strings"),
        ("python x.py", "spec.command", "expected a non-empty list of strings"),
        (["python", 0.1], "spec.command[1]", "expected a string, got 0.1; quote it"),
        (["", "x"], "spec.command[0]", "expected the program to run"),
        (["python", "a\x00"], "spec.command[1]", "NUL"),
    ],
    ids=["empty", "string", "number-item", "empty-program", "nul"],
)
def test_strings_refuses(value, field, phrase):
    error = refused(READER.strings, value, "spec.command")
    assert error.field == field and phrase in error.reason


def test_boolean_and_one_of():
    assert READER.boolean(False, "b") is False
    assert refused(READER.boolean, "yes", "b").reason == "expected true or false, got 'yes'"
    assert READER.one_of("cnn", "w", ("cnn", "mlp")) == "cnn"
    assert refused(READER.one_of, "x", "w", ("cnn", "mlp")).reason == (
        "expected one of cnn, mlp, got 'x'"
    )
    assert refused(READER.one_of, "x", "w", ("cnn",), what="workload").reason == (
        "unknown workload 'x'; known: cnn"
    )


# --- durations, times, sizes -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1s", 1), ("90s", 90), ("1h30m", 5400), ("1d2h3m4s", 93784), ("0d1s", 1)],
)
def test_duration(text, seconds):
    assert READER.duration(text, "d") == seconds


@pytest.mark.parametrize(
    ("value", "phrase"),
    [
        ("0s", "at least 1s"),
        ("10", "expected a duration"),
        ("", "expected a duration"),
        (600, "expected a duration"),
        ("9" * 400 + "s", "at most"),
        (f"{MAX_DURATION_S + 1}s", "at most"),
    ],
    ids=["zero", "no-unit", "empty", "number", "400-digits", "past-9999"],
)
def test_duration_refuses(value, phrase):
    assert phrase in refused(READER.duration, value, "d").reason


def test_duration_maximum_is_inclusive_and_the_message_says_why():
    assert READER.duration("1m", "d", maximum=60) == 60
    error = refused(READER.duration, "61s", "d", maximum=60, why="a reason")
    assert error.reason == "expected a duration of at most 1m (a reason), got '61s'"


@given(st.integers(1, MAX_DURATION_S))
@settings(max_examples=50, deadline=None)
def test_format_duration_reads_back(seconds):
    assert READER.duration(format_duration(seconds), "d") == seconds


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-11-30T12:00:00Z", 1_796_040_000.0),
        ("2026-11-30T14:00:00+02:00", 1_796_040_000.0),
        (datetime(2026, 11, 30, 12, tzinfo=UTC), 1_796_040_000.0),
        ("9999-12-31T23:59:59Z", LATEST_TIME_S),
    ],
    ids=["utc-text", "offset-text", "yaml-timestamp", "last-second"],
)
def test_moment(value, expected):
    assert READER.moment(value, "t", after=NOW) == expected


@pytest.mark.parametrize(
    ("value", "phrase"),
    [
        ("9999-12-31T23:00:00-12:00", "outside 1970..9999 UTC"),
        ("1969-12-31T23:59:59Z", "outside 1970..9999 UTC"),
        ("0001-01-01T00:00:00+14:00", "outside 1970..9999 UTC"),
        ("2026-11-30T12:00:00", "no timezone"),
        ("2025-12-31T00:00:00Z", "not in the future"),
        ("soon", "ISO-8601"),
        (600, "write '600s'"),
        (datetime(2026, 11, 30).date(), "add a time and a timezone"),
    ],
    ids=["offset-past-9999", "before-1970", "year-1", "naive", "past", "word", "int", "date"],
)
def test_moment_refuses(value, phrase):
    assert phrase in refused(READER.moment, value, "t", after=NOW).reason


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2Gi", 2 * 2**30),
        ("1.5Ki", 1536),
        ("1024", 1024),
        (1, 1),
        ("8191Ti", 8191 * 2**40),
        # Kubernetes' decimal suffixes, exponents and milli-units, exact.
        ("2G", 2_000_000_000),
        ("500M", 500_000_000),
        ("2k", 2_000),
        ("3T", 3_000_000_000_000),
        ("7P", 7_000_000_000_000_000),
        ("1.5Pi", 3 * 2**49),
        ("1e3", 1_000),
        ("1E3", 1_000),
        ("1.5e+3", 1_500),
        ("2.5e3", 2_500),
        ("2000m", 2),
        ("+1k", 1_000),
        (".5Ki", 512),
        ("5.Mi", 5 * 2**20),
        ("9007199254740991", 2**53 - 1),
    ],
)
def test_memory(value, expected):
    assert READER.memory(value, "m") == expected


@pytest.mark.parametrize(
    "value",
    ["2G", "500M", "2Gi", "1.5Pi", "1e3", "1.5e+3", "2000m", "+1k", ".5Ki", "5.Mi", "7P", "3T"],
)
def test_memory_agrees_with_the_kubernetes_client(value):
    # An independent reading of the same grammar (the official client's, in exact decimals).
    from kubernetes.utils import parse_quantity

    assert READER.memory(value, "m") == parse_quantity(value)


@pytest.mark.parametrize(
    ("value", "phrase"),
    [
        (0, "Gi"),
        ("2GB", "Gi"),
        ("1.5", "whole number of bytes"),
        ("0Ki", "at least 1 byte"),
        ("8192Ti", "below 2**53 bytes"),
        (COUNT_LIMIT, "below 2**53"),
        ("9" * 400, "at most 30 digits"),
        (True, "got true"),
        ("1500m", "whole number of bytes"),
        ("1e-3", "whole number of bytes"),
        ("1E", "below 2**53 bytes"),
        ("10P", "below 2**53 bytes"),
        ("1Ei", "below 2**53 bytes"),
        ("9007199254740992", "below 2**53 bytes"),
        ("-1k", "at least 1 byte"),
        ("1e99", "exponent within"),
        ("1e" + "9" * 400, "exponent within"),
        ("1e", "Gi"),
        ("2K", "Gi"),
        ("2 G", "Gi"),
        ("2.5e-3M", "Gi"),
    ],
    ids=[
        "zero",
        "decimal-unit",
        "half-byte",
        "zero-ki",
        "2^53",
        "2^53-int",
        "400-digits",
        "bool",
        "milli-fraction",
        "exponent-fraction",
        "exa",
        "10-peta",
        "exbi",
        "2^53-text",
        "negative",
        "huge-exponent",
        "400-digit-exponent",
        "bare-e",
        "capital-K",
        "space",
        "exponent-and-suffix",
    ],
)
def test_memory_refuses(value, phrase):
    assert phrase in refused(READER.memory, value, "m").reason
