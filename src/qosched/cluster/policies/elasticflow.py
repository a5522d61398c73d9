"""ElasticFlow (Gu et al., ASPLOS'23): admission by Minimum Satisfactory Share, elastic scaling.

- A job's Minimum Satisfactory Share (MSS) is the fewest GPUs ``g`` such that, running on
  ``min(g, free GPUs)`` at every moment from now to its deadline, it finishes in time. Free GPUs
  are what earlier-deadline jobs leave over time, so plans are made in deadline order on a
  piecewise-constant profile of future free GPUs.
- Admission: a new job is admitted only if it gets an MSS in the future free capacity and no
  admitted job loses its own.
- Allocation, re-planned at every arrival and completion: each admitted job gets its plan's
  count for now; spare GPUs go one doubling at a time to the job with the largest marginal
  throughput gain per added GPU (in single-GPU units, so models compare); best-effort jobs and
  jobs whose plan broke (restart pauses can do that) take part only in this second step.
- Counts are powers of two and placed largest first, which is buddy allocation.

Two details the paper leaves open, settled so that admitted deadlines hold (tests check this on
generated traces with free restarts):
- Re-planning from scratch can fail a job the plan in force satisfies: with power-of-two counts,
  an earlier job's smaller recomputed share can leave GPUs a later job cannot use. The plan in
  force is kept as reservations; when a fresh plan fails a job the plan in force did not, the
  policy keeps every reservation that still delivers and plans only the rest, and takes
  whichever plan fails fewer jobs.
- A plan changes counts at future times (when an earlier job's reservation ends). The policy
  asks to be woken then, so the plan is applied on time even if no job arrives or finishes.

A job that has run before is planned with one restart pause taken off its time to the deadline,
since re-sizing it will cost that pause.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from qosched.cluster.policies.base import Policy, register
from qosched.cluster.state import ClusterView, Decision, JobState
from qosched.cluster.throughput import SpeedCurve


class FreeProfile:
    """Free GPUs over future time: segment ``i`` covers ``[starts[i], starts[i+1])``, the last
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


class _Ladder:
    """A job's allowed counts (available powers of two) and, for any budget, the best one in it."""

    __slots__ = ("best", "counts", "curve", "rate_within")

    def __init__(self, curve: SpeedCurve) -> None:
        self.curve = curve
        powers = [1 << i for i in range(curve.max_gpus.bit_length())]
        self.counts = [g for g in powers if curve.available(g)]
        # best[b]: count <= b with the highest speed (fewest GPUs on ties); 0 when none fits.
        best, top = [0] * (curve.max_gpus + 1), 0
        for budget in range(1, curve.max_gpus + 1):
            if (
                curve.available(budget)
                and budget in self.counts
                and (top == 0 or curve.rate(budget) > curve.rate(top))
            ):
                top = budget
            best[budget] = top
        self.best = best
        # rate_within[b]: speed on the best count within budget b (0 for b = 0).
        self.rate_within = [curve.rate(g) if g else 0.0 for g in best]

    def within(self, budget: int) -> int:
        return self.best[min(budget, len(self.best) - 1)] if budget > 0 else 0


_LADDERS: dict[tuple[str, int], _Ladder] = {}


def _ladder(curve: SpeedCurve) -> _Ladder:
    key = (curve.model, curve.batch_size)
    ladder = _LADDERS.get(key)
    if ladder is None or ladder.curve is not curve:
        ladder = _LADDERS[key] = _Ladder(curve)
    return ladder


def _finish_time(
    ladder: _Ladder, share: int, remaining: float, start: float, deadline: float, p: FreeProfile
) -> float | None:
    """When the job finishes on ``min(share, free)`` GPUs from ``start``; None if after deadline."""
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
            if done + gained >= remaining * (1 - _TOLERANCE) - _TOLERANCE:
                return min(t1, t0 + (remaining - done) / rate)
            done += gained
        if index == last:
            break
        index += 1
        t0 = t1
    return None


# A job's reservation in a plan: (start, end, GPUs) segments.
Reservation = list[tuple[float, float, int]]

# Slack for float rounding (relative, and absolute in iterations): a plan that meets a deadline
# exactly must still count as met, and a job a rounding error short of done as done.
_TOLERANCE = 1e-9


def _reserve(
    ladder: _Ladder, share: int, start: float, finish: float, p: FreeProfile
) -> Reservation:
    """Take the job's GPUs out of the profile from ``start`` (now: a job in a restart pause holds
    its GPUs) until ``finish``; return the reservation."""
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
    _merge(p, first, end)
    return reservation


def _merge(p: FreeProfile, first: int, end: int) -> None:
    """Merge neighbours in ``[first - 1, end]`` left equal, so the profile stays short."""
    free, starts = p.free, p.starts
    index = end if end < len(free) else end - 1
    while index > first and index > 0:
        if free[index] == free[index - 1]:
            del free[index], starts[index]
        index -= 1
    if 0 < first < len(free) and free[first] == free[first - 1]:
        del free[first], starts[first]


def _take(reservation: Reservation, now: float, p: FreeProfile) -> bool:
    """Take a kept reservation (from ``now`` on) out of the profile; False, untouched, if it no
    longer fits."""
    parts = [(max(s, now), e, c) for s, e, c in reservation if e > now and c]
    for start, end, count in parts:
        first, last = p.split(start), p.split(end)
        if min(p.free[first:last]) < count:
            return False
    for start, end, count in parts:
        first, last = p.split(start), p.split(end)
        for index in range(first, last):
            p.free[index] -= count
    return True


def _delivers(job: JobState, reservation: Reservation, start: float, deadline: float) -> bool:
    """Whether running on ``reservation`` from ``start`` finishes the job by ``deadline``."""
    rate, done = job.curve.rate, 0.0
    for s, e, count in reservation:
        s, e = max(s, start), min(e, deadline)
        if e > s and count:
            done += rate(count) * (e - s)
    return done >= job.remaining_iterations * (1 - _TOLERANCE) - _TOLERANCE


def _mss(ladder: _Ladder, job: JobState, start: float, deadline: float, p: FreeProfile):
    """(share, finish) with the fewest GPUs that meets ``deadline``, or None."""
    remaining = job.remaining_iterations
    counts = ladder.counts
    if not counts or deadline <= start:
        return None
    # No share slower than remaining / (deadline - start) can make it, whatever is free.
    needed = remaining / (deadline - start)
    rate_within = ladder.rate_within
    # Fewest GPUs first: under light load the first candidate usually fits.
    for share in counts:
        if rate_within[share] < needed * (1 - _TOLERANCE):
            continue  # too slow even with the whole window to itself
        finish = _finish_time(ladder, share, remaining, start, deadline, p)
        if finish is not None:
            return share, finish
    return None


@dataclass(slots=True)
class _Plan:
    """Reservations of the planned deadline jobs, and the jobs no reservation could satisfy."""

    reservations: dict[str, Reservation] = field(default_factory=dict)
    failed: list[JobState] = field(default_factory=list)

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
        return next((c for s, e, c in reservation if s <= now < e), 0)


def _by_deadline(job: JobState) -> tuple[float, float]:
    return (job.spec.deadline_s, job.spec.submit_s)


@register("elasticflow")
class ElasticFlow(Policy):
    """ElasticFlow's admission control and elastic allocation, as described in the module."""

    largest_first = True

    def __init__(self) -> None:
        self._kept: dict[str, Reservation] = {}  # reservations of the plan in force
        self._failed: set[str] = set()  # deadline jobs the plan in force cannot satisfy
        # The plan made while admitting, reused by the allocation at the same instant.
        self._cached: tuple[float, frozenset[str], _Plan] | None = None

    def _plan(
        self,
        jobs: Sequence[JobState],
        view: ClusterView,
        keep: dict[str, Reservation] | None = None,
    ) -> _Plan:
        """Minimum satisfactory shares in deadline order on the future free GPUs.

        With ``keep``, a job whose kept reservation still meets its deadline keeps it, and only
        the others are planned, on what the kept reservations leave.
        """
        profile = FreeProfile(view.now, view.cluster.total_gpus)
        plan = _Plan()
        ordered = sorted(jobs, key=_by_deadline)
        windows = {
            job.job_id: (
                max(view.now, job.resume_s),
                job.spec.deadline_s - (view.restart_pause_s if job.has_started else 0.0),
            )
            for job in ordered
        }
        to_plan = ordered
        if keep:
            to_plan = []
            for job in ordered:
                reservation = keep.get(job.job_id)
                start, deadline = windows[job.job_id]
                if (
                    reservation is not None
                    and _delivers(job, reservation, start, deadline)
                    and _take(reservation, view.now, profile)
                ):
                    plan.reservations[job.job_id] = reservation
                else:
                    to_plan.append(job)
        for job in to_plan:
            ladder = _ladder(job.curve)
            start, deadline = windows[job.job_id]
            found = _mss(ladder, job, start, deadline, profile)
            if found is None:
                plan.failed.append(job)
                continue
            share, finish = found
            plan.reservations[job.job_id] = _reserve(ladder, share, view.now, finish, profile)
        return plan

    def _best_plan(self, jobs: Sequence[JobState], view: ClusterView) -> _Plan:
        """A fresh plan; when it fails a job the plan in force did not, the plan in force (kept
        reservations) if that fails fewer: shares recomputed from scratch can strand GPUs a later
        job counted on."""
        fresh = self._plan(jobs, view)
        if not self._kept or {j.job_id for j in fresh.failed} <= self._failed:
            return fresh
        kept = self._plan(jobs, view, keep=self._kept)
        return kept if len(kept.failed) < len(fresh.failed) else fresh

    def _adopt(self, plan: _Plan) -> None:
        self._kept = plan.reservations
        self._failed = {j.job_id for j in plan.failed}

    def admit(self, job: JobState, view: ClusterView) -> bool:
        if job.spec.deadline_s is None:
            return True
        deadline_jobs = [j for j in view.jobs if j.spec.deadline_s is not None]
        plan = self._best_plan([*deadline_jobs, job], view)
        failed = {j.job_id for j in plan.failed}
        if job.job_id in failed:
            return False
        # Admit only if the newcomer fails no job that is not failing without it.
        if not failed <= self._failed and not failed <= {
            j.job_id for j in self._best_plan(deadline_jobs, view).failed
        }:
            return False
        ids = frozenset(j.job_id for j in deadline_jobs) | {job.job_id}
        self._cached = (view.now, ids, plan)
        self._adopt(plan)
        return True

    def allocate(self, view: ClusterView) -> Decision:
        deadline_jobs = [j for j in view.jobs if j.spec.deadline_s is not None]
        ids = frozenset(j.job_id for j in deadline_jobs)
        cached, self._cached = self._cached, None
        if cached is not None and cached[0] == view.now and cached[1] == ids:
            plan = cached[2]
        else:
            plan = self._best_plan(deadline_jobs, view)
        self._adopt(plan)
        counts = {job_id: plan.count_now(job_id, view.now) for job_id in plan.reservations}
        free = view.cluster.total_gpus - sum(counts.values())
        order = sorted(counts, key=counts.__getitem__, reverse=True)
        gpus = {job_id: counts[job_id] for job_id in order if counts[job_id]}
        if free > 0:
            self._hand_out_spare(view.jobs, gpus, free)
        return Decision(gpus, wake_at=plan.next_change(view.now))

    @staticmethod
    def _hand_out_spare(jobs: Sequence[JobState], gpus: dict[str, int], free: int) -> None:
        """Doublings, best marginal gain per added GPU first, while GPUs are free."""
        heap: list[tuple[float, int, JobState]] = []

        def push(position: int, job: JobState) -> None:
            ladder = _ladder(job.curve)
            if not ladder.counts:
                return
            current = gpus.get(job.job_id, 0)
            bigger = [g for g in ladder.counts if g > current]
            if not bigger:
                return
            step = bigger[0]
            unit = job.curve.rate(ladder.counts[0]) / ladder.counts[0]
            gain = (job.curve.rate(step) - job.curve.rate(current)) / unit / (step - current)
            if gain > 0:
                heapq.heappush(heap, (-gain, position, job))

        for position, job in enumerate(jobs):
            push(position, job)
        while heap and free > 0:
            _, position, job = heapq.heappop(heap)
            current = gpus.get(job.job_id, 0)
            step = next(g for g in _ladder(job.curve).counts if g > current)
            if step - current > free:
                continue
            gpus[job.job_id] = step
            free -= step - current
            push(position, job)
