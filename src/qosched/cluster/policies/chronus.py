"""Chronus (Gao et al., SoCC'21): deadline admission and allocation in fixed-length leases.

Time is cut into leases of ``lease_s``. A job runs on the workers its user requested, and needs
``ceil(estimate / lease_s)`` leases, where the estimate pads the runtime on those workers for its
checkpoint-resume cost and by a tenth. An arriving job is guaranteed when a greedy packing of the
guaranteed jobs not yet planned, plus itself, still fits every job's leases before its deadline
around the leases already promised; otherwise it runs only on spare workers. At each lease
boundary every guaranteed job without a plan gets one (latest-fitting leases first, so guaranteed
work waits near its deadline and early leases stay spare), a plan once given is kept, the jobs
whose plan holds the current lease run, and spare workers go to the rest.

This follows the ElasticFlow artifact's Chronus (``chronus-scheduler/``, ``--schedule
time-aware-with-lease``) on its greedy path, the one it takes without a Gurobi licence.
``spare="artifact"`` reproduces its spare rule: only jobs it does not guarantee get spare workers,
fewest remaining worker-seconds first, hopeless ones last and latest first. The default
``spare="all"`` also lends them to guaranteed jobs waiting for their leases, earliest deadline
first: running early can only shorten their plans, whereas the artifact leaves those workers
idle. ``credit_waited_lease`` reproduces its progress accounting, which credits a guaranteed job
that starts a lease after waiting with a lease of work it did not do, and ``charge_resumes`` its
resume cost, which it counts at every lease a job runs on spare workers.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from qosched.cluster.policies.base import Policy, register
from qosched.cluster.state import ClusterView, Decision, JobState

SPARE_RULES = ("all", "artifact")
#: The artifact's per-resume cost per worker-doubling (checkpoint 0.1 s + resume 0.4 s), spread
#: over a lease, and the margin it pads estimates with (``time_aware_with_lease.py``).
_RESUME_COST_S = 0.5
_ESTIMATE_MARGIN = 1.1
# Clock comparisons: a boundary reached within this much counts as reached.
_EPS = 1e-6


def packing_size(workers: int) -> int:
    """The worker count a job takes in lease packing: 3 and 5-7 round up to a power of two."""
    if workers in (5, 6, 7):
        return 8
    if workers == 3:
        return 4
    return workers


@dataclass(slots=True)
class _Lease:
    """What Chronus keeps about one job."""

    estimate_s: float
    leases_left: int
    guaranteed: bool
    workers: int  # what it runs on, in each lease its plan holds
    # The leases it holds, ascending, numbered by Chronus's boundary count (``Chronus._base`` is
    # the current one). Kept sparse: a plan's deadline may lie a million leases ahead.
    plan: list[int] | None = None
    overrun: bool = False  # used up its leases unfinished: first in line for spare workers
    # Resume costs charged so far (``Chronus.charge_resumes``): the artifact adds them to the
    # run time it ends a job at, so its progress, unlike the simulator's, runs ahead of them.
    charged_s: float = 0.0


class LeaseFree:
    """Workers left in each lease from the current one on (``free[0]`` is the current lease):
    ``total`` less what the plans in force hold there (``held``, by boundary count from
    ``base``; shared, never copied) less what this packing has taken itself. Leases no plan
    reaches have all ``total``, however far ahead."""

    __slots__ = ("_taken", "base", "held", "total")

    def __init__(
        self,
        total: int,
        held: dict[int, int] | None = None,
        base: int = 0,
        taken: dict[int, int] | None = None,
    ) -> None:
        self.total = total
        self.held = {} if held is None else held
        self.base = base
        self._taken: dict[int, int] = {} if taken is None else taken

    def __getitem__(self, lease: int) -> int:
        number = self.base + lease
        return self.total - self.held.get(number, 0) - self._taken.get(number, 0)

    def take(self, lease: int, workers: int) -> None:
        number = self.base + lease
        self._taken[number] = self._taken.get(number, 0) + workers

    def copy(self) -> LeaseFree:
        """The same leases; what the copy takes leaves this one as it is."""
        return LeaseFree(self.total, self.held, self.base, dict(self._taken))


@dataclass(frozen=True, slots=True)
class _Ask:
    """One job to pack: its packing size, leases still needed and the leases before its deadline."""

    job_id: str
    size: int
    leases: int
    horizon: int


def pack(asks: list[_Ask], free: LeaseFree) -> dict[str, list[int]] | None:
    """Greedy lease packing: largest first, then least slack, each in its latest-fitting leases.

    ``free`` holds the workers left in each lease from now on (taken from in place). Returns each
    ask's plan, the leases it takes counted from the current one, ascending, or None as soon as
    one does not fit.
    """
    plans: dict[str, list[int]] = {}
    for ask in sorted(asks, key=lambda a: (-a.size, a.horizon - a.leases, -a.horizon)):
        if ask.leases > ask.horizon:
            return None
        taken: list[int] = []
        for index in range(ask.horizon - 1, -1, -1):
            if len(taken) == ask.leases:
                break
            if free[index] >= ask.size:
                free.take(index, ask.size)
                taken.append(index)
        if len(taken) < ask.leases:
            return None
        plans[ask.job_id] = taken[::-1]
    return plans


@register("chronus")
class Chronus(Policy):
    """Chronus: lease-based deadline admission, latest-fit lease plans, spare workers lent out."""

    promises_deadlines = True

    def __init__(
        self,
        lease_s: float = 240.0,
        spare: str = "all",
        boundary_clock: bool = False,
        credit_waited_lease: bool = False,
        charge_resumes: bool = False,
    ) -> None:
        if not math.isfinite(lease_s) or lease_s <= 0:
            raise ValueError(f"lease_s must be finite and > 0, got {lease_s}")
        if spare not in SPARE_RULES:
            raise ValueError(f"unknown spare rule {spare!r}; use {', '.join(SPARE_RULES)}")
        self.lease_s = lease_s
        self.spare = spare
        # True: a boundary decided late (no decision came at it: the cluster was empty) judges
        # only the arrivals from before it; later ones wait for the next boundary, as in the
        # artifact, whose clock passes every boundary, idle or not.
        self.boundary_clock = boundary_clock
        # True: a guaranteed job that starts a planned lease after waiting through the last
        # one is credited that lease's work, as the artifact's progress clock does (it counts
        # from its last look at the waiting job, a lease earlier); the lease it then no longer
        # needs is dropped (`_shrink`), so such a job runs every other lease.
        self.credit_waited_lease = credit_waited_lease
        # True: every job run on spare workers in a lease, and every guaranteed job starting a
        # lease after waiting, pays the artifact's resume cost, 0.5 s x (1 + log2 workers),
        # as the artifact counts resumes (a job on spare workers resumes at every boundary).
        self.charge_resumes = charge_resumes
        # For the decision at the current boundary.
        self._credit: dict[str, float] = {}
        self._charge: dict[str, float] = {}
        self._jobs: dict[str, _Lease] = {}
        self._arrivals: list[JobState] = []  # admitted since the last boundary, not yet judged
        self._lease_index = -1  # the lease whose boundary was handled last
        self._workers: dict[str, int] = {}
        # Plans count leases by boundaries handled: ``_base`` is the lease the next boundary
        # runs (index 0 of a `LeaseFree`); ``_held`` the workers the plans hold in each.
        self._base = 0
        self._held: dict[int, int] = {}

    def admit(self, job: JobState, view: ClusterView) -> bool:
        # Judged at the next lease boundary with the other arrivals, as the artifact does; until
        # then the job waits.
        self._arrivals.append(job)
        return True

    def is_guaranteed(self, job_id: str) -> bool:
        state = self._jobs.get(job_id)
        return state is not None and state.guaranteed

    def allocate(self, view: ClusterView) -> Decision:
        alive = {job.job_id: job for job in view.jobs}
        for job_id in [j for j in self._jobs if j not in alive]:
            state = self._jobs.pop(job_id)
            self._release(state.plan or (), state.workers)
        index = math.floor(view.now / self.lease_s + _EPS)
        credit: dict[str, float] = {}
        charge: dict[str, float] = {}
        if index > self._lease_index:
            self._lease_index = index
            self._boundary(view, index, alive)
            credit, self._credit = self._credit, {}
            charge, self._charge = self._charge, {}
        workers = {j: g for j, g in self._workers.items() if j in alive}
        # Nothing left to decide about: waking at every boundary would never end the run.
        wake = (index + 1) * self.lease_s if view.jobs else None
        return Decision(workers, wake, credit_s=credit, charge_s=charge)

    def _boundary(self, view: ClusterView, index: int, alive: dict[str, JobState]) -> None:
        total = view.cluster.total_workers
        for state_id, state in self._jobs.items():
            if state.guaranteed:
                self._shrink(state, alive[state_id])
                if state.leases_left <= 0 and not state.plan:
                    state.guaranteed, state.overrun, state.plan = False, True, None
        free = self._promised_free(total)
        waiting = [
            self._ask(alive[j], s, index)
            for j, s in self._jobs.items()
            if s.guaranteed and s.plan is None and s.leases_left > 0
        ]
        # One at a time, as the artifact's greedy selection does: a job that no longer fits loses
        # its guarantee and leaves the leases it would have taken to the others. Each plan is
        # packed against the leases the plans before it in this loop took at their packing
        # size, and held from then on at the job's own count (`_promised_free` next time).
        planned: list[_Lease] = []
        for ask in sorted(waiting, key=lambda a: (-a.size, a.horizon - a.leases, -a.horizon)):
            trial = free.copy()
            plans = pack([ask], trial)
            state = self._jobs[ask.job_id]
            if plans is None:
                state.guaranteed = False
            else:
                state.plan = [self._base + lease for lease in plans[ask.job_id]]
                planned.append(state)
                free = trial
        for state in planned:
            self._hold(state.plan or (), state.workers)
        for state in self._jobs.values():
            if state.guaranteed and state.plan is None:
                state.guaranteed = False
        workers: dict[str, int] = {}
        current = self._base
        for job_id, state in self._jobs.items():
            if state.plan and state.plan[0] == current:
                workers[job_id] = alive[job_id].spec.requested_workers
                state.leases_left -= 1
                del state.plan[0]
        # Guaranteed jobs starting their lease after a wait (not running in the last one).
        resumed = {j for j in workers if j not in self._workers}
        if self.credit_waited_lease:
            self._credit = dict.fromkeys(resumed, self.lease_s)
        self._held.pop(current, None)
        self._base = current + 1
        self._admit_arrivals(alive, index + 1, total, index * self.lease_s)
        lent = self._lend_spare(view, alive, dict(workers), total)
        if self.charge_resumes:
            for job_id, g in lent.items():
                if job_id in resumed or job_id not in workers:
                    cost = _RESUME_COST_S * (1 + math.log2(g))
                    self._charge[job_id] = cost
                    self._jobs[job_id].charged_s += cost
        self._workers = lent

    def _admit_arrivals(
        self, alive: dict[str, JobState], index: int, total: int, boundary_s: float
    ) -> None:
        """Judge the arrivals against the leases from ``index`` on, in arrival order (with
        ``boundary_clock``, only those from before the boundary at ``boundary_s``)."""
        later = [
            job
            for job in self._arrivals
            if self.boundary_clock and job.spec.submit_s > boundary_s + _EPS
        ]
        waiting = {job.job_id for job in later}
        for job in self._arrivals:
            if job.job_id not in alive or job.job_id in waiting:
                continue
            rate = job.curve.rate(job.spec.requested_workers)
            g = job.spec.requested_workers
            coef = 1 + (1 + math.log2(g)) * _RESUME_COST_S / self.lease_s
            estimate = job.remaining_iterations / rate * coef * _ESTIMATE_MARGIN
            state = _Lease(estimate, math.ceil(estimate / self.lease_s), False, g)
            self._jobs[job.job_id] = state
            if job.spec.deadline_s is None:
                continue
            asks = [
                self._ask(alive[j], s, index)
                for j, s in self._jobs.items()
                if (s.guaranteed and s.plan is None) or j == job.job_id
            ]
            state.guaranteed = pack(asks, self._promised_free(total)) is not None
        self._arrivals = later

    def _ask(self, job: JobState, state: _Lease, index: int) -> _Ask:
        deadline = job.spec.deadline_s
        assert deadline is not None  # only deadline jobs are ever guaranteed
        horizon = math.floor(deadline / self.lease_s + _EPS) - index
        return _Ask(
            job.job_id, packing_size(job.spec.requested_workers), state.leases_left, horizon
        )

    def _promised_free(self, total: int) -> LeaseFree:
        """Workers left in each lease from the current one on, after the plans already given."""
        return LeaseFree(total, self._held, self._base)

    def _hold(self, leases: Iterable[int], workers: int) -> None:
        held = self._held
        for lease in leases:
            held[lease] = held.get(lease, 0) + workers

    def _release(self, leases: Iterable[int], workers: int) -> None:
        held = self._held
        for lease in leases:
            left = held[lease] - workers
            if left:
                held[lease] = left
            else:
                del held[lease]

    def _shrink(self, state: _Lease, job: JobState) -> None:
        """Drop the earliest planned leases a job no longer needs after running on spare."""
        done_s = self._done_s(job, state)
        needed = max(0, math.ceil((state.estimate_s - done_s) / self.lease_s - _EPS))
        surplus = state.leases_left - needed
        if surplus <= 0:
            return
        state.leases_left = needed
        if state.plan is not None:
            self._release(state.plan[:surplus], state.workers)
            del state.plan[:surplus]

    def _lend_spare(
        self,
        view: ClusterView,
        alive: dict[str, JobState],
        workers: dict[str, int],
        total: int,
    ) -> dict[str, int]:
        free = total - sum(workers.values())
        candidates = [
            alive[j]
            for j, s in self._jobs.items()
            if j not in workers and (self.spare == "all" or not s.guaranteed)
        ]
        candidates.sort(key=lambda job: self._spare_key(view, job))
        for job in candidates:
            g = job.spec.requested_workers
            if g <= free:
                workers[job.job_id] = g
                free -= g
        return workers

    def _spare_key(self, view: ClusterView, job: JobState) -> tuple[int, float, float]:
        """Rank for spare workers, smallest first: overrun jobs, then (``spare="all"``) the
        guaranteed by deadline, then the others by least planned work left in worker-seconds,
        then those that can no longer meet their deadline. Under ``spare="artifact"`` the last
        go latest first, by planned lateness x workers (the artifact's ``emergence``): a job
        that ran keeps its lateness while a waiting one's grows, so they take turns."""
        state = self._jobs[job.job_id]
        g = job.spec.requested_workers
        if state.overrun:
            return (0, 0.0, job.spec.submit_s)
        if state.guaranteed:  # only under spare="all": promised work next, by deadline
            return (1, job.spec.deadline_s or math.inf, job.spec.submit_s)
        deadline = job.spec.deadline_s
        done_s = self._done_s(job, state)
        planned_left_s = state.estimate_s - done_s
        if (
            deadline is None
            or deadline >= view.now + job.spec.iterations / job.curve.rate(g) - done_s
        ):
            return (2, planned_left_s * g, job.spec.submit_s)
        if self.spare == "artifact":
            return (3, -(view.now + planned_left_s - deadline) * g, job.spec.submit_s)
        return (3, planned_left_s * g, job.spec.submit_s)

    @staticmethod
    def _done_s(job: JobState, state: _Lease) -> float:
        """Run time the job has to its credit on its own workers, as the artifact counts it."""
        return job.iterations_done / job.curve.rate(job.spec.requested_workers) + state.charged_s
