"""Fault injection for tests: ``QOSCHED_FAULT_AT=POINT:N[,POINT:N...]`` makes the service SIGKILL
itself the N-th time it passes ``POINT``, one of ``FAULT_POINTS`` (the kill-anywhere tests kill
it between each two steps of a launch, a re-size, a reap and a re-adoption)."""

from __future__ import annotations

import os
import signal

from qosched.core.errors import InputError
from qosched.core.validate import parse_int

#: ``QOSCHED_FAULT_AT=POINT:N``: the service SIGKILLs itself the N-th time it passes POINT.
FAULT_ENV = "QOSCHED_FAULT_AT"
FAULT_POINTS = (
    "intent",  # a launch intent committed; the runner not started yet
    "popen",  # the runner started; its launch not committed yet
    "launched",  # the launch committed
    "progress",  # a job's new progress samples committed
    "resize",  # allocation.json rewritten and the re-size committed
    "signal",  # SIGTERM sent to a runner (pre-emption, cancel, a failed job)
    "result",  # a completed job's result committed
    "reaped",  # an exited runner's job committed pre-empted, failed or cancelled
    "adopted",  # a live runner committed as its job's (after a restart)
)


class Faults:
    """The fault points armed by ``FAULT_ENV``; unknown points are refused, so a misspelt
    test cannot pass by never firing."""

    def __init__(self, text: str | None) -> None:
        self._at: dict[str, int] = {}
        self._seen: dict[str, int] = {}
        for part in (text or "").split(","):
            point, _, count = part.strip().partition(":")
            if not point:
                continue
            if point not in FAULT_POINTS:
                raise InputError(
                    f"unknown fault point {point!r}; known: {', '.join(FAULT_POINTS)}",
                    source="environment",
                    field=FAULT_ENV,
                )
            self._at[point] = parse_int(
                count or "1", field=FAULT_ENV, source="environment", minimum=1
            )

    def passed(self, point: str) -> None:
        if point not in self._at:
            return
        self._seen[point] = self._seen.get(point, 0) + 1
        if self._seen[point] == self._at[point]:
            os.kill(os.getpid(), signal.SIGKILL)
