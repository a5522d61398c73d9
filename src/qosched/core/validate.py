"""Small parsers for values read at the boundary; each raises InputError with its context."""

from __future__ import annotations

import math
import re
from pathlib import Path

from qosched.core.bounds import COUNT_LIMIT
from qosched.core.errors import InputError

#: A decimal number as traces and tables write it, surrounding blanks allowed; ``nan`` and
#: ``inf`` pass, to be refused as not finite with that message.
_NUMBER = re.compile(
    r"\s*[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|nan|inf|infinity)\s*",
    re.ASCII | re.IGNORECASE,
)


def parse_float(
    text: str,
    *,
    field: str,
    source: str | Path | None = None,
    line: int | None = None,
    minimum: float | None = None,
    positive: bool = False,
) -> float:
    """A finite float, optionally ``>= minimum`` or ``> 0``, written as a decimal number in
    ASCII (Python's ``float`` also takes ``1_000`` and other scripts' digits, which no
    trace or table writes)."""
    try:
        if not _NUMBER.fullmatch(text):
            raise ValueError(text)
        value = float(text)
    except (TypeError, ValueError):
        raise InputError(
            f"expected a number, got {text!r}", source=source, line=line, field=field
        ) from None
    if not math.isfinite(value):
        raise InputError(
            f"expected a finite number, got {text!r}", source=source, line=line, field=field
        )
    if positive and value <= 0:
        raise InputError(
            f"expected a positive number, got {text!r}", source=source, line=line, field=field
        )
    if minimum is not None and value < minimum:
        raise InputError(
            f"expected a number >= {minimum:g}, got {text!r}", source=source, line=line, field=field
        )
    return value


def parse_int(
    text: str,
    *,
    field: str,
    source: str | Path | None = None,
    line: int | None = None,
    minimum: int | None = None,
) -> int:
    """An integer; ``'12.0'`` is accepted (traces write counts as floats), ``'12.5'`` is not,
    nor anything at or beyond 2**53 (where a float no longer holds every whole number)."""
    value = parse_float(text, field=field, source=source, line=line)
    if value != int(value):
        raise InputError(
            f"expected a whole number, got {text!r}", source=source, line=line, field=field
        )
    if abs(value) >= COUNT_LIMIT:
        raise InputError(
            f"expected a whole number below 2**53, got {text!r}",
            source=source,
            line=line,
            field=field,
        )
    result = int(value)
    if minimum is not None and result < minimum:
        raise InputError(
            f"expected a whole number >= {minimum}, got {text!r}",
            source=source,
            line=line,
            field=field,
        )
    return result


def parse_bool(
    text: str, *, field: str, source: str | Path | None = None, line: int | None = None
) -> bool:
    """``0/1``, ``true/false``, ``yes/no`` (any case)."""
    lowered = text.strip().lower()
    if lowered in {"1", "true", "yes"}:
        return True
    if lowered in {"0", "false", "no", ""}:
        return False
    raise InputError(
        f"expected 0/1 or true/false, got {text!r}", source=source, line=line, field=field
    )
