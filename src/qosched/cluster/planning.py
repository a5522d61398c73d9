"""Planning deadline jobs on future free workers: the mechanism under deadline-aware policies.

A plan gives each deadline job, in a policy-chosen order, its Minimum Satisfactory Share: the
fewest workers ``g`` such that running on ``min(g, free)`` from now to its deadline finishes it,
where free is what the jobs planned before it leave. Free workers over time are a piecewise-constant
profile; a job's reservation is a list of (start, end, workers) segments. Which counts a job may
use, and how fast it runs on each, come from its :class:`Ladder`, which the policy builds.

Where the free workers dip below a job's share, ``min(g, free)`` changes the job's count, and a
backend restarts a job at every change. Plans do not budget those later pauses (a policy that
did planned every share fuller than it turned out); a kept reservation may be checked with them
paid instead (``Demand.kept_change_pause``, `delivers`), and planned again once they make it late.
"""

from __future__ import annotations

import bisect
import math
import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from qosched.cluster.state import ClusterView, JobState

# A job's reservation in a plan: (start, end, workers) segments.
Reservation = list[tuple[float, float, int]]

# Slack for float rounding (relative, and absolute in iterations): a plan that meets a deadline
# exactly must still count as met, and a job a rounding error short of done as done.
TOLERANCE = 1e-9


class FreeProfile:
    """Free workers over future time: segment ``i`` covers ``[starts[i], starts[i+1])``, the last
    one runs forever."""

    __slots__ = ("free", "starts")

    def __init__(self, now: float, capacity: int) -> None:
        self.starts = [now]
        self.free = [capacity]

    def split(self, time: float) -> int:
        """Make ``time`` a segment boundary; return the index of the segment starting there."""
        index = bisect.bisect_right(self.starts, time) - 1
        if self.starts[index] == time:
            return index
        self.starts.insert(index + 1, time)
        self.free.insert(index + 1, self.free[index])
        return index + 1


class Ladder:
    """The counts a job may run on, and for any budget of free workers the best count within it.

    ``rates[g]`` is the job's speed on ``g`` workers (index 0 unused); a policy builds it from a
    measured curve or from its own predictions, and picks the ``allowed`` counts (powers of two,
    whole nodes, ...).
    """

    __slots__ = ("_count_rates", "_per_worker", "best", "counts", "rate_within", "rates")

    def __init__(self, rates: Sequence[float], allowed: Iterable[int]) -> None:
        self.rates = rates
        top_count = len(rates) - 1
        self.counts = sorted(g for g in set(allowed) if 1 <= g <= top_count and rates[g] > 0.0)
        # best[b]: count <= b with the highest speed (fewest workers on ties); 0 when none fits.
        # Filled a run at a time: it changes only at a count faster than every smaller one.
        # rate_within[b]: speed on the best count within budget b (0 for b = 0), in the same runs.
        best: list[int] = []
        rate_within: list[float] = []
        top = 0
        for count in self.counts:
            if top == 0 or rates[count] > rates[top]:
                run = count - len(best)
                best += [top] * run
                rate_within += [rates[top] if top else 0.0] * run
                top = count
        run = top_count + 1 - len(best)
        best += [top] * run
        rate_within += [rates[top] if top else 0.0] * run
        self.best = best
        self.rate_within = rate_within
        self._per_worker: float | None = None  # see per_worker
        self._count_rates: list[float] | None = None  # see count_rates

    def count_rates(self) -> list[float]:
        """``rate_within`` at each of the counts, in order: never falling, as ``rate_within``
        never falls as the budget grows. Made at the first call and kept."""
        if self._count_rates is None:
            rate_within = self.rate_within
            self._count_rates = [rate_within[g] for g in self.counts]
        return self._count_rates

    def per_worker(self) -> float:
        """The highest speed per worker over the counts (0 with none): the most efficient
        count's. Computed at the first call and kept (a ladder does not change)."""
        if self._per_worker is None:
            rates = self.rates
            self._per_worker = max((rates[g] / g for g in self.counts), default=0.0)
        return self._per_worker

    def rate(self, count: int) -> float:
        return self.rates[count] if 0 < count < len(self.rates) else 0.0

    def within(self, budget: int) -> int:
        return self.best[min(budget, len(self.best) - 1)] if budget > 0 else 0


def finish_time(
    ladder: Ladder,
    share: int,
    remaining: float,
    start: float,
    deadline: float,
    p: FreeProfile,
) -> float | None:
    """When the job finishes on ``min(share, free)`` workers from ``start``; None if too late."""
    # NOTE: the hot loop of ElasticFlow's planning; kept free of calls for speed.
    rate_within = ladder.rate_within
    starts, free = p.starts, p.free
    last = len(starts) - 1
    done = 0.0
    index = bisect.bisect_right(starts, start) - 1
    if index < 0:
        index = 0
    t0 = start
    while t0 < deadline:
        t1 = starts[index + 1] if index < last else deadline
        if t1 > deadline:
            t1 = deadline
        available = free[index]
        rate = rate_within[share if share < available else available]
        if rate > 0.0:
            gained = rate * (t1 - t0)
            if done + gained >= remaining * (1 - TOLERANCE) - TOLERANCE:
                return min(t1, t0 + (remaining - done) / rate)
            done += gained
        if index == last:
            break
        index += 1
        t0 = t1
    return None


def reserve(ladder: Ladder, share: int, start: float, finish: float, p: FreeProfile) -> Reservation:
    """Take the job's workers out of the profile from ``start`` (now: a job in a restart pause holds
    its workers) until ``finish``; return the reservation."""
    first = p.split(start)
    end = p.split(finish)
    best, free, starts = ladder.best, p.free, p.starts
    reservation: Reservation = []
    for index in range(first, end):
        available = free[index]
        count = best[share if share < available else available]
        free[index] = available - count
        if reservation and reservation[-1][2] == count:  # one segment per count, not per step
            reservation[-1] = (reservation[-1][0], starts[index + 1], count)
        else:
            reservation.append((starts[index], starts[index + 1], count))
    merge(p, first, end)
    return reservation


def merge(p: FreeProfile, first: int, end: int) -> None:
    """Merge neighbours in ``[first - 1, end]`` left equal, so the profile stays short."""
    free, starts = p.free, p.starts
    index = end if end < len(free) else end - 1
    while index > first and index > 0:
        if free[index] == free[index - 1]:
            del free[index], starts[index]
        index -= 1
    if 0 < first < len(free) and free[first] == free[first - 1]:
        del free[first], starts[first]


def take(reservation: Reservation, now: float, p: FreeProfile) -> bool:
    """Take a kept reservation (from ``now`` on) out of the profile; False, untouched, if it no
    longer fits."""
    # One pass that takes as it checks, undoing on a misfit: kept reservations almost always
    # still fit, and this runs for every guaranteed job at every decision.
    taken: list[tuple[float, float, int]] = []
    for start, end, count in reservation:
        if end <= now or not count:
            continue
        start = max(start, now)
        first, last = p.split(start), p.split(end)
        free = p.free
        if min(free[first:last]) < count:
            for undo_start, undo_end, undo_count in taken:
                for index in range(p.split(undo_start), p.split(undo_end)):
                    free[index] += undo_count
            return False
        for index in range(first, last):
            free[index] -= count
        taken.append((start, end, count))
    return True


def take_all(reservations: Sequence[Reservation], now: float, p: FreeProfile) -> bool:
    """Take every reservation (from ``now`` on) out of a profile with no reservation in it yet;
    False, untouched, if together they exceed its workers somewhere.

    The same profile, segment for segment, as ``take`` of each in turn when all of them fit:
    one sweep over sorted boundaries instead of a walk of the profile per reservation.
    """
    if len(p.starts) != 1:
        raise ValueError("take_all needs a profile with nothing taken from it yet")
    capacity = p.free[0]
    segments = [
        (start if start > now else now, end, count)
        for reservation in reservations
        for start, end, count in reservation
        if end > now and count
    ]
    if not segments:
        return True
    table = np.array(segments, dtype=float)
    times = np.unique(np.concatenate(([p.starts[0]], table[:, 0], table[:, 1])))
    # Counts are whole numbers, so these sums are exact in any order: bincount (much faster
    # than np.add.at) gives the same profile.
    size = len(times) + 1
    delta = np.bincount(
        np.searchsorted(times, table[:, 0]), weights=table[:, 2], minlength=size
    ) - np.bincount(np.searchsorted(times, table[:, 1]), weights=table[:, 2], minlength=size)
    used = np.cumsum(delta[:-1])
    if used.max() > capacity:
        return False
    p.starts = times.tolist()
    p.free = (capacity - used.astype(np.int64)).tolist()
    return True


class TakeAllMemo:
    """`take_all` for a policy that takes its kept reservations together at decision after
    decision: mostly the same ones, a few re-planned or gone.

    It keeps the sweep of the last reservations taken (the boundaries after its instant, the
    workers in use on each piece, and how many segment ends fall on each boundary), and makes
    the next one from it: cut at the new instant, the reservations that left taken out, the new
    ones put in. That is the sweep made afresh, segment for segment: a boundary stays while a
    segment ends there (when the last one goes, the pieces on either side hold the same
    workers), the workers in use are whole numbers, so any order of adding them gives the same
    sums, and cutting at a later instant only drops boundaries before it (on the piece holding
    the new instant the same segments are in use as on the old piece that held it).
    """

    __slots__ = ("_ends", "_held", "_now", "_starts", "_used")

    #: Re-sweep from scratch when more than this share of the reservations changed.
    REBUILD_SHARE = 0.25

    def __init__(self) -> None:
        self._held: dict[int, Reservation] = {}  # by id; held, so that the ids stay theirs
        self._now = math.inf
        self._starts: list[float] = []
        self._used: list[int] = []
        self._ends: dict[float, int] = {}  # segment ends on each boundary after ``_now``

    def take_all(self, reservations: Sequence[Reservation], now: float, p: FreeProfile) -> bool:
        """``take_all(reservations, now, p)``: the same answer, the same profile."""
        if p.starts != [now]:
            return take_all(reservations, now, p)  # it raises, as it should
        held = {id(r): r for r in reservations}
        if len(held) != len(reservations):  # one reservation twice: not a set
            return take_all(reservations, now, p)
        old = self._held
        gone = [r for key, r in old.items() if key not in held]
        new = [r for key, r in held.items() if key not in old]
        if now < self._now or len(gone) + len(new) > self.REBUILD_SHARE * len(held):
            self._rebuild(reservations, now)
        else:
            self._cut(now)
            for reservation in gone:
                self._add(reservation, -1)
            for reservation in new:
                self._add(reservation, 1)
        self._held = held
        capacity = p.free[0]
        used = self._used
        if max(used) > capacity:
            return False
        p.starts = list(self._starts)
        p.free = [capacity - u for u in used]
        return True

    def _rebuild(self, reservations: Sequence[Reservation], now: float) -> None:
        now = float(now)
        delta: dict[float, int] = {}
        ends: dict[float, int] = {}
        for reservation in reservations:
            for start, end, count in reservation:
                if end <= now or not count:
                    continue
                start = float(start) if start > now else now
                end = float(end)
                delta[start] = delta.get(start, 0) + count
                delta[end] = delta.get(end, 0) - count
                if start != now:
                    ends[start] = ends.get(start, 0) + 1
                ends[end] = ends.get(end, 0) + 1
        starts = sorted(delta.keys() | {now})
        used, total = [], 0
        for time in starts:
            total += delta.get(time, 0)
            used.append(total)
        self._now, self._starts, self._used, self._ends = now, starts, used, ends

    def _cut(self, now: float) -> None:
        """The sweep from ``now`` on (no earlier than its instant)."""
        now = float(now)
        starts, ends = self._starts, self._ends
        index = bisect.bisect_right(starts, now) - 1
        for time in starts[1 : index + 1]:
            del ends[time]
        self._starts = [now, *starts[index + 1 :]]
        self._used = self._used[index:]
        self._now = now

    def _add(self, reservation: Reservation, sign: int) -> None:
        """Put the reservation into the sweep (``sign`` 1) or take it out (-1)."""
        now = self._now
        starts, used = self._starts, self._used
        for start, end, count in reservation:
            if end <= now or not count:
                continue
            start = float(start) if start > now else now
            end = float(end)
            if sign > 0:
                first = self._boundary(start)
                last = self._boundary(end)
                for index in range(first, last):
                    used[index] += count
            else:
                first = bisect.bisect_left(starts, start)
                last = bisect.bisect_left(starts, end)
                for index in range(first, last):
                    used[index] -= count
                # the end first: taking out the start boundary shifts the indices after it
                self._unreference(end, last)
                if start != now:
                    self._unreference(start, first)

    def _boundary(self, time: float) -> int:
        """The index of the piece starting at ``time``, made a boundary if it was not one;
        counts one more segment end there (none for the instant itself)."""
        starts = self._starts
        index = bisect.bisect_left(starts, time)
        if index == len(starts) or starts[index] != time:
            starts.insert(index, time)
            self._used.insert(index, self._used[index - 1])
        if time != self._now:
            self._ends[time] = self._ends.get(time, 0) + 1
        return index

    def _unreference(self, time: float, index: int) -> None:
        """One segment end fewer at boundary ``index`` (``time``); no boundary left without one."""
        left = self._ends[time] - 1
        if left:
            self._ends[time] = left
            return
        del self._ends[time], self._starts[index], self._used[index]


def delivers(
    ladder: Ladder,
    reservation: Reservation,
    remaining: float,
    start: float,
    deadline: float,
    change_pause: float = 0.0,
) -> bool:
    """Whether running on ``reservation`` from ``start`` does ``remaining`` by ``deadline``;
    with ``change_pause``, paying it at every change of count after the first, as a
    checkpoint-restart does: where the count falls and comes back, and where the job waits with
    none and resumes (its first count is free; a change within a pause starts it again)."""
    done = work_by(ladder, reservation, start, deadline, change_pause)
    return done >= remaining * (1 - TOLERANCE) - TOLERANCE


def most_delivered(done: float) -> float:
    """The most remaining work that ``done`` iterations deliver, within `delivers`'s
    tolerance."""
    return (done + TOLERANCE) / (1 - TOLERANCE)


def work_by(
    ladder: Ladder,
    reservation: Reservation,
    start: float,
    deadline: float,
    change_pause: float = 0.0,
) -> float:
    """The iterations ``reservation`` does from ``start`` by ``deadline`` (see `delivers`)."""
    # NOTE: ``ladder.rate`` and ``max``/``min`` inlined: this runs for every kept reservation at
    # every decision.
    rates = ladder.rates
    top = len(rates)
    done = 0.0
    held = 0
    started = False
    paused_until = -math.inf
    for s, e, count in reservation:
        if count != held:  # a re-size, or a resume after waiting, pays from its start
            if count and started:
                paused_until = s + change_pause
            started = started or count > 0
            held = count
        if s < paused_until:
            s = paused_until
        if s < start:
            s = start
        if e > deadline:
            e = deadline
        if e > s and count:
            done += (rates[count] if 0 < count < top else 0.0) * (e - s)
    return done


def minimum_share(
    ladder: Ladder,
    remaining: float,
    start: float,
    deadline: float,
    p: FreeProfile,
) -> tuple[int, float] | None:
    """(share, finish) with the fewest workers that does ``remaining`` by ``deadline``, or None."""
    counts = ladder.counts
    if not counts or deadline <= start:
        return None
    # No share slower than remaining / (deadline - start) can make it, whatever is free.
    needed = remaining / (deadline - start)
    # The counts whose speed is at least that: a tail of them, since their speeds never fall.
    candidates = counts[bisect.bisect_left(ladder.count_rates(), needed * (1 - TOLERANCE)) :]
    if not candidates:
        return None
    # Fewest workers first: under light load the first candidate usually fits.
    finish = finish_time(ladder, candidates[0], remaining, start, deadline, p)
    if finish is not None:
        return candidates[0], finish
    # A larger share does at least as much work in every segment (rate_within never falls as
    # the budget grows, and float sums are monotone), so whether a share fits is monotone in
    # it: the fewest workers that fit are found by bisection, and none fit if the most do not.
    # The same share as trying each in turn, in a few walks of the profile instead of one per
    # candidate (most candidates of a job that cannot fit).
    low, high = 0, len(candidates) - 1  # candidates[low] does not fit
    finish = finish_time(ladder, candidates[high], remaining, start, deadline, p)
    if finish is None:
        return None
    while high - low > 1:  # candidates[high] fits, finishing at ``finish``
        middle = (low + high) // 2
        found = finish_time(ladder, candidates[middle], remaining, start, deadline, p)
        if found is None:
            low = middle
        else:
            high, finish = middle, found
    return candidates[high], finish


SHARE_SHAPES = ("front", "artifact")


def artifact_share(
    ladder: Ladder, remaining: float, start: float, deadline: float, p: FreeProfile
) -> Reservation | None:
    """The ElasticFlow artifact's minimum share (``scheduler.py`` ``ef_sim_allocation``), taken
    out of the profile; None, untouched, if no level up to the fastest count meets the deadline.

    For each level ``q`` in increasing order: walk the profile backward from the deadline on
    ``min(q, free)`` workers until the work is covered, at the start of segment ``point``; the
    job then runs on the previous (smaller) level from now until ``point`` and on ``q`` from
    there, until done. It holds fewer workers now than one share from now would, and finishes
    with no slack when nothing is free before ``point``.
    """
    counts = ladder.counts
    if not counts or deadline <= start:
        return None
    fastest = max(counts, key=ladder.rate)
    previous = 0
    for level in (g for g in counts if g <= fastest):
        point = _covered_from(ladder, level, remaining, start, deadline, p)
        if point is not None:
            return _reserve_two_levels(ladder, previous, level, point, remaining, start, p)
        previous = level
    return None


def artifact_fallback(
    ladder: Ladder, remaining: float, start: float, p: FreeProfile
) -> Reservation:
    """What the ElasticFlow artifact plans for a job no level satisfies (the end of
    ``ef_sim_allocation``): its fastest count within what is free, from ``start`` until done,
    past its deadline; taken out of the profile before later-deadline jobs are planned."""
    fastest = max(ladder.counts, key=ladder.rate)
    # The profile's last segment runs forever with workers free, so the job always finishes.
    finish = finish_time(ladder, fastest, remaining, start, math.inf, p)
    if finish is None:
        raise ValueError("no worker is ever free for the job")
    return reserve(ladder, fastest, start, finish, p)


def _covered_from(
    ladder: Ladder, level: int, remaining: float, start: float, deadline: float, p: FreeProfile
) -> float | None:
    """The latest segment start from which ``min(level, free)`` workers do the work by the
    deadline; None if even ``start`` is too late."""
    starts, free = p.starts, p.free
    index = max(bisect.bisect_right(starts, deadline) - 1, 0)
    end, done = deadline, 0.0
    while True:
        begin = max(starts[index], start)
        if begin < end:
            count = ladder.within(min(level, free[index]))
            done += ladder.rate(count) * (end - begin)
            if done >= remaining * (1 - TOLERANCE) - TOLERANCE:
                return begin
        if starts[index] <= start or index == 0:
            return None
        end = starts[index]
        index -= 1


def _reserve_two_levels(
    ladder: Ladder,
    before: int,
    after: int,
    point: float,
    remaining: float,
    start: float,
    p: FreeProfile,
) -> Reservation:
    """Run on ``before`` workers until ``point`` and ``after`` from there (each within what is
    free), from ``start`` until the work is done; take that out of the profile."""
    p.split(start)
    p.split(point)
    starts, free = p.starts, p.free
    index = bisect.bisect_right(starts, start) - 1
    done, finish = 0.0, math.inf
    while True:  # the finish time, before the profile is cut there
        level = before if starts[index] < point else after
        rate = ladder.rate(ladder.within(min(level, free[index])))
        end = starts[index + 1] if index + 1 < len(starts) else math.inf
        if rate > 0 and done + rate * (end - starts[index]) >= remaining:
            finish = starts[index] + (remaining - done) / rate
            break
        done += rate * (end - starts[index])
        index += 1
    first, last = p.split(start), p.split(finish)
    starts, free = p.starts, p.free
    reservation: Reservation = []
    for index in range(first, last):
        level = before if starts[index] < point else after
        count = ladder.within(min(level, free[index]))
        free[index] -= count
        if reservation and reservation[-1][2] == count:
            reservation[-1] = (reservation[-1][0], starts[index + 1], count)
        else:
            reservation.append((starts[index], starts[index + 1], count))
    merge(p, first, last)
    return reservation


@dataclass(slots=True)
class Plan:
    """Reservations of the planned deadline jobs, and the jobs no reservation could satisfy."""

    reservations: dict[str, Reservation] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    # The free GPUs the reservations leave, when the plan was made by ``plan_demands``.
    free: FreeProfile | None = field(default=None, compare=False, repr=False)

    def count_now(self, job_id: str, now: float) -> int:
        return self.count_now_of(self.reservations.get(job_id, []), now)

    def next_change(self, now: float) -> float | None:
        """The first future time a reserved count changes: the plan must be applied then."""
        soonest = math.inf
        for reservation in self.reservations.values():
            current = self.count_now_of(reservation, now)
            for start, _, count in reservation:
                if start > now and count != current:
                    soonest = min(soonest, start)
                    break
        return None if math.isinf(soonest) else soonest

    @staticmethod
    def count_now_of(reservation: Reservation, now: float) -> int:
        for start, end, count in reservation:
            if start <= now < end:
                return count
        return 0


# NOTE: not frozen, but treat it as if it were (hashable on its fields as a frozen one is): a
# policy makes one per planned job per plan, over a million in a long simulation, and a frozen
# dataclass's __init__ costs several times a plain one's.
@dataclass(slots=True, unsafe_hash=True)
class Demand:
    """One deadline job to plan: its ladder, the work left and the window to do it in."""

    job_id: str
    ladder: Ladder
    remaining: float
    start: float  # when it can progress (after a restart pause in course)
    deadline: float  # to finish by when its count changes (a restart pause earlier)
    order: tuple = ()  # sort key among demands; earliest first
    held: int = 0  # workers it holds now
    held_deadline: float = 0.0  # to finish by when it keeps ``held`` throughout (no pause)
    # Paid at each later change of count of a kept reservation (`delivered_by`). A plan is made
    # without them: it is checked with them paid once it is kept to a later instant.
    kept_change_pause: float = 0.0

    @classmethod
    def of_job(
        cls,
        job: JobState,
        ladder: Ladder,
        view: ClusterView,
        *,
        keep_held: bool = False,
        pay_kept_changes: bool = False,
    ) -> Demand:
        """A deadline job planned in deadline order. It can progress once a restart pause in
        course ends, and one that ran before loses one more pause, since re-sizing it costs one.
        With ``keep_held``, a plan that keeps it on the count it holds throughout is charged no
        pause (a policy's choice: ElasticFlow's planning charges one either way). With
        ``pay_kept_changes``, a kept reservation is checked with a pause paid at every later
        change of count it makes, as it will be when carried out, so a policy can plan a share
        without them and keep it only while it delivers with them paid."""
        pause = view.restart_pause_s if job.started_s is not None else 0.0
        spec, now, resume = job.spec, view.now, job.resume_s
        deadline = spec.deadline_s
        return cls(
            job.job_id,
            ladder,
            job.remaining_iterations,
            now if now >= resume else resume,  # max(now, resume), without the call
            deadline - pause,
            (deadline, spec.submit_s),
            job.workers if keep_held else 0,
            deadline if keep_held else deadline - pause,
            view.restart_pause_s if pay_kept_changes else 0.0,
        )

    def delivered_by(self, reservation: Reservation) -> bool:
        """Whether the reservation does the work in time, counting a pause unless it keeps the
        job on the count it holds throughout (and one per later change with
        ``kept_change_pause``)."""
        if delivers(
            self.ladder,
            reservation,
            self.remaining,
            self.start,
            self.deadline,
            self.kept_change_pause,
        ):
            return True
        return (
            self.held_deadline > self.deadline
            and bool(reservation)
            and all(count == self.held for _, _, count in reservation)
            and delivers(self.ladder, reservation, self.remaining, self.start, self.held_deadline)
        )

    def keep_held(self, p: FreeProfile, now: float) -> float | None:
        """When the job finishes if it keeps the count it holds, on workers free from ``now``
        throughout, with no pause; None if that is too late or the workers are not free."""
        held = self.held
        if not held or self.held_deadline <= self.deadline or self.ladder.within(held) != held:
            return None
        # The first segment from ``now`` with fewer than ``held`` free: the job must be done by
        # its start. Found first, so that a job blocked right away (most jobs this is asked
        # for: they failed to fit) costs no walk of the profile to learn when it would finish.
        starts, free = p.starts, p.free
        start, remaining, deadline = self.start, self.remaining, self.held_deadline
        limit = math.inf
        for index in range(max(bisect.bisect_right(starts, now) - 1, 0), len(starts)):
            if starts[index] >= deadline:
                break  # a block from here on comes after any finish by the deadline
            if free[index] < held:
                limit = starts[index]
                break
        if limit > start:
            # Up to ``limit`` the walk is the same with the deadline cut there; a finish after
            # it, or none, is None either way.
            end = min(deadline, limit)
            # Every segment up to ``end`` has ``held`` free, so the walk adds up ``rate * (t1 -
            # t0)`` over pieces of [start, end): rounding keeps that sum within a relative
            # 1e-10 of ``rate * (end - start)`` on any profile of under a million segments.
            # When even that, widened by 1e-9, falls short of the work, the walk finds no
            # finish: None without the walk (most jobs this is asked for cannot finish).
            rate = self.ladder.rate_within[held]
            if rate * (end - start) * (1 + 1e-9) < remaining * (1 - TOLERANCE) - TOLERANCE:
                return None
            return finish_time(self.ladder, held, remaining, start, end, p)
        # Blocked from before it can progress: only a finish at ``start`` itself would do, and
        # no finish comes before ``start + remaining / fastest`` (no segment runs faster).
        if start + remaining / self.ladder.rate_within[-1] > limit:
            return None
        finish = finish_time(self.ladder, held, remaining, start, deadline, p)
        return finish if finish is not None and finish <= limit else None


def kept_delivers(
    job: JobState,
    ladder: Ladder,
    reservation: Reservation,
    view: ClusterView,
    *,
    pay_kept_changes: bool = False,
) -> bool:
    """``Demand.of_job(job, ladder, view, keep_held=True, pay_kept_changes=...)
    .delivered_by(reservation)``, without making the demand: a policy keeping its plan asks
    this of every guaranteed job at every decision, and almost every answer is yes, so the
    demand is made only for the others."""
    pause = view.restart_pause_s if job.started_s is not None else 0.0
    now, resume = view.now, job.resume_s
    start = now if now >= resume else resume
    held_deadline = job.spec.deadline_s
    deadline = held_deadline - pause
    remaining = job.remaining_iterations
    change_pause = view.restart_pause_s if pay_kept_changes else 0.0
    if delivers(ladder, reservation, remaining, start, deadline, change_pause):
        return True
    held = job.workers
    return (
        held_deadline > deadline
        and bool(reservation)
        and all(count == held for _, _, count in reservation)
        and delivers(ladder, reservation, remaining, start, held_deadline)
    )


def leftover(plan: Plan, now: float, capacity: int) -> FreeProfile:
    """The free workers over time that ``plan``'s reservations leave (a copy: yours to consume)."""
    if plan.free is not None and plan.free.starts[0] <= now:
        profile = FreeProfile(now, capacity)
        profile.starts, profile.free = list(plan.free.starts), list(plan.free.free)
        return profile
    profile = FreeProfile(now, capacity)
    for reservation in plan.reservations.values():
        if not take(reservation, now, profile):
            raise ValueError("the plan's reservations exceed the capacity")
    return profile


_ORDER = operator.attrgetter("order")  # a demand's sort key, without a Python call per demand


def plan_demands(
    demands: Sequence[Demand],
    now: float,
    capacity: int,
    keep: Mapping[str, Reservation] | None = None,
    profile: FreeProfile | None = None,
    shape: str = "front",
) -> Plan:
    """Minimum satisfactory shares in ``order`` on the future free workers.

    With ``keep``, a demand whose kept reservation still delivers keeps it, and only the others
    are planned, on what the kept reservations leave. ``profile`` plans on workers already partly
    taken (it is consumed) instead of the whole ``capacity``. ``shape`` is how a share is laid
    out in time: ``front`` (one share from now until done) or ``artifact`` (`artifact_share`; a
    job it cannot satisfy is failed but still planned, by `artifact_fallback`, as the artifact
    does).
    """
    if shape not in SHARE_SHAPES:
        raise ValueError(f"unknown share shape {shape!r}; use {', '.join(SHARE_SHAPES)}")
    if profile is None:
        profile = FreeProfile(now, capacity)
    plan = Plan()
    ordered = sorted(demands, key=_ORDER)
    to_plan = ordered
    if keep:
        delivering = [
            demand
            for demand in ordered
            if (reservation := keep.get(demand.job_id)) is not None
            and demand.delivered_by(reservation)
        ]
        # All at once when they fit together on a fresh profile (what taking each in turn
        # gives when none misfits); otherwise one by one, a misfit re-planned.
        if len(profile.starts) == 1 and take_all(
            [keep[d.job_id] for d in delivering], now, profile
        ):
            taken = {d.job_id for d in delivering}
            to_plan = [demand for demand in ordered if demand.job_id not in taken]
            for demand in delivering:
                plan.reservations[demand.job_id] = keep[demand.job_id]
        else:
            to_plan = []
            delivers_now = {d.job_id for d in delivering}
            for demand in ordered:
                reservation = keep.get(demand.job_id)
                if demand.job_id in delivers_now and take(reservation, now, profile):
                    plan.reservations[demand.job_id] = reservation
                else:
                    to_plan.append(demand)
    _plan_in_order(to_plan, now, profile, shape, plan)
    plan.free = profile
    return plan


def plan_failing_fewer(
    demands: Sequence[Demand], now: float, capacity: int, than: int
) -> Plan | None:
    """``plan_demands(demands, now, capacity)`` if it fails fewer than ``than`` demands, else
    None: a caller choosing between plans by how many jobs they fail needs no more. Found
    without planning what comes after the ``than``-th failure (failures only add up, in order).
    """
    if than <= 0:
        return None  # no plan fails fewer than none
    profile = FreeProfile(now, capacity)
    plan = Plan()
    if not _plan_in_order(sorted(demands, key=_ORDER), now, profile, "front", plan, than):
        return None
    plan.free = profile
    return plan


def _plan_in_order(
    to_plan: Sequence[Demand],
    now: float,
    profile: FreeProfile,
    shape: str,
    plan: Plan,
    fail_limit: int | None = None,
) -> bool:
    """Plan each demand in turn on ``profile`` into ``plan``; False, part done, as soon as
    ``fail_limit`` of them have failed."""
    for demand in to_plan:
        if shape == "artifact":
            reservation = artifact_share(
                demand.ladder, demand.remaining, demand.start, demand.deadline, profile
            )
            if reservation is None:
                plan.failed.append(demand.job_id)
                if fail_limit is not None and len(plan.failed) >= fail_limit:
                    return False
                reservation = artifact_fallback(
                    demand.ladder, demand.remaining, demand.start, profile
                )
            plan.reservations[demand.job_id] = reservation
            continue
        found = minimum_share(
            demand.ladder, demand.remaining, demand.start, demand.deadline, profile
        )
        if found is None:
            # A re-size would cost a pause it cannot afford; staying on its count costs none.
            finish = demand.keep_held(profile, now)
            found = None if finish is None else (demand.held, finish)
        if found is None:
            plan.failed.append(demand.job_id)
            if fail_limit is not None and len(plan.failed) >= fail_limit:
                return False
            continue
        share, finish = found
        plan.reservations[demand.job_id] = reserve(demand.ladder, share, now, finish, profile)
    return True
