"""ElasticFlow (Gu et al., ASPLOS'23): admission by Minimum Satisfactory Share, elastic scaling.

- A job's Minimum Satisfactory Share (MSS) is the fewest GPUs ``g`` such that, running on
  ``min(g, free GPUs)`` at every moment from now to its deadline, it finishes in time. Free GPUs
  are what earlier-deadline jobs leave over time, so plans are made in deadline order on a
  piecewise-constant profile of future free GPUs.
- Admission: a new job is admitted only if every admitted job and it still get an MSS.
- Allocation, re-planned at every arrival and completion: each admitted job gets its plan's
  count for now; spare GPUs go one doubling at a time to the job with the largest marginal
  throughput gain per added GPU (in single-GPU units, so models compare); best-effort jobs and
  jobs whose plan broke (restart pauses can do that) take part only in this second step.
- Counts are powers of two and placed largest first, which is buddy allocation.

A job that has run before is planned with one restart pause taken off its time to the deadline,
since re-sizing it will cost that pause.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Sequence

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
            if done + gained >= remaining:
                return t0 + (remaining - done) / rate
            done += gained
        if index == last:
            break
        index += 1
        t0 = t1
    return None


def _reserve(ladder: _Ladder, share: int, start: float, finish: float, p: FreeProfile) -> int:
    """Take the job's GPUs out of the profile from ``start`` (now: a job in a restart pause holds
    its GPUs) until ``finish``; return its count at ``start``."""
    first = p.split(start)
    end = p.split(finish)
    best, free, starts = ladder.best, p.free, p.starts
    now_count = best[share if share < free[first] else free[first]]
    for index in range(first, end):
        available = free[index]
        free[index] = available - best[share if share < available else available]
    # Merge neighbours left equal, so the profile stays as short as the plan needs.
    index = end if end < len(free) else end - 1
    while index > first and index > 0:
        if free[index] == free[index - 1]:
            del free[index], starts[index]
        index -= 1
    if first > 0 and first < len(free) and free[first] == free[first - 1]:
        del free[first], starts[first]
    return now_count


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
        if rate_within[share] < needed:
            continue  # too slow even with the whole window to itself
        finish = _finish_time(ladder, share, remaining, start, deadline, p)
        if finish is not None:
            return share, finish
    return None


@register("elasticflow")
class ElasticFlow(Policy):
    """ElasticFlow's admission control and elastic allocation, as described in the module."""

    largest_first = True

    def __init__(self) -> None:
        # The plan made while admitting, reused by the allocation at the same instant.
        self._cached: tuple[float, frozenset[str], dict[str, int]] | None = None

    def _plan(
        self, jobs: Sequence[JobState], view: ClusterView
    ) -> tuple[dict[str, int], list[JobState]]:
        """Plan deadline jobs in deadline order: (count now per planned job, jobs that failed)."""
        profile = FreeProfile(view.now, view.cluster.total_gpus)
        counts: dict[str, int] = {}
        failed: list[JobState] = []
        for job in sorted(jobs, key=lambda j: (j.spec.deadline_s, j.spec.submit_s)):
            ladder = _ladder(job.curve)
            start = max(view.now, job.resume_s)
            deadline = job.spec.deadline_s - (view.restart_pause_s if job.has_started else 0.0)
            found = _mss(ladder, job, start, deadline, profile)
            if found is None:
                failed.append(job)
                continue
            share, finish = found
            counts[job.job_id] = _reserve(ladder, share, view.now, finish, profile)
        return counts, failed

    def admit(self, job: JobState, view: ClusterView) -> bool:
        if job.spec.deadline_s is None:
            return True
        deadline_jobs = [j for j in view.jobs if j.spec.deadline_s is not None]
        counts, failed = self._plan([*deadline_jobs, job], view)
        if failed:
            # Jobs that were already unsatisfiable before this arrival do not block it.
            _, failed_before = self._plan(deadline_jobs, view)
            if not {j.job_id for j in failed} <= {j.job_id for j in failed_before}:
                return False
        ids = frozenset(j.job_id for j in deadline_jobs) | {job.job_id}
        self._cached = (view.now, ids, counts)
        return True

    def allocate(self, view: ClusterView) -> Decision:
        deadline_jobs = [j for j in view.jobs if j.spec.deadline_s is not None]
        ids = frozenset(j.job_id for j in deadline_jobs)
        cached, self._cached = self._cached, None
        if cached is not None and cached[0] == view.now and cached[1] == ids:
            counts = cached[2]
        else:
            counts, _ = self._plan(deadline_jobs, view)
        free = view.cluster.total_gpus - sum(counts.values())
        order = sorted(counts, key=counts.__getitem__, reverse=True)
        gpus = {job_id: counts[job_id] for job_id in order if counts[job_id]}
        if free > 0:
            self._hand_out_spare(view.jobs, gpus, free)
        return Decision(gpus)

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
