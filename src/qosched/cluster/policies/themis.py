"""Themis: finish-time fairness (Mahajan et al., NSDI 2020), as the ElasticFlow artifact runs it.

A job's finish-time fairness ratio is the time it would take sharing the cluster over the time it
would take alone on a 1/n share of it (n the active jobs). At each decision the policy finds the
time fractions ``x`` (each in [0, 1], the cluster's GPUs shared as sum(requested x) <= total) that
minimise the largest ratio, then runs jobs on their requested workers in decreasing ``x`` until
the cluster is full, skipping a job that does not fit. The minimax problem has a closed form:
each ratio falls as its job's ``x`` grows, so the optimum is the smallest ratio bound ``t`` whose
fractions fit the cluster, found here by bisection instead of a convex solver.

``ratio="artifact"`` keeps the artifact's own estimate (``scheduler.py`` ``themis_sim_jobs``): the
isolated time is counted in iterations over the share fraction (``utils.py``
``get_isolated_throughputs`` returns the fraction, not a speed), and the time waited so far is
measured from the last arrival or completion, not from now. Where the minimax has many solutions
(the cluster has room at the optimum) the artifact's order is whichever its solver returns, which
qosched does not reproduce (docs/results/fidelity.md, ``themis``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from qosched.cluster.policies.base import Policy, greedy_requested, register
from qosched.cluster.state import ClusterView, Decision, JobState

RATIOS = ("sound", "artifact")
#: Bisection steps on the ratio bound: each halves the interval, so 100 reach float precision.
_BISECTION_STEPS = 100


@dataclass(frozen=True, slots=True)
class FairnessTerms:
    """One job's ratio as a function of its time fraction x: (waited + work / (speed x)) / alone."""

    waited_s: float
    work: float  # remaining iterations
    speed: float  # iterations/s on the requested workers
    alone: float  # isolated finish time (see ``ratio``)
    workers: int

    def ratio(self, x: float) -> float:
        return (self.waited_s + self.work / (self.speed * x)) / self.alone

    def fraction(self, bound: float) -> float:
        """The smallest x in (0, 1] whose ratio is at most ``bound``, or 1 if none is."""
        slack = bound * self.alone - self.waited_s
        if slack <= 0:
            return 1.0
        return min(1.0, self.work / (self.speed * slack))


def minimax_fractions(terms: list[FairnessTerms], capacity: int) -> list[float]:
    """Time fractions minimising the largest ratio with sum(workers x) <= capacity.

    When the cluster has room to spare at the smallest possible bound (every job at x = 1 reaches
    it), jobs get the fraction that just meets that bound, so the order still ranks them by need.
    """
    if not terms:
        return []
    low = max(term.ratio(1.0) for term in terms)

    def used(bound: float) -> float:
        return sum(term.workers * term.fraction(bound) for term in terms)

    if used(low) > capacity:
        high = low * 2 + 1
        while used(high) > capacity:
            high *= 2
        for _ in range(_BISECTION_STEPS):
            mid = (low + high) / 2
            if used(mid) > capacity:
                low = mid
            else:
                high = mid
        low = high
    return [term.fraction(low) for term in terms]


@register("themis")
class Themis(Policy):
    """Finish-time fairness with requested workers; preempts every decision. See the module."""

    def __init__(self, ratio: str = "sound", round_s: float = 60.0) -> None:
        if ratio not in RATIOS:
            raise ValueError(f"unknown Themis ratio {ratio!r}; use {', '.join(RATIOS)}")
        if not (math.isfinite(round_s) and round_s > 0):
            raise ValueError(f"round_s must be a positive number of seconds, got {round_s}")
        self.ratio = ratio
        # Ratios drift as jobs wait, so the policy re-decides every round (the artifact's slot).
        self.round_s = round_s
        # Per job: the isolated time already banked, and the remaining work and isolated speed
        # seen at the previous decision, to bank the progress made since.
        self._banked: dict[str, float] = {}
        self._last: dict[str, tuple[float, float]] = {}
        self._order: list[str] = []  # the previous decision's order: ties keep it, as a stable sort
        self._active: frozenset[str] = frozenset()
        self._event_s = 0.0

    def allocate(self, view: ClusterView) -> Decision:
        jobs = [job for job in view.jobs if job.remaining_iterations > 0]
        capacity = view.cluster.total_workers
        active = frozenset(job.job_id for job in jobs)
        if active != self._active:  # an arrival or completion: the artifact's event time
            self._event_s = view.now
            self._active = active
        now = self._event_s if self.ratio == "artifact" else view.now
        share = math.ceil(capacity / len(jobs)) if jobs else 0
        terms = [self._terms(job, now, share) for job in jobs]
        fractions = minimax_fractions(terms, capacity)
        rank = {job_id: index for index, job_id in enumerate(self._order)}
        keyed = sorted(
            zip(jobs, fractions, terms, strict=True),
            key=lambda item: (
                -item[1],
                -item[2].ratio(1.0),  # at x = 1 the neediest first
                rank.get(item[0].job_id, len(rank)),
                item[0].spec.submit_s,
            ),
        )
        ordered = [job for job, _, _ in keyed]
        self._order = [job.job_id for job in ordered]
        for job_id in list(self._banked):
            if job_id not in active:
                del self._banked[job_id], self._last[job_id]
        wake_at = view.now + self.round_s if jobs else None
        return Decision(greedy_requested(ordered, capacity), wake_at)

    def _terms(self, job: JobState, now: float, share: int) -> FairnessTerms:
        workers = job.spec.requested_workers
        speed = job.curve.rate(workers)
        fraction = min(1.0, share / workers)
        # The artifact divides iterations by the fraction alone (no speed): its isolated "time".
        isolated_speed = fraction if self.ratio == "artifact" else speed * fraction
        work = job.remaining_iterations
        banked = self._banked.get(job.job_id, 0.0)
        last = self._last.get(job.job_id)
        if last is not None:
            banked += (last[0] - work) / last[1]
        self._banked[job.job_id] = banked
        self._last[job.job_id] = (work, isolated_speed)
        alone = banked + work / isolated_speed
        return FairnessTerms(now - job.spec.submit_s, work, speed, alone, workers)
