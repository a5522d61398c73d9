"""Errors that carry their context: which file, line and field, or which job at what time."""

from __future__ import annotations

from pathlib import Path


class QoschedError(Exception):
    """Base class of every error qosched raises on purpose."""


class InputError(QoschedError, ValueError):
    """Bad input at the boundary (a file, a CLI flag, an API request).

    The message names where the problem is and what was expected, for example
    ``trace.csv:12: field 'batch_size': expected a positive integer, got '-3'``.
    """

    def __init__(
        self,
        message: str,
        *,
        source: str | Path | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.source = str(source) if source is not None else None
        self.line = line
        self.field = field
        self.reason = message
        where = ""
        if self.source is not None:
            where = self.source if line is None else f"{self.source}:{line}"
        if field is not None:
            where = f"{where}: field {field!r}" if where else f"field {field!r}"
        super().__init__(f"{where}: {message}" if where else message)


class SimulationError(QoschedError, RuntimeError):
    """An invariant broke during a simulation; the message says at what simulated time."""
