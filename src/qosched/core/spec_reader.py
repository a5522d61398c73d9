"""One way to read a spec: walk a loaded document (YAML through ``core.yaml_lines``, or JSON)
field by field, every number within ``core.bounds``, every error naming ``file:line: field
'a.b[2]'``.

Each spec module (training jobs, GPU-sharing apps, inference tenants) keeps its own shape and
its own dataclasses; what a field may hold and how a bad one is reported is written once, here.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

from qosched.core.bounds import (
    COUNT_LIMIT,
    LATEST_TIME_S,
    check_count,
    check_datetime,
    check_number,
    is_whole,
    show_value,
)
from qosched.core.errors import InputError
from qosched.core.goals import BEST_EFFORT, GOAL_KEYS, Goal, goal_from_key
from qosched.core.yaml_lines import join_path

_DURATION = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")
_DURATION_UNITS = (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1))
# Longest run of digits a duration or memory size may have: more is past every bound anyway, and
# int() refuses strings over 4300 digits with a ValueError.
_MAX_DIGITS = 30
# A Kubernetes quantity (apimachinery's resource.Quantity): a number, then a binary suffix, a
# decimal one or a decimal exponent. "1E" is one exabyte, "1E3" a thousand bytes.
_MEMORY = re.compile(
    r"([+-]?)(\d+(?:\.\d*)?|\.\d+)(?:(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)|[eE]([+-]?\d+))?"
)
_MEMORY_UNITS = {
    None: Fraction(1),
    "m": Fraction(1, 1000),
    **{unit: Fraction(1000**power) for power, unit in enumerate("kMGTPE", start=1)},
    **{f"{unit}i": Fraction(1024**power) for power, unit in enumerate("KMGTPE", start=1)},
}
# Past this a size is beyond 2**53 bytes, or below one byte, whatever its digits.
_MAX_EXPONENT = 60
MEMORY_FORMAT = (
    "a Kubernetes quantity like '512Mi', '2Gi', '500M', '2G' or '1e9' (suffixes Ki, Mi, Gi, "
    "Ti, Pi, Ei, k, M, G, T, P, E) or a whole number of bytes"
)
# YAML 1.2 floats; PyYAML follows YAML 1.1, which reads 1.0e9 (no exponent sign) as a string.
_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
#: The longest relative duration: from 1970 to the end of year 9999 UTC.
MAX_DURATION_S = int(LATEST_TIME_S)


def format_duration(seconds: int) -> str:
    """``5400 -> '1h30m'``: the shortest form ``SpecReader.duration`` reads back."""
    parts = []
    rest = seconds
    for unit, size in _DURATION_UNITS:
        count, rest = divmod(rest, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


def is_duration(value: Any) -> bool:
    """Whether ``value`` is written as a duration (``'90s'``, ``'1h30m'``), bounded or not."""
    return isinstance(value, str) and bool(value) and _DURATION.fullmatch(value) is not None


def text_problem(value: str) -> str | None:
    """Why ``value`` cannot be passed on as an argument, a file's text or a database string
    (a NUL character, a lone surrogate), or None."""
    if "\x00" in value:
        return "a NUL character cannot be passed on; remove it"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return f"{show_value(value)} is not valid Unicode text"
    return None


def unknown_key_message(key: str, allowed: Sequence[str]) -> str:
    """``unknown key 'x'; did you mean 'y'? (valid keys: ...)``."""
    # Compare lowercased so that 'mincpus' still suggests 'minCpus'.
    by_lower = {name.lower(): name for name in allowed}
    close = difflib.get_close_matches(key.lower(), list(by_lower), n=1, cutoff=0.6)
    hint = f"; did you mean {by_lower[close[0]]!r}?" if close else ""
    return f"unknown key {key!r}{hint} (valid keys: {', '.join(allowed)})"


class SpecReader:
    """Reads the fields of one document. ``lines`` maps dotted paths (``spec.command[1]``) to
    1-based lines, as ``core.yaml_lines.load_with_lines`` gives; empty for a document that has
    no file (a JSON body, a stored job), whose errors then name the field alone.

    Each method takes the value and its path and returns the value checked (and converted), or
    raises the InputError a user sees; none of them mutates the document.
    """

    def __init__(self, source: str | Path, lines: Mapping[str, int] | None = None) -> None:
        self.source = source
        self.lines: Mapping[str, int] = lines if lines is not None else {}

    # --- where -------------------------------------------------------------------------------

    def line(self, path: str) -> int | None:
        """The line of ``path``, or of its nearest enclosing field when it has none (a missing
        key)."""
        probe = path
        while probe and probe not in self.lines:
            probe = _parent(probe)
        return self.lines.get(probe)

    def error(self, path: str, message: str) -> InputError:
        return InputError(message, source=self.source, line=self.line(path), field=path or None)

    # --- structure ---------------------------------------------------------------------------

    def mapping(self, value: Any, path: str, allowed: Sequence[str]) -> dict[str, Any]:
        """A mapping whose keys are all strings among ``allowed`` (an unknown key gets a
        did-you-mean)."""
        if not isinstance(value, dict):
            raise self.error(path, f"expected a mapping, got {show_value(value)}")
        for key in value:
            if not isinstance(key, str):
                raise self.error(path, f"keys must be strings, got {show_value(key)}")
            if key not in allowed:
                raise self.error(join_path(path, key), unknown_key_message(key, allowed))
        return value

    def required(self, data: Mapping[str, Any], path: str, key: str) -> Any:
        """``data[key]``, which must be present and not null."""
        if data.get(key) is None:
            raise self.error(join_path(path, key), "required; it is missing or null")
        return data[key]

    def sequence(self, value: Any, path: str, *, what: str = "list") -> list[Any]:
        """A non-empty list (``what`` names its items in the message)."""
        if not isinstance(value, list) or not value:
            raise self.error(path, f"expected a non-empty {what}, got {show_value(value)}")
        return value

    # --- scalars -----------------------------------------------------------------------------

    def text(self, value: Any, path: str) -> str:
        """A non-empty string that can be written out again (no NUL, no lone surrogate)."""
        if not isinstance(value, str) or not value.strip():
            raise self.error(path, f"expected a non-empty string, got {show_value(value)}")
        return self.clean(value, path)

    def label(self, value: Any, path: str) -> str:
        """A `text` that is printed as a row of a table: printable characters only (a newline,
        a tab or a direction override would break the row or disguise the name)."""
        text = self.text(value, path)
        if not text.isprintable():
            bad = next(c for c in text if not c.isprintable())
            raise self.error(
                path, f"expected printable characters only, got {show_value(text)} ({bad!r})"
            )
        return text

    def clean(self, value: str, path: str) -> str:
        """``value``, refused when no file, argv or UTF-8 database could hold it."""
        problem = text_problem(value)
        if problem is not None:
            raise self.error(path, problem)
        return value

    def strings(self, value: Any, path: str) -> tuple[str, ...]:
        """A non-empty list of strings (an argv), its first one non-empty."""
        items = self.sequence(value, path, what="list of strings")
        for index, item in enumerate(items):
            where = f"{path}[{index}]"
            if not isinstance(item, str):
                raise self.error(
                    where, f"expected a string, got {show_value(item)}; quote it in the YAML"
                )
            self.clean(item, where)
        if not items[0]:
            raise self.error(f"{path}[0]", "expected the program to run, got ''")
        return tuple(items)

    def boolean(self, value: Any, path: str) -> bool:
        if not isinstance(value, bool):
            raise self.error(path, f"expected true or false, got {show_value(value)}")
        return value

    def one_of(self, value: Any, path: str, choices: Sequence[str], *, what: str = "") -> str:
        """One of ``choices``; ``what`` (``'workload'``) words the message as "unknown
        workload 'x'; known: ..." instead of "expected one of ...".

        """
        if isinstance(value, str) and value in choices:
            return value
        if what:
            message = f"unknown {what} {show_value(value)}; known: {', '.join(choices)}"
        else:
            message = f"expected one of {', '.join(choices)}, got {show_value(value)}"
        raise self.error(path, message)

    def whole(self, value: Any, path: str, minimum: int = 0, maximum: int = COUNT_LIMIT - 1) -> int:
        """A count: a whole number in ``[minimum, maximum]``, below 2**53."""
        return check_count(
            value,
            field=path,
            minimum=minimum,
            maximum=maximum,
            source=self.source,
            line=self.line(path),
        )

    def goal(self, value: Any, path: str) -> Goal:
        """A goal in the levels' one vocabulary (``core/goals.py``): ``best_effort``, or a
        mapping with exactly one of ``GOAL_KEYS`` and its number."""
        if value == "best_effort":
            return BEST_EFFORT
        keys = tuple(GOAL_KEYS)
        if not isinstance(value, dict):
            raise self.error(path, f"expected best_effort or a mapping with one of "
                             f"{', '.join(keys)}, got {show_value(value)}")  # fmt: skip
        fields = self.mapping(value, path, keys)
        if len(fields) != 1:
            raise self.error(path, f"give exactly one of {', '.join(keys)}, got "
                             f"{', '.join(map(str, fields)) or 'none'}")  # fmt: skip
        ((key, amount),) = fields.items()
        where = join_path(path, key)
        return goal_from_key(key, self.number(amount, where), field=where, source=self.source,
                             line=self.line(where))  # fmt: skip

    def number(
        self,
        value: Any,
        path: str,
        *,
        minimum: float = -math.inf,
        maximum: float = math.inf,
        positive: bool = False,
    ) -> float:
        """A finite number in ``[minimum, maximum]`` (``> 0`` when ``positive``). Text that is
        a number in YAML 1.2 (``1.0e9``) counts as one."""
        if isinstance(value, str) and _FLOAT.fullmatch(value.strip()):
            value = float(value)
        return check_number(
            value,
            field=path,
            minimum=minimum,
            maximum=maximum,
            positive=positive,
            source=self.source,
            line=self.line(path),
        )

    def positive(self, value: Any, path: str) -> float:
        """A finite number > 0."""
        return self.number(value, path, positive=True)

    # --- units -------------------------------------------------------------------------------

    def duration(
        self,
        value: Any,
        path: str,
        *,
        minimum: int = 1,
        maximum: int = MAX_DURATION_S,
        why: str = "",
    ) -> int:
        """Whole seconds written as ``'90s'``, ``'10m'``, ``'1h30m'``, ``'1d2h3m4s'``; ``why``
        says, in the message, why a longer one is refused."""
        if not is_duration(value):
            raise self.error(
                path, f"expected a duration like '90s', '10m' or '1h30m', got {show_value(value)}"
            )
        groups = _DURATION.fullmatch(value).groups()  # type: ignore[union-attr]
        if any(count is not None and len(count) > _MAX_DIGITS for count in groups):
            seconds = maximum + 1
        else:
            seconds = sum(
                int(count) * size
                for count, (_, size) in zip(groups, _DURATION_UNITS, strict=True)
                if count
            )
        if seconds < minimum:
            raise self.error(
                path, f"expected a duration of at least {format_duration(minimum)}, got {value!r}"
            )
        if seconds > maximum:
            raise self.error(
                path,
                f"expected a duration of at most {format_duration(maximum)}"
                f"{f' ({why})' if why else ''}, got {show_value(value)}",
            )
        return seconds

    def moment(
        self, value: Any, path: str, *, after: float | None = None, expected: str = ""
    ) -> float:
        """An ISO-8601 time with a timezone (text, or a timestamp YAML read itself), as Unix
        seconds within 1970..9999 UTC and later than ``after`` when given. ``expected`` words
        what the field accepts, for the message about anything else."""
        expected = expected or "an ISO-8601 time with a timezone like '2026-11-30T12:00:00Z'"
        if isinstance(value, datetime):
            moment = value
        elif isinstance(value, str):
            try:
                moment = datetime.fromisoformat(value)
            except ValueError:
                raise self.error(path, f"expected {expected}, got {value!r}") from None
        else:
            hint = "; write '600s' for seconds" if is_whole(value) else ""
            if isinstance(value, date):
                hint = "; add a time and a timezone"
            raise self.error(path, f"expected {expected}, got {show_value(value)}{hint}")
        if moment.tzinfo is None or moment.utcoffset() is None:
            raise self.error(
                path,
                f"{moment.isoformat()} has no timezone; add one, e.g. 'Z' for UTC or '+01:00'",
            )
        seconds = check_datetime(moment, field=path, source=self.source, line=self.line(path))
        if after is not None and seconds <= after:
            when = datetime.fromtimestamp(after, tz=UTC).isoformat()
            raise self.error(path, f"{moment.isoformat()} is not in the future (now is {when})")
        return seconds

    def memory(self, value: Any, path: str) -> int:
        """Bytes, from a whole number or a Kubernetes quantity (``'1.5Gi'``, ``'2G'``,
        ``'1e9'``), computed exactly: one that is not a whole number of bytes is refused."""
        if is_whole(value):
            if value < 1:
                raise self.error(path, f"expected {MEMORY_FORMAT}, got {value}")
            return self.whole(value, path, 1)
        match = _MEMORY.fullmatch(value) if isinstance(value, str) else None
        if match is None:
            raise self.error(path, f"expected {MEMORY_FORMAT}, got {show_value(value)}")
        sign, number, unit, exponent = match.groups()
        if len(number) > _MAX_DIGITS:
            raise self.error(path, f"expected at most {_MAX_DIGITS} digits, got {value!r}")
        if exponent is not None and abs(int(exponent[:_MAX_DIGITS])) > _MAX_EXPONENT:
            raise self.error(
                path,
                f"expected an exponent within -{_MAX_EXPONENT}..{_MAX_EXPONENT}, got {value!r}",
            )
        # Exact, not float: '1.5Gi' and '2.5e-3k' must come out as exact bytes.
        scale = _MEMORY_UNITS[unit] if exponent is None else Fraction(10) ** int(exponent)
        size = Fraction(number.rstrip(".") or "0") * scale * (-1 if sign == "-" else 1)
        if size.denominator != 1:
            raise self.error(path, f"{value!r} is not a whole number of bytes")
        if size < 1:
            raise self.error(path, f"expected {MEMORY_FORMAT} of at least 1 byte, got {value!r}")
        if size >= COUNT_LIMIT:
            raise self.error(path, f"expected a size below 2**53 bytes (8192Ti), got {value!r}")
        return int(size)


def _parent(path: str) -> str:
    """``a.b[2]`` -> ``a.b`` -> ``a`` -> ``""``."""
    cut = max(path.rfind("."), path.rfind("[") if path.endswith("]") else -1)
    return path[:cut] if cut > 0 else ""
