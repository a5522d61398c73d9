"""The service's machine use over its history: every ``SAMPLE_S`` the cores its jobs hold and
the cores' worth of CPU time their processes used since the last sample, kept in the store for
``KEEP_S`` (``GET /usage/history``, the page's "Machine use"), so the page shows what happened
before it was opened, not only what the open tab has seen.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: Seconds between two samples.
SAMPLE_S = 5.0
#: How long samples are kept: a day at one per SAMPLE_S is 17,280 rows.
KEEP_S = 86_400.0
#: The most samples kept whatever the clock does (a clock stepped back keeps old rows young).
MAX_SAMPLES = 20_000
#: The most points one answer carries: a day's samples are averaged into this many.
MAX_POINTS = 720


@dataclass(frozen=True, slots=True)
class UseSample:
    """At ``t``: ``allocated`` cores held by jobs, and ``used`` cores' worth of CPU time their
    processes spent per second since the sample before (None for the first: nothing to
    compare with)."""

    t: float
    allocated: float  # whole cores, but an average where samples were thinned
    used: float | None

    def to_json(self) -> list[float | None]:
        return [
            self.t,
            round(self.allocated, 3),
            None if self.used is None else round(self.used, 3),
        ]


class UseSampler:
    """Turns the CPU seconds of the jobs holding cores, read every ``every_s``, into samples.
    Called from the service's loop only (not thread-safe)."""

    def __init__(self, every_s: float = SAMPLE_S) -> None:
        if not 0 < every_s < math.inf:
            raise ValueError(f"every_s must be > 0 seconds, got {every_s!r}")
        self.every_s = every_s
        self._last_t: float | None = None
        self._last_cpu: dict[str, float] = {}

    def due(self, now: float) -> bool:
        # A clock that stepped back starts afresh rather than waiting until it catches up.
        last = self._last_t
        return last is None or now >= last + self.every_s or now < last

    def sample(self, now: float, held: Mapping[str, tuple[int, float]]) -> UseSample:
        """``held``: job id -> (cores it holds, CPU seconds its processes used so far)."""
        allocated = sum(cores for cores, _ in held.values())
        used = None
        if self._last_t is not None and now > self._last_t:
            # Only jobs alive at both samples: a job's first reading is its whole start-up.
            spent = sum(
                max(cpu - self._last_cpu[job_id], 0.0)
                for job_id, (_, cpu) in held.items()
                if job_id in self._last_cpu
            )
            used = spent / (now - self._last_t)
        self._last_t = now
        self._last_cpu = {job_id: cpu for job_id, (_, cpu) in held.items()}
        return UseSample(now, allocated, used)


def thin(samples: Sequence[UseSample], since: float, until: float, most: int) -> list[UseSample]:
    """At most ``most`` points over ``[since, until]``: the samples themselves when few enough,
    else each of ``most`` equal slices of time averaged (``used`` over the samples that have
    one), at the time of its last sample."""
    if most < 1:
        raise ValueError(f"most must be >= 1, got {most}")
    inside = [s for s in samples if since <= s.t <= until]
    if len(inside) <= most:
        return inside
    width = (until - since) / most
    slices: dict[int, list[UseSample]] = {}
    for sample in inside:
        slices.setdefault(min(int((sample.t - since) / width), most - 1), []).append(sample)
    points = []
    for group in slices.values():
        used = [s.used for s in group if s.used is not None]
        points.append(
            UseSample(
                group[-1].t,
                sum(s.allocated for s in group) / len(group),
                sum(used) / len(used) if used else None,
            )
        )
    return points
