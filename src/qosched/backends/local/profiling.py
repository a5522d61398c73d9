"""Measuring a job's speed before its deadline is judged: the ``profiling`` state.

A job whose speed nothing on this machine has measured (a command with no remembered speeds
under its key, ``speed_memory``; a GPU job) is not judged on the placeholder prior, since a
promise made on a guess is no promise. When its policy promises deadlines and it has one, it
is **profiling** from submission: it runs, on workers nobody else is promised, long enough for
a speed with a band at each size it is measured at, and only then is it judged on what was
measured: guaranteed, run best effort (where its spec allows), or declined with the earliest
deadline that would be guaranteed. The iterations it runs meanwhile count toward the job.

The measurement (``sizes_to_measure``, ``next_step``):

- **Sizes**: the most workers it may take now (``most``, within its spec's bounds) and, where
  that is more than one and the job is re-sized in place (a CPU job without ``launcher``), one
  worker as well: two points of its speed curve, the rest of which keeps the prior's shape
  scaled to the nearest measured point (``speed_memory.remembered_curve``). It starts on the
  larger and is shrunk in place, which hands the other workers back at once.
- **Enough** at a size: at least ``MIN_OBSERVED_S`` of running over ``MIN_INTERVALS`` progress
  intervals, and the relative standard error of its speed there at most ``BAND``; or
  ``MAX_OBSERVED_S`` of running, whatever the spread (the band then says how sure it is).
- **Bounded**: judged at ``MAX_PROFILE_S`` after its runner started in any case, on what was
  measured by then; a job that reported no usable progress by then has no measured speed and
  is declined (or runs best effort when its spec allows): nothing is promised on a guess.

**Where it runs**: on workers no other job holds, or on workers taken back from jobs whose
guarantees survive it: before taking ``n`` workers from the pool, the service asks its policy
(``probe_job``) whether a job needing ``n`` workers for the whole ``MAX_PROFILE_S``, with
that as its deadline, would be guaranteed beside every job guaranteed now. While no size fits,
the job waits, profiling, and is asked about again at every decision.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from qosched.backends.local.speed_memory import (
    MIN_INTERVALS,
    MIN_OBSERVED_S,
    intervals_by_count,
)
from qosched.cluster.job import JobSpec
from qosched.cluster.state import JobState
from qosched.cluster.throughput import SpeedCurve

#: A size's speed is known once its relative standard error is at most this ...
BAND = 0.05
#: ... or once this much running was observed on it, whatever the spread.
MAX_OBSERVED_S = 20.0
#: Seconds after its runner starts at which a profiling job is judged, measured or not.
MAX_PROFILE_S = 60.0
#: What the service's decision is told the measurement costs on top (the start of its runner).
PROBE_SLACK_S = 5.0


@dataclass(frozen=True, slots=True)
class SizeSpeed:
    """What was measured on one worker count: iterations/s, its relative standard error, and
    the running observed over how many progress intervals."""

    rate: float
    relative_error: float
    observed_s: float
    intervals: int

    @property
    def enough(self) -> bool:
        """Measured long enough for a speed with a band (see the module docstring)."""
        if self.intervals < MIN_INTERVALS or self.observed_s < MIN_OBSERVED_S:
            return False
        return self.relative_error <= BAND or self.observed_s >= MAX_OBSERVED_S


def size_speeds(samples: Sequence[tuple[float, int, int]]) -> dict[int, SizeSpeed]:
    """Per worker count, the speed over ``(t, iteration, workers)`` samples in order: the
    iterations done over the time spent in ``speed_memory.intervals_by_count``; the error is
    the spread of the per-interval speeds (each weighted by its length) over the square root
    of their number."""
    speeds = {}
    for workers, intervals in intervals_by_count(samples).items():
        spent = sum(elapsed for elapsed, _ in intervals)
        done = sum(work for _, work in intervals)
        if done <= 0:
            continue
        rate = done / spent
        variance = sum(elapsed * (work / elapsed - rate) ** 2 for elapsed, work in intervals)
        spread = math.sqrt(variance / spent)
        error = spread / rate / math.sqrt(len(intervals)) if len(intervals) > 1 else math.inf
        speeds[workers] = SizeSpeed(rate, error, spent, len(intervals))
    return speeds


def sizes_to_measure(most: int, *, least: int, resized_in_place: bool) -> tuple[int, ...]:
    """The worker counts to measure, in order: ``most``, then ``least`` (at least one) where
    the job is re-sized in place and that is fewer."""
    if resized_in_place and max(1, least) < most:
        return (most, max(1, least))
    return (most,)


@dataclass(frozen=True, slots=True)
class Step:
    """What to do with a profiling job now: go on measuring, re-size it to ``resize_to``, or
    judge it (``judge``) on ``speeds``."""

    judge: bool = False
    resize_to: int | None = None
    why: str = ""


def next_step(
    sizes: Sequence[int],
    speeds: dict[int, SizeSpeed],
    holding: int,
    running_for_s: float,
) -> Step:
    """The next step for a job measured at ``sizes`` that holds ``holding`` workers, its runner
    started ``running_for_s`` ago, with ``speeds`` measured so far."""
    missing = [size for size in sizes if not (size in speeds and speeds[size].enough)]
    if not missing:
        return Step(judge=True, why="measured")
    if running_for_s >= MAX_PROFILE_S:
        return Step(judge=True, why=f"measured for {MAX_PROFILE_S:.0f} s")
    if holding in missing:
        return Step()
    return Step(resize_to=missing[0])


def probe_job(job_id: str, workers: int, now: float, *, resize_pause_s: float) -> JobState:
    """A job standing for a measurement on ``workers`` workers: it needs all of them for the
    whole of ``MAX_PROFILE_S`` (iterations are seconds on exactly that count) and has only
    that, plus its start, until its deadline. A policy that guarantees it can lend them."""
    length = MAX_PROFILE_S
    spec = JobSpec(
        job_id=job_id,
        submit_s=now,
        model="profiling",
        batch_size=1,
        iterations=max(1, math.ceil(length)),
        deadline_s=now + length + resize_pause_s + PROBE_SLACK_S,
        requested_workers=workers,
    )
    speeds = tuple(1.0 if count == workers else 0.0 for count in range(workers + 1))
    job = JobState(spec, SpeedCurve("profiling", 1, speeds, (workers,)))
    job.last_update_s = now
    return job
