"""The shared bounds: hand-picked values on each side of every limit."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone

import pytest

from qosched.core.bounds import (
    COUNT_LIMIT,
    LATEST_TIME_S,
    check_count,
    check_datetime,
    check_number,
    check_time,
    show_value,
)
from qosched.core.errors import InputError


@pytest.mark.parametrize(
    "value, expected",
    [(0, 0), (12, 12), (12.0, 12), (2**53 - 1, 2**53 - 1)],
    ids=["zero", "int", "whole-float", "largest"],
)
def test_count_accepts(value, expected):
    assert check_count(value, field="n") == expected


@pytest.mark.parametrize(
    "value",
    [2**53, 10**400, 1e20, -1, 12.5, math.inf, math.nan, True, "12", None],
    ids=["2^53", "401-digits", "1e20", "negative", "fraction", "inf", "nan", "bool", "str", "none"],
)
def test_count_refuses(value):
    with pytest.raises(InputError, match="field 'n'"):
        check_count(value, field="n")


def test_count_names_file_and_line():
    with pytest.raises(InputError, match=r"^spec.yaml:7: field 'spec.work.iterations'"):
        check_count(0, field="spec.work.iterations", minimum=1, source="spec.yaml", line=7)


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, 10**400, False, "1"])
def test_number_refuses(value):
    with pytest.raises(InputError):
        check_number(value, field="x")


def test_number_bounds_are_inclusive():
    assert check_number(1, field="x", minimum=1, maximum=2) == 1.0
    assert check_number(2.0, field="x", minimum=1, maximum=2) == 2.0
    with pytest.raises(InputError):
        check_number(2.0001, field="x", minimum=1, maximum=2)


def test_time_limit_is_end_of_year_9999_utc():
    assert datetime.fromtimestamp(LATEST_TIME_S, tz=UTC).year == 9999
    with pytest.raises((ValueError, OverflowError)):
        datetime.fromtimestamp(LATEST_TIME_S + 1, tz=UTC)
    assert check_time(LATEST_TIME_S, field="t") == LATEST_TIME_S
    with pytest.raises(InputError):
        check_time(LATEST_TIME_S + 1, field="t")
    with pytest.raises(InputError):
        check_time(-1, field="t")


def test_datetime_pushed_past_9999_by_its_offset_is_refused():
    late = datetime(9999, 12, 31, 23, 0, tzinfo=timezone(timedelta(hours=-12)))
    with pytest.raises(InputError, match=r"outside 1970\.\.9999 UTC"):
        check_datetime(late, field="spec.deadline")
    fine = datetime(9999, 12, 31, 0, 0, tzinfo=UTC)
    assert check_datetime(fine, field="spec.deadline") == fine.timestamp()


def test_count_limit_is_exact_in_a_float():
    assert float(COUNT_LIMIT - 1) == COUNT_LIMIT - 1
    assert float(COUNT_LIMIT + 1) != COUNT_LIMIT + 1


@pytest.mark.parametrize(
    ("value", "shown"),
    [([], "an empty list"), ([1], "a list"), ({}, "an empty mapping"), ({"a": 1}, "a mapping")],
)
def test_show_value_says_when_a_list_or_mapping_is_empty(value, shown):
    # "expected a non-empty list, got a list" told the user nothing.
    assert show_value(value) == shown
