"""One operator timed several times, and whether the time can be trusted enough to cache.

A time measured while something else ran on the same cores is too long, sometimes a hundredfold,
and a cached one poisons every later plan. Noise only ever adds time, so a measurement is judged
by two signs of a disturbance:

- **spread**: ``(second slowest - fastest) / fastest`` over the timed repeats (the fastest taken
  as at least ``SPREAD_FLOOR_S``). The slowest repeat is left out: one outlier among several
  (a page fault, an interrupt) is common on a quiet machine and the median already ignores it;
  two or more disturbed repeats move the median, and show here.
- **wait share**: how long a thread of the process sat on a run queue, ready but with no core
  to run on, over the wall time of the repeats (Linux's per-thread ``schedstat``; of each call,
  the thread that waited longest, since a parallel operator ends with its slowest thread). A
  busy machine steals wall time, which the timer counts but the process never ran. Uniform
  stealing leaves no spread; this sees it. Not measured on a GPU (its timer waits for the
  device) nor where the kernel does not report it.

Neither the CPU time the process got nor the load average tells this: a 1x1 convolution on two
threads was timed at 32 ms (a hundredfold) with the process at 99.7% CPU, its first thread
spinning at the end of the operator for a second thread that waited 32 ms for its core; and the
load average counts cores the process is not pinned to, over a minute.

A measurement is trusted (:class:`Trust`) when it has at least ``min_repeats`` repeats, passes
both checks and, where an estimate is at hand, takes at most a plausible multiple of it
(``placement.ceiling``). :func:`measure` re-measures a doubted one a bounded number of times and,
when none is trusted, gives the fastest median with the doubt, for one plan but not for a cache.
"""

from __future__ import annotations

import os
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
#: Seconds to wait before the second measurement, growing fivefold before each next one. What
#: disturbs a measurement is mostly another process's turn on a core; measured again at once,
#: the operator often lands in the same turn.
FIRST_PAUSE_S = 0.02


_TASKS = "/proc/self/task"


@dataclass(frozen=True)
class TimedCall:
    """One timed call: wall seconds, and the longest any thread of the process waited for a
    core in them (None: not measured)."""

    wall_s: float
    waited_s: float | None


#: Times one call of its argument. Injected into the profiler so that tests can play a busy
#: machine; the real ones are :func:`cpu_timer` and :func:`cuda_timer`.
Timer = Callable[[Callable[[], object]], TimedCall]


def thread_waits() -> dict[str, int] | None:
    """Nanoseconds each thread of this process has waited on a run queue so far (the second
    field of Linux's ``/proc/self/task/TID/schedstat``); None where there is no such file."""
    try:
        threads = os.listdir(_TASKS)
    except OSError:
        return None
    waits = {}
    for thread in threads:
        try:
            with open(f"{_TASKS}/{thread}/schedstat", "rb") as stat:
                waits[thread] = int(stat.read().split()[1])
        except (OSError, IndexError, ValueError):
            continue  # a thread that ended meanwhile, or a kernel without the counter
    return waits or None


def cpu_timer(call: Callable[[], object]) -> TimedCall:
    before = thread_waits()
    start = time.perf_counter()
    call()
    wall = time.perf_counter() - start
    after = thread_waits()
    if before is None or after is None:
        return TimedCall(wall, None)
    waited = max(after[t] - before.get(t, 0) for t in after)
    return TimedCall(wall, max(waited, 0) / 1e9)


def cuda_timer(device: torch.device) -> Timer:
    """A timer fenced by ``torch.cuda.synchronize`` on ``device``; no wait share."""

    def timed(call: Callable[[], object]) -> TimedCall:
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        call()
        torch.cuda.synchronize(device)
        return TimedCall(time.perf_counter() - start, None)

    return timed


def timer_for(device: torch.device) -> Timer:
    return cuda_timer(device) if device.type == "cuda" else cpu_timer


@dataclass(frozen=True)
class Timing:
    """An operator's time: the median of ``repeats`` timed calls, their spread and wait share
    (see the module doc; ``wait_share`` None where not measured)."""

    seconds: float
    repeats: int
    spread: float
    wait_share: float | None

    @classmethod
    def of(cls, samples: list[TimedCall]) -> Timing:
        if not samples:
            raise ValueError("expected at least one timed call")
        walls = sorted(s.wall_s for s in samples)
        second_slowest = walls[-2] if len(walls) > 1 else walls[0]
        spread = (second_slowest - walls[0]) / max(walls[0], SPREAD_FLOOR_S)
        waits = [s.waited_s for s in samples]
        share = None
        if all(w is not None for w in waits):
            wall = max(sum(walls), SPREAD_FLOOR_S * len(walls))
            share = sum(w for w in waits if w is not None) / wall
        return cls(statistics.median(walls), len(samples), spread, share)


@dataclass(frozen=True)
class Trust:
    """When a :class:`Timing` may be cached (see the module doc)."""

    min_repeats: int = 3
    max_spread: float = 1.0
    max_wait_share: float = 0.25

    def doubt(self, timing: Timing, ceiling_s: float | None = None) -> str | None:
        """Why ``timing`` is not to be trusted, or None when it is. ``ceiling_s``: the most the
        operator can plausibly take (``placement.ceiling``), where known."""
        if timing.repeats < self.min_repeats:
            return f"{timing.repeats} repeats: too few to tell an outlier from the time"
        if timing.spread > self.max_spread:
            return f"repeats spread {timing.spread:.2f}x the fastest (at most {self.max_spread:g})"
        if timing.wait_share is not None and timing.wait_share > self.max_wait_share:
            return (
                f"a thread waited {timing.wait_share:.0%} of the wall time for a core (at most "
                f"{self.max_wait_share:.0%}): the machine was busy"
            )
        if ceiling_s is not None and timing.seconds > ceiling_s:
            return f"{timing.seconds:.3g} s, over the {ceiling_s:.3g} s its roofline allows"
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
    pause: Callable[[float], object] = time.sleep,
    ceiling_s: float | None = None,
) -> tuple[Timing, str | None]:
    """The first trusted timing of ``call`` in at most ``tries`` measurements (``pause`` waits
    between them, see ``FIRST_PAUSE_S``), with None; when none is trusted, the one with the
    fastest median (noise only adds time) and why the last was doubted. ``ceiling_s`` as for
    :meth:`Trust.doubt`."""
    if tries < 1:
        raise ValueError(f"expected tries >= 1, got {tries!r}")
    if repeats < trust.min_repeats:
        tries = 1  # never trusted: measuring again would not change that
    best: Timing | None = None
    doubt: str | None = None
    for attempt in range(tries):
        if attempt:
            pause(FIRST_PAUSE_S * 5 ** (attempt - 1))
        timing = time_call(call, timer, repeats)
        doubt = trust.doubt(timing, ceiling_s)
        if doubt is None:
            return timing, None
        if best is None or timing.seconds < best.seconds:
            best = timing
    assert best is not None
    return best, doubt
