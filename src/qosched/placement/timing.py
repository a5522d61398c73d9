"""One operator timed several times, and whether the time can be trusted enough to cache.

A time measured while something else ran on the same cores is too long, sometimes a hundredfold,
and a cached one poisons every later plan. Noise only ever adds time, so a measurement is judged
by two signs of a disturbance:

- **spread**: ``(second slowest - fastest) / fastest`` over the timed repeats (the fastest taken
  as at least ``SPREAD_FLOOR_S``). The slowest repeat is left out: one outlier among several
  (a page fault, an interrupt) is common on a quiet machine and the median already ignores it;
  two or more disturbed repeats move the median, and show here.
- **CPU share**: the CPU time the process got over the wall time of the repeats. A quiet CPU
  gives an operator all of the wall time (a share of 1, more with several threads); a busy one
  steals wall time, which the timer counts but the process never ran. Not measured on a GPU,
  whose host thread may sleep while it waits for the device.

A measurement is trusted when it has at least ``min_repeats`` repeats and passes both checks
(:class:`Trust`); :func:`measure` re-measures a doubted one a bounded number of times and, when
none is trusted, gives the fastest median with the doubt, for one plan but not for a cache.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

#: Below this, differences between repeats are the timer's and the dispatcher's jitter, not a
#: disturbance: a 0.1 us ``getitem`` varies tenfold on a quiet machine, and no plan notices.
SPREAD_FLOOR_S = 10e-6
#: Measurements of one operator before its time is taken as noisy (the first and re-measures).
DEFAULT_TRIES = 3


@dataclass(frozen=True)
class Sample:
    """One timed call: wall seconds, and the process's CPU seconds in them (None: not
    measured)."""

    wall_s: float
    cpu_s: float | None


#: Times one call of its argument. Injected into the profiler so that tests can play a busy
#: machine; the real ones are :func:`cpu_timer` and :func:`cuda_timer`.
Timer = Callable[[Callable[[], object]], Sample]


def cpu_timer(call: Callable[[], object]) -> Sample:
    cpu = time.process_time()
    start = time.perf_counter()
    call()
    wall = time.perf_counter() - start
    return Sample(wall, time.process_time() - cpu)


def cuda_timer(device: torch.device) -> Timer:
    """A timer fenced by ``torch.cuda.synchronize`` on ``device``; no CPU share."""

    def timed(call: Callable[[], object]) -> Sample:
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        call()
        torch.cuda.synchronize(device)
        return Sample(time.perf_counter() - start, None)

    return timed


def timer_for(device: torch.device) -> Timer:
    return cuda_timer(device) if device.type == "cuda" else cpu_timer


@dataclass(frozen=True)
class Timing:
    """An operator's time: the median of ``repeats`` timed calls, their spread and CPU share
    (see the module doc; ``cpu_share`` None where not measured)."""

    seconds: float
    repeats: int
    spread: float
    cpu_share: float | None

    @classmethod
    def of(cls, samples: list[Sample]) -> Timing:
        if not samples:
            raise ValueError("expected at least one timed call")
        walls = sorted(s.wall_s for s in samples)
        second_slowest = walls[-2] if len(walls) > 1 else walls[0]
        spread = (second_slowest - walls[0]) / max(walls[0], SPREAD_FLOOR_S)
        cpus = [s.cpu_s for s in samples]
        wall = sum(walls)
        share = None
        if all(c is not None for c in cpus) and wall > 0:
            share = sum(c for c in cpus if c is not None) / wall
        return cls(statistics.median(walls), len(samples), spread, share)


@dataclass(frozen=True)
class Trust:
    """When a :class:`Timing` may be cached (see the module doc)."""

    min_repeats: int = 3
    max_spread: float = 1.0
    min_cpu_share: float = 0.75

    def doubt(self, timing: Timing) -> str | None:
        """Why ``timing`` is not to be trusted, or None when it is."""
        if timing.repeats < self.min_repeats:
            return f"{timing.repeats} repeats: too few to tell an outlier from the time"
        if timing.spread > self.max_spread:
            return f"repeats spread {timing.spread:.2f}x the fastest (at most {self.max_spread:g})"
        if timing.cpu_share is not None and timing.cpu_share < self.min_cpu_share:
            return (
                f"the process got {timing.cpu_share:.0%} of the wall time (at least "
                f"{self.min_cpu_share:.0%}): the machine was busy"
            )
        return None


def time_call(call: Callable[[], object], timer: Timer, repeats: int) -> Timing:
    """``call`` once to warm up (first-call allocations, lazy initialisation), then timed
    ``repeats`` times."""
    timer(call)
    return Timing.of([timer(call) for _ in range(repeats)])


def measure(
    call: Callable[[], object],
    timer: Timer,
    repeats: int,
    trust: Trust,
    tries: int = DEFAULT_TRIES,
) -> tuple[Timing, str | None]:
    """The first trusted timing of ``call`` in at most ``tries`` measurements, with None; when
    none is trusted, the one with the fastest median (noise only adds time) and why the last was
    doubted."""
    if tries < 1:
        raise ValueError(f"expected tries >= 1, got {tries!r}")
    if repeats < trust.min_repeats:
        tries = 1  # never trusted: measuring again would not change that
    best: Timing | None = None
    doubt: str | None = None
    for _ in range(tries):
        timing = time_call(call, timer, repeats)
        doubt = trust.doubt(timing)
        if doubt is None:
            return timing, None
        if best is None or timing.seconds < best.seconds:
            best = timing
    assert best is not None
    return best, doubt
