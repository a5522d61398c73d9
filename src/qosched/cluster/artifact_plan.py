"""The ElasticFlow artifact's planner, step for step: what ``elasticflow(planner="artifact")`` runs.

The artifact (``pkusys/ElasticFlow``, ``scheduler/scheduler.py``) plans at every decision from
scratch, in deadline order, on a profile of future free GPUs that is a mapping from times to free
counts, then hands the GPUs left now to jobs one level at a time. qosched's own planner
(:mod:`qosched.cluster.planning`) models the same ideas on continuous time; this module repeats
the artifact's arithmetic, on which its figures depend:

- Times on the decision's slot grid. A job's end is ``now`` plus whole slots (``align``), the
  profile changes only there and at the aligned deadline, and its *real* end, judged against the
  deadline, is the start of its last segment plus the whole seconds its work takes there.
- A minimum share (``_share``): for each level (table count up to the job's fastest) the work is
  summed backward from the deadline on ``min(level, free)`` GPUs; at the segment where it is
  covered the job is laid out forward, on the previous level before that segment and on this one
  from it, until its work is done. A job no level satisfies runs on the last level until the
  aligned deadline and from there on what is free, until done (``_late``).
- Spare GPUs (``hand_out``): a job with none first, then the job whose planned GPU-time grows the
  most per added GPU, one level at a time. Its new plan holds the higher level until the free
  profile (without the job) next changes, then a minimum share from there (``_plan`` with
  ``assigned``), and replaces its old one in the profile.

Counts are the job's table counts up to its fastest one (the artifact's ``max_gpu`` on the A100
tables). Times are the artifact's: whole seconds, ends on the decision's slot grid.
"""

from __future__ import annotations

import bisect
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from qosched.cluster.throughput import SpeedCurve

Profile = dict[float, int]  # time -> free GPUs from then on, in time order
Allocation = dict[float, int]  # time -> GPUs the job holds from then on, in time order

#: The artifact's sentinel marginal values (``sys.maxsize``).
_TOP = float(sys.maxsize)


def align(start: float, time: float, slot: float) -> float:
    """``start`` plus the fewest whole slots that reach ``time``."""
    slots = (time - start) // slot
    if (time - start) % slot > 0:
        slots += 1
    return start + slots * slot


def merged(mapping: dict[float, int]) -> dict[float, int]:
    """Drop entries equal to the one before them."""
    out: dict[float, int] = {}
    last = None
    for key, value in mapping.items():
        if value != last:
            out[key] = value
            last = value
    return out


def _sorted(mapping: dict[float, int]) -> dict[float, int]:
    return dict(sorted(mapping.items()))


def _value_at(profile: Profile, time: float) -> int:
    """The free count of the segment holding ``time`` (the last entry before it)."""
    value = next(iter(profile.values()))
    for key, free in profile.items():
        if key < time:
            value = free
        else:
            break
    return value


def with_allocation(free: Profile, allocation: Allocation, end: float) -> Profile:
    """``free`` with ``allocation``'s GPUs given back until ``end``: the free count plus the
    held count at every time before ``end``, on the union of both mappings' times and ``end``
    (each mapping holds its last value until its next time; the first entry also covers any
    earlier time)."""
    times, counts = list(free), list(free.values())
    for boundary in sorted({*allocation, end}):
        at = bisect.bisect_left(times, boundary)
        if at == len(times) or times[at] != boundary:
            times.insert(at, boundary)
            counts.insert(at, counts[at - 1] if at else counts[0])
    held = list(allocation.items())
    for k, (time, count) in enumerate(held):
        until = min(held[k + 1][0], end) if k + 1 < len(held) else end
        if count and time < until:
            for at in range(bisect.bisect_left(times, time), bisect.bisect_left(times, until)):
                counts[at] += count
    return dict(zip(times, counts, strict=True))


def given_back(free: Profile, allocation: Allocation, end: float) -> Profile:
    """``merged(with_allocation(free, allocation, end))`` in one pass over both mappings."""
    # NOTE: the planner builds this a hundred thousand times per trace; a lookup with the value
    # in force as the default stands in for advancing a pointer through each mapping (each time
    # of the sorted union is a key of one or both, met in time order).
    out: Profile = {}
    get_held, held, last = allocation.get, 0, None
    if end in free and allocation.keys() <= free.keys():
        # Most often every time is one of ``free``'s: a walk over it alone.
        for time, count in free.items():
            if time < end:
                held = get_held(time, held)
                count += held
            if count != last:
                out[time] = last = count
        return out
    get_free, count = free.get, next(iter(free.values()))
    for time in sorted({*free, *allocation, end}):
        count = get_free(time, count)
        held = get_held(time, held)
        value = count + held if time < end else count
        if value != last:
            out[time] = last = value
    return out


def _reads_again(
    free: Profile,
    allocation: Allocation,
    end: float,
    now: float,
    job: PlannedJob,
    reads: str,
    until: float,
    read: list,
) -> bool:
    """Whether ``_read(given_back(free, allocation, end), now, job, reads, until) == read``,
    walked as ``given_back`` walks, only until the first difference or ``until`` (the profile
    itself is not built)."""
    fits, n_read = job.fits, len(read)
    get_free, get_held = free.get, allocation.get
    count, held, last = next(iter(free.values())), 0, None
    k = 0
    # As in ``given_back``: most often every time is one of ``free``'s.
    if end in free and allocation.keys() <= free.keys():
        entries = free.items()
    else:
        entries = ((time, get_free(time)) for time in sorted({*free, *allocation, end}))
    for time, value in entries:
        if time > until:
            break
        if value is None:
            value = count
        else:
            count = value
        if time < end:
            held = get_held(time, held)
            value += held
        if value == last:
            continue
        last = value
        if reads == "counts":
            entry = (time, value)
        elif time <= now:
            continue
        else:
            entry = time if reads == "times" else (time, fits[value])
        if k == n_read or read[k] != entry:
            return False
        k += 1
    return k == n_read


def gpu_time(allocation: Allocation, end: float) -> float:
    """GPU-seconds of an allocation held until ``end``."""
    total, last_time, last_count = 0.0, None, 0
    for time, count in allocation.items():
        if last_time is not None:
            total += last_count * (time - last_time)
        last_time, last_count = time, count
    if last_time is None:
        return 0.0
    return total + last_count * (end - last_time)


class _Within(dict[int, int]):
    """Free count -> the largest of ``levels`` it holds (0 if none), filled as asked."""

    def __init__(self, levels: tuple[int, ...]) -> None:
        super().__init__()
        self.levels = levels

    def __missing__(self, free: int) -> int:
        index = bisect.bisect_right(self.levels, free)
        fits = self[free] = self.levels[index - 1] if index else 0
        return fits


class _Rates(dict[int, float]):
    """GPU count -> the curve's speed there, filled as asked."""

    def __init__(self, curve: SpeedCurve) -> None:
        super().__init__()
        self.curve = curve

    def __missing__(self, gpus: int) -> float:
        rate = self[gpus] = self.curve.rate(gpus)
        return rate


# Shared by the jobs of every decision: levels say all ``within`` needs.
_WITHIN: dict[tuple[int, ...], _Within] = {}


@dataclass(slots=True)
class PlannedJob:
    """One job's state in the planner: its speeds, work left and deadline, and its plan."""

    job_id: str
    curve: SpeedCurve
    left: float
    deadline: float
    levels: tuple[int, ...]  # table counts up to the fastest, increasing
    gpus: int = 0
    allocation: Allocation = field(default_factory=dict)
    end: float = 0.0  # aligned end
    real_end: float = 0.0  # judged end
    # The level the spare hand-out would raise it to, and its GPU-time growth per added GPU.
    next_level: int = 0
    marginal: float = 0.0
    # NOTE: the planner asks for speeds and ``within`` millions of times per trace; the hot
    # loops read these mappings (``rate`` and ``within`` by subscription) directly.
    rates: dict[int, float] = field(init=False, repr=False, compare=False)
    fits: dict[int, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.rates = _Rates(self.curve)
        for g in self.levels:
            self.rates[g]
        fits = _WITHIN.get(self.levels)
        if fits is None:
            fits = _WITHIN[self.levels] = _Within(self.levels)
        self.fits = fits

    @classmethod
    def of(cls, job_id: str, curve: SpeedCurve, left: float, deadline: float) -> PlannedJob:
        counts = [g for g in curve.measured if (g & (g - 1)) == 0 and curve.rate(g) > 0]
        fastest = max(counts, key=curve.rate)
        return cls(job_id, curve, left, deadline, tuple(g for g in counts if g <= fastest))

    def rate(self, gpus: int) -> float:
        return self.rates[gpus]

    def up(self, gpus: int) -> int:
        """The next level above ``gpus`` (the first one for 0); ``gpus`` itself at the top."""
        return next((g for g in self.levels if g > gpus), gpus if gpus else self.levels[0])

    def within(self, free: int) -> int:
        """The largest level that fits in ``free`` GPUs; 0 if none (levels increase)."""
        return self.fits[free]


def _read(profile: Profile, now: float, job: PlannedJob, reads: str, until: float) -> list:
    """What a plan of ``job`` that read ``profile`` so (``ArtifactPlanner._reads``) depends on:
    the times after ``now`` up to ``until``, with the largest level each time's free count holds
    (``"levels"``), or the entries up to ``until`` (``"counts"``, the count at now included), or
    the times alone (``"times"``)."""
    keys = list(profile)
    if reads == "counts":
        return list(profile.items())[: bisect.bisect_right(keys, until)]
    part = keys[bisect.bisect_right(keys, now) : bisect.bisect_right(keys, until)]
    if reads == "times":
        return part
    fits = job.fits
    return [(time, fits[profile[time]]) for time in part]


class ArtifactPlanner:
    """Plans of one decision; ``capacity`` GPUs, decisions ``slot`` seconds apart."""

    def __init__(self, now: float, capacity: int, slot: float) -> None:
        self.now = now
        self.capacity = capacity
        self.slot = slot
        self.free: Profile = {now: capacity}
        self._last_level = 0  # the highest level the last failed share tried
        # What the last ``_plan`` read of its profile (see ``_read``): the entries after now up
        # to this time (inf: all), and of them the times, the levels they hold or the counts.
        self._reads_until = math.inf
        self._reads = "counts"
        self._dry = False  # whether the plan being made leaves its profile unfinished
        # Per job id, the last weighing in this hand-out: (gpus, next level), what it read of the
        # profile, and its result (``_weigh``).
        self._weighed: dict[str, tuple[tuple[int, int], str, float, list, float]] = {}
        # Per job id, the profile its last plan made in a weighing read: (gpus, next level), the
        # free profile it was built from, the profile.
        self._seen: dict[str, tuple[tuple[int, int], Profile, Profile]] = {}
        # Per job id, the GPU-time of the plan it holds, for (gpus, next level).
        self._held: dict[str, tuple[tuple[int, int], float]] = {}

    # -- one job ---------------------------------------------------------------------------

    def _plan(
        self, job: PlannedJob, profile: Profile, assigned: int = 0, dry: bool = False
    ) -> tuple[Allocation, Profile, float, float, bool]:
        """A plan for ``job`` on ``profile`` (not changed, in time order): (allocation, the
        profile it leaves, aligned end, real end, whether the real end meets the deadline). With
        ``assigned``, the job holds that many GPUs from now until the profile next changes
        first. ``dry``: the profile it leaves is not finished (the rest is the same)."""
        now, slot, left, deadline = self.now, self.slot, job.left, job.deadline
        self._dry = dry
        start = now
        allocation: Allocation = {now: 0}
        aligned_deadline = align(now, deadline, slot)
        times = list(profile)
        self._reads = "times"
        if assigned:
            first_later = bisect.bisect_right(times, now)
            later = first_later < len(times)
            change = times[first_later] if later else aligned_deadline
            # Without a later entry, an entry past the aligned deadline would change the plan.
            self._reads_until = change if later else math.inf
            allocation[now] = assigned
            real = math.ceil(now + left / job.rates[assigned])
            end = align(now, real, slot)
            if change >= end and deadline >= real and dry:
                # The profile it leaves is not asked for: not even copied.
                return allocation, profile, end, real, True
        at = bisect.bisect_left(times, aligned_deadline)
        if aligned_deadline >= now and (at == len(times) or times[at] != aligned_deadline):
            # The aligned deadline inserted in time order, with the count of the segment
            # holding it (``_value_at``).
            items = list(profile.items())
            items.insert(at, (aligned_deadline, items[at - 1][1] if at else items[0][1]))
            after = dict(items)
        else:
            after = dict(profile)
        if assigned:
            if change >= end and deadline >= real:
                last = after[now]
                for time in profile:
                    if now <= time < end:
                        last = after[time]
                        after[time] -= assigned
                if end not in profile:
                    after[end] = last
                return allocation, _sorted(after), end, real, True
            span = (deadline if change == aligned_deadline else change) - now
            left -= span * job.rate(assigned)
            after[now] -= assigned
            start = change
            allocation[change] = 0
            # With no later entry, the aligned deadline's inserted count is the one from now.
            self._reads = "counts" if start <= now or not later else "levels"
            if later:
                self._reads_until = max(change, aligned_deadline)
        else:
            self._reads, self._reads_until = "counts", math.inf
        found = self._share(job, profile, after, allocation, start, left, aligned_deadline)
        if found is not None:
            return found
        return self._late(job, profile, after, allocation, start, left, aligned_deadline)

    def _share(
        self,
        job: PlannedJob,
        profile: Profile,
        after: Profile,
        allocation: Allocation,
        start: float,
        left: float,
        aligned_deadline: float,
    ) -> tuple[Allocation, Profile, float, float, bool] | None:
        """The minimum share from ``start``, taken out of ``after``; None if no level does it
        (``allocation`` and ``after`` are then untouched but for zero entries)."""
        deadline, fits, rates = job.deadline, job.fits, job.rates
        previous = 0
        # ``after`` does not change while the levels are tried: its segments from the aligned
        # deadline back to ``start``, each with the largest level its free GPUs hold.
        segments = None
        for level in job.levels:
            if level > self.capacity:
                break
            if segments is None:
                for time in after:  # in time order
                    if time >= aligned_deadline:
                        break
                    allocation.setdefault(time, 0)
                segments = []
                for time in reversed(after):
                    if time >= aligned_deadline:
                        continue
                    if time < start:
                        break
                    segments.append((time, fits[after[time]]))
            covered, period_end, point = 0.0, aligned_deadline, None
            for time, fits in segments:
                gpus = level if fits > level else fits
                if gpus == 0:
                    period_end = time
                    continue
                span = (deadline if period_end == aligned_deadline else period_end) - time
                covered += span * rates[gpus]
                if covered >= left:
                    point = time
                    break
                period_end = time
            if point is not None:
                return self._lay_out(
                    job,
                    profile,
                    after,
                    allocation,
                    start,
                    left,
                    aligned_deadline,
                    point,
                    previous,
                    level,
                )
            previous = level
        self._last_level = previous
        return None

    def _lay_out(
        self,
        job: PlannedJob,
        profile: Profile,
        after: Profile,
        allocation: Allocation,
        start: float,
        left: float,
        aligned_deadline: float,
        point: float,
        before: int,
        level: int,
    ) -> tuple[Allocation, Profile, float, float, bool]:
        """Forward from ``start``: ``before`` GPUs until ``point`` and ``level`` from it (each
        within what is free), until the work is done."""
        deadline, slot, fits, rates = job.deadline, self.slot, job.fits, job.rates

        held_from, held, end, real = None, 0, None, 0.0
        for time in after:  # counts change on the way, times do not
            if time > aligned_deadline:
                break
            if time < start:
                continue
            if held_from is None:
                held_from, held = time, min(level if time >= point else before, fits[after[time]])
                continue
            allocation[held_from] = held
            after[held_from] -= held
            if held == 0:
                held_from, held = time, min(level if time >= point else before, fits[after[time]])
                continue
            span = (deadline if time == aligned_deadline else time) - held_from
            done = span * rates[held]
            if held_from < point or done < left:
                left -= done
            else:
                seconds = math.ceil(left / rates[allocation[held_from]])
                end = held_from + align(0, seconds, slot)
                real = held_from + seconds
                break
            held_from, held = time, min(level if time >= point else before, fits[after[time]])
        if end is None:
            allocation[held_from] = held
            after[held_from] -= held
            seconds = math.ceil(left / rates[allocation[held_from]])
            real = held_from + seconds
            end = held_from + align(0, seconds, slot)
        allocation = _sorted(allocation)
        if self._dry:
            return allocation, after, end, real, real <= deadline
        last = self.capacity
        for time, free in profile.items():
            if start <= time < end:
                last = free
        if end not in profile:
            after[end] = last
        return allocation, _sorted(after), end, real, real <= deadline

    def _late(
        self,
        job: PlannedJob,
        profile: Profile,
        after: Profile,
        allocation: Allocation,
        start: float,
        left: float,
        aligned_deadline: float,
    ) -> tuple[Allocation, Profile, float, float, bool]:
        """A job no level satisfies: the last level (within what is free) until the aligned
        deadline, then what is free, until done, past its deadline."""
        deadline, slot, now = job.deadline, self.slot, self.now
        fits, rates = job.fits, job.rates
        level = self._last_level
        held_from, held = None, 0
        for time in list(after):
            if time > aligned_deadline:
                break
            if time < start:
                continue
            if held_from is None:
                held_from, held = time, min(level, fits[after[time]])
                continue
            allocation[held_from] = held
            after[held_from] -= held
            if held:
                span = (deadline if time == aligned_deadline else time) - held_from
                left -= span * rates[held]
            held_from, held = time, min(level, fits[after[time]])
        top = max(job.levels)
        last = _value_at(profile, aligned_deadline)
        held_from = max(aligned_deadline, start)
        for time in list(after):
            if time <= aligned_deadline:
                continue
            gpus = min(fits[after[held_from]], top)
            allocation[held_from] = gpus
            if gpus == 0:
                held_from = time
                continue
            done = (time - held_from) * rates[gpus]
            if done >= left:
                if self._reads_until != math.inf:
                    self._reads_until = max(self._reads_until, time)
                real = math.ceil(held_from + left / rates[gpus])
                end = align(now, real, slot)
                if self._dry:
                    return _sorted(allocation), after, end, real, False
                for t in list(after):
                    if t < aligned_deadline:
                        continue
                    if t < end and t in profile:
                        last = profile[t]
                    if held_from <= t < end:
                        after[t] -= gpus
                if held_from != end:
                    after[held_from] = last - gpus
                if end not in profile:
                    after[end] = last
                return _sorted(allocation), _sorted(after), end, real, False
            left -= done
            if not self._dry:
                for t in profile:
                    if t < held_from:
                        last = after[t]
                for t in list(after):
                    if held_from <= t < time:
                        after[t] -= gpus
            held_from = time
        self._reads_until = math.inf
        gpus = min(self.capacity, top)
        allocation[held_from] = gpus
        real = math.ceil(held_from + left / rates[gpus])
        end = align(now, real, slot)
        after[held_from] = self.capacity - gpus
        after[end] = self.capacity
        return _sorted(allocation), _sorted(after), end, real, False

    # -- all jobs --------------------------------------------------------------------------

    def plan_all(self, jobs: Sequence[PlannedJob]) -> bool:
        """Plan every job in deadline order from scratch; whether all meet their deadlines."""
        self.free = {self.now: self.capacity}
        met = True
        for job in jobs:
            allocation, after, end, real, ok = self._plan(job, self.free)
            job.allocation, job.end, job.real_end = merged(allocation), end, real
            self.free = merged(after)
            met = met and ok
        for job in jobs:
            job.gpus = job.allocation.get(self.now, 0)
        return met

    def _weigh(self, job: PlannedJob, spare: int) -> None:
        """The job's plan one level up and its GPU-time growth per added GPU."""
        if job.next_level - job.gpus > spare or job.next_level == job.gpus:
            job.marginal = -_TOP
            return
        if job.gpus == 0:
            # A waiting job comes first whatever its plan; that is made only if it is raised.
            job.marginal = _TOP
            return
        # NOTE: most weighings in a hand-out see the same profile where the plan reads it, as
        # the last one for this job and level did; their growth is taken over. The plan is made
        # without the profile it leaves, and made whole only if the job is raised.
        state = (job.gpus, job.next_level)
        last = self._weighed.get(job.job_id)
        if (
            last is not None
            and last[0] == state
            and _reads_again(self.free, job.allocation, job.end, self.now, job, *last[1:4])
        ):
            job.marginal = last[4]
            return
        profile = given_back(self.free, job.allocation, job.end)
        allocation, _, end, _, _ = self._plan(job, profile, job.next_level, dry=True)
        added = job.next_level - job.gpus
        # The GPU-time of the plan it holds changes only when it is raised (a new state).
        held = self._held.get(job.job_id)
        if held is None or held[0] != state:
            held = self._held[job.job_id] = (state, gpu_time(job.allocation, job.end))
        job.marginal = (gpu_time(allocation, end) - held[1]) / added
        reads = (self._reads, self._reads_until)
        read = _read(profile, self.now, job, *reads)
        self._weighed[job.job_id] = (state, *reads, read, job.marginal)
        self._seen[job.job_id] = (state, self.free, profile)

    def _raised_plan(self, job: PlannedJob) -> tuple[Allocation, Profile, float, float]:
        """The job's plan one level up on the profile now (the one its last weighing saw)."""
        seen = self._seen.get(job.job_id)
        # The free profile is replaced, never changed in place: the same one, the same view.
        if seen is not None and seen[0] == (job.gpus, job.next_level) and seen[1] is self.free:
            profile = seen[2]
        else:
            profile = given_back(self.free, job.allocation, job.end)
        allocation, after, end, real, _ = self._plan(job, profile, assigned=job.next_level)
        return merged(allocation), merged(after), end, real

    def hand_out(self, jobs: list[PlannedJob]) -> list[PlannedJob]:
        """Give the GPUs free now to ``jobs`` (in deadline order); the jobs in the artifact's final
        order (the order it places them in, before it sorts by size)."""
        for job in jobs:
            job.next_level = job.up(job.gpus)
        spare = self.capacity - sum(job.gpus for job in jobs)
        if spare <= 0:
            return jobs
        self._weighed = {}
        self._held = {}
        self._seen = {}
        for job in jobs:
            self._weigh(job, spare)
        order = sorted(jobs, key=lambda j: -j.marginal)
        grew = True
        while spare > 0 and grew:
            grew = False
            for job in order:
                if job.next_level - job.gpus > spare or job.next_level == job.gpus:
                    continue
                allocation, after, end, real = self._raised_plan(job)
                self.free = after
                spare -= job.next_level - job.gpus
                job.allocation, job.gpus = allocation, job.next_level
                job.end, job.real_end = end, real
                job.next_level = job.up(job.gpus)
                grew = True
                break
            for job in order:
                if job.next_level - job.gpus > 0:
                    self._weigh(job, spare)
            order.sort(key=lambda j: -j.marginal)
        return order
