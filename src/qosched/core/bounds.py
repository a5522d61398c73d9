"""The bounds every number from outside must respect: a spec, an API body, a progress line, an
annotation, a trace. Checked once at the boundary, so the core can do arithmetic on them freely.

Counts stay below 2**53, so that they are exact as floats (JSON numbers, SQLite REAL, the
predictor's arithmetic); times stay within year 9999 UTC, the last year ``datetime`` can show.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from qosched.core.errors import InputError

#: Counts (iterations, iterations done, workers, seeds, bytes) must be below this.
COUNT_LIMIT = 2**53
#: The last Unix second of year 9999 UTC: no time or deadline may lie beyond it.
LATEST_TIME_S = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()
#: The largest batch a model is built or estimated at: far past any serving batch, and small
#: enough that no model's tensor sizes overflow (at 2**52 images, a ResNet's input has more
#: elements than PyTorch can count).
MAX_BATCH = 65_536


def is_whole(value: Any) -> bool:
    """An ``int`` that is not a ``bool`` (YAML and JSON ``true`` load as ``bool``, a subclass of
    ``int``; a count of ``true`` iterations is a typo, not 1)."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_count(
    value: Any,
    *,
    field: str,
    minimum: int = 0,
    maximum: int = COUNT_LIMIT - 1,
    source: str | Path | None = None,
    line: int | None = None,
) -> int:
    """``value`` as a whole number in ``[minimum, maximum]``; InputError naming ``field``.

    A float with no fractional part (``12.0``, as JSON writers and traces produce) is accepted;
    ``12.5``, ``inf``, ``nan``, strings and booleans are not.
    """
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if not is_whole(value) or value < minimum:
        raise InputError(
            f"expected {_whole_range(minimum, maximum)}, got {show_value(value)}",
            source=source,
            line=line,
            field=field,
        )
    if value > maximum:
        limit = "below 2**53" if maximum == COUNT_LIMIT - 1 else f"<= {maximum}"
        raise InputError(
            f"expected a whole number {limit}, got {show_value(value)}",
            source=source,
            line=line,
            field=field,
        )
    return value


def check_number(
    value: Any,
    *,
    field: str,
    minimum: float = -math.inf,
    maximum: float = math.inf,
    positive: bool = False,
    source: str | Path | None = None,
    line: int | None = None,
) -> float:
    """``value`` as a finite float in ``[minimum, maximum]`` (and ``> 0`` when ``positive``);
    InputError naming ``field``. Booleans are refused; an int too large for a float is refused,
    not rounded."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(
            f"expected {_number_range(minimum, maximum, positive)}, got {show_value(value)}",
            source=source,
            line=line,
            field=field,
        )
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if (
        not math.isfinite(number)
        or not minimum <= number <= maximum
        or (positive and not number > 0)
    ):
        raise InputError(
            f"expected {_number_range(minimum, maximum, positive)}, got {show_value(value)}",
            source=source,
            line=line,
            field=field,
        )
    return number


def check_time(
    value: Any,
    *,
    field: str,
    source: str | Path | None = None,
    line: int | None = None,
) -> float:
    """A Unix time in seconds between 1970 and the end of year 9999 UTC."""
    return check_number(
        value, field=field, minimum=0.0, maximum=LATEST_TIME_S, source=source, line=line
    )


def check_datetime(
    moment: datetime,
    *,
    field: str,
    source: str | Path | None = None,
    line: int | None = None,
) -> float:
    """An aware ``datetime`` as Unix seconds, refused past year 9999 UTC (an offset can push
    ``9999-12-31T23:00:00-12:00`` into year 10000, which ``datetime`` cannot show)."""
    try:
        seconds = moment.timestamp()
    except (OverflowError, ValueError):
        seconds = math.inf
    if not 0.0 <= seconds <= LATEST_TIME_S:
        raise InputError(
            f"{moment.isoformat()} lies outside 1970..9999 UTC",
            source=source,
            line=line,
            field=field,
        )
    return seconds


def show_value(value: Any) -> str:
    """A value as an error message shows it: YAML and JSON words for null and booleans, the kind
    of a mapping or list, otherwise its repr cut at 60 characters (a 400-digit number included)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping" if value else "an empty mapping"
    if isinstance(value, list):
        return "a list" if value else "an empty list"
    if is_whole(value) and abs(value) >= 10**60:
        # repr() of an int over 4300 digits raises ValueError; its size is what matters here.
        digits = len(str(abs(value))) if abs(value) < 10**4000 else "thousands of"
        return f"a {digits}-digit number"
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def number_problem(exc: ValueError) -> str:
    """``exc``'s message for people: Python's refusal of an integer of over 4300 digits names
    an interpreter setting, which is nothing a spec's or a file's author can act on."""
    text = str(exc)
    if "integer string conversion" in text:
        digits = text.rpartition("value has ")[2].partition(" digits")[0]
        size = f"of {digits} digits" if digits.isdecimal() else "of thousands of digits"
        return f"a number {size}; no field takes more than 30"
    return text


def _whole_range(minimum: int, maximum: int) -> str:
    if maximum == COUNT_LIMIT - 1:
        return f"a whole number >= {minimum}"
    return f"a whole number in [{minimum}, {maximum}]"


def _number_range(minimum: float, maximum: float, positive: bool) -> str:
    low = "a positive" if positive and minimum <= 0 else "a finite"
    if minimum > -math.inf and not (positive and minimum <= 0):
        if maximum < math.inf:
            return f"{low} number in [{minimum:g}, {maximum:g}]"
        return f"{low} number >= {minimum:g}"
    if maximum < math.inf:
        return f"{low} number <= {maximum:g}"
    return f"{low} number"
