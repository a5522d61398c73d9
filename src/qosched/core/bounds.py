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
    if not is_whole(value):
        raise InputError(
            f"expected a whole number in [{minimum}, {maximum}], got {_show(value)}",
            source=source,
            line=line,
            field=field,
        )
    if not minimum <= value <= maximum:
        raise InputError(
            f"expected a whole number in [{minimum}, {maximum}], got {_show(value)}",
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
    source: str | Path | None = None,
    line: int | None = None,
) -> float:
    """``value`` as a finite float in ``[minimum, maximum]``; InputError naming ``field``.
    Booleans are refused; an int too large for a float is refused, not rounded."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(
            f"expected a number, got {_show(value)}", source=source, line=line, field=field
        )
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number) or not minimum <= number <= maximum:
        raise InputError(
            f"expected a finite number in [{minimum:g}, {maximum:g}], got {_show(value)}",
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


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."
