"""A small discrete-event engine: a clock and a heap of events.

Events are ordered by ``(time, priority, sequence)``: earlier first, then lower priority value,
then the order in which they were scheduled, so equal-time events always fire in the same order.
The engine knows nothing about jobs, GPUs or kernels; simulators schedule callbacks on it.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class EmptySchedule(RuntimeError):
    """``step()`` was called with no event left to fire."""


@dataclass(eq=False, slots=True)
class Event:
    """A callback due at ``time``. Returned by :meth:`Engine.schedule`; cancel it, never fire it."""

    time: float
    priority: int
    sequence: int
    callback: Callable[[], Any]
    label: str = ""
    cancelled: bool = field(default=False)
    fired: bool = field(default=False)

    @property
    def pending(self) -> bool:
        return not (self.cancelled or self.fired)


class Engine:
    """Clock plus event heap. ``schedule`` / ``cancel`` / ``peek`` / ``step`` / ``run``."""

    def __init__(self, start: float = 0.0) -> None:
        if not math.isfinite(start):
            raise ValueError(f"start time must be finite, got {start!r}")
        self._now = float(start)
        self._heap: list[tuple[float, int, int, Event]] = []
        self._sequence = 0
        self._live = 0

    @property
    def now(self) -> float:
        return self._now

    def __len__(self) -> int:
        """Number of pending (not cancelled, not fired) events."""
        return self._live

    def schedule(
        self,
        callback: Callable[[], Any],
        *,
        delay: float | None = None,
        at: float | None = None,
        priority: int = 0,
        label: str = "",
    ) -> Event:
        """Schedule ``callback`` after ``delay`` seconds or at absolute time ``at`` (exactly one).

        Raises ValueError for a negative delay, a time in the past or a non-finite time.
        """
        if (delay is None) == (at is None):
            raise ValueError("give exactly one of delay= or at=")
        if delay is not None:
            if not math.isfinite(delay) or delay < 0:
                raise ValueError(f"delay must be finite and >= 0, got {delay!r} ({label})")
            time = self._now + delay
        else:
            if not math.isfinite(at):
                raise ValueError(f"event time must be finite, got {at!r} ({label})")
            if at < self._now:
                raise ValueError(f"cannot schedule {label!r} at {at} before now ({self._now})")
            time = float(at)
        event = Event(time, priority, self._sequence, callback, label)
        heapq.heappush(self._heap, (time, priority, self._sequence, event))
        self._sequence += 1
        self._live += 1
        return event

    def cancel(self, event: Event) -> None:
        """Cancel a pending event. Cancelling one that fired or was cancelled is a RuntimeError."""
        if event.fired:
            raise RuntimeError(f"event {event.label!r} at t={event.time} already fired")
        if event.cancelled:
            raise RuntimeError(f"event {event.label!r} at t={event.time} already cancelled")
        event.cancelled = True
        self._live -= 1

    def peek(self) -> float:
        """Time of the next pending event, or ``math.inf`` when there is none."""
        heap = self._heap
        while heap and heap[0][3].cancelled:
            heapq.heappop(heap)
        return heap[0][0] if heap else math.inf

    def step(self) -> None:
        """Advance the clock to the next pending event and fire it."""
        heap = self._heap
        while heap:
            time, _, _, event = heapq.heappop(heap)
            if event.cancelled:
                continue
            self._now = time
            event.fired = True
            self._live -= 1
            event.callback()
            return
        raise EmptySchedule("no pending events")

    def run(self, until: float | None = None) -> None:
        """Fire events until none is left, or until the next one is later than ``until``.

        With ``until`` the clock ends exactly at ``until`` (if it is not in the past).
        """
        if until is not None and math.isinf(until) and until > 0:
            until = None  # run everything; the clock stays at the last event
        if until is not None:
            if math.isnan(until) or math.isinf(until):
                raise ValueError(f"until must be a finite time, got {until!r}")
            if until < self._now:
                raise ValueError(f"until={until} is before now ({self._now})")
            while self.peek() <= until:
                self.step()
            self._now = float(until)
            return
        while self.peek() != math.inf:
            self.step()
