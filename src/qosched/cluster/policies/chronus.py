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
that starts a lease after waiting with a lease of work it did not do, ``charge_resumes`` its
resume cost, which it counts at every lease a job runs on spare workers, and
``whole_second_estimates`` its estimates, which it cuts to whole seconds.

While nothing runs and nothing waits to be judged, the boundaries before the first planned lease
change nothing but the lease count, so Chronus asks to be woken at that lease's boundary instead
and counts the ones between at its next decision, where the backend's clock allows it
(``DecisionClock.skips_idle``): a job planned just before a deadline a year away costs a few
decisions, not a hundred thousand.

``selection="mip"`` takes the artifact's other path, the one it takes with Gurobi and the one
the Chronus paper describes: at every boundary a MIP (`select_leases`) plans every guaranteed
job's leases afresh, all at once, and falls back to the greedy selection only when it finds no
plan.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from qosched.cluster.artifact import ArtifactDecision
from qosched.cluster.policies.base import Policy, register
from qosched.cluster.state import ClusterView, Decision, JobState

SPARE_RULES = ("all", "artifact")
SELECTIONS = ("greedy", "mip")
MIP_OBJECTIVES = ("minimize", "maximize")
#: The artifact's time limit for one lease selection MIP (``MIPSolver.job_selection``).
MIP_TIME_LIMIT_S = 5.0
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


def select_leases(
    asks: list[_Ask], capacity: int, objective: str, time_limit_s: float = MIP_TIME_LIMIT_S
) -> dict[str, list[int]] | None:
    """The artifact's lease selection MIP (``MIPSolver.job_selection``), solved by HiGHS.

    Every ask takes exactly its ``leases`` of the leases before its horizon (binary X[ask,
    lease]), no lease holds more than ``capacity`` workers at the asks' packing sizes, and the
    workers the asks take in the current lease (lease 0) are minimised or maximised
    (``objective``), weighted by size over capacity as the artifact weighs them. Returns each
    ask's plan, the leases counted from the current one, ascending, or None when the MIP is
    infeasible or the time limit passes before a plan is found.
    """
    # NOTE: imported here: scipy.optimize is slow to load, and every `qosched sim cluster` run
    # that never selects by MIP would pay for it (bench/cluster_sim_speed.py times the command).
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_array

    if objective not in MIP_OBJECTIVES:
        raise ValueError(f"unknown MIP objective {objective!r}; use {', '.join(MIP_OBJECTIVES)}")
    if not asks:
        return {}
    if any(ask.leases > ask.horizon or ask.size > capacity for ask in asks):
        return None
    horizons = _capped_horizons(asks)
    offsets = np.concatenate(([0], np.cumsum(horizons)))
    n = int(offsets[-1])
    # One row per ask: its leases sum to what it needs. The artifact's option variables S are
    # left out: each job has a single deadline, so its group's "exactly one option" fixes S = 1.
    rows = np.repeat(np.arange(len(asks)), horizons)
    leases = np.arange(n) - np.repeat(offsets[:-1], horizons)
    sizes = np.repeat([float(ask.size) for ask in asks], horizons)
    need = np.array([float(ask.leases) for ask in asks])
    sums = coo_array((np.ones(n), (rows, np.arange(n))), shape=(len(asks), n))
    loads = coo_array((sizes, (leases, np.arange(n))), shape=(max(horizons), n))
    # The artifact adds the term with a plus for "maximize" and a minus for "minimize" to an
    # objective it maximises; milp minimises.
    sign = 1.0 if objective == "minimize" else -1.0
    cost = np.zeros(n)
    cost[offsets[:-1]] = sign * np.array([ask.size for ask in asks]) / capacity
    result = milp(
        cost,
        integrality=np.ones(n),
        bounds=Bounds(0.0, 1.0),
        constraints=[
            LinearConstraint(sums.tocsr(), need, need),
            LinearConstraint(loads.tocsr(), -np.inf, float(capacity)),
        ],
        options={"time_limit": time_limit_s},
    )
    if result.x is None:
        return None
    taken = result.x > 0.5
    return {
        ask.job_id: [int(lease) for lease in np.flatnonzero(taken[offsets[i] : offsets[i + 1]])]
        for i, ask in enumerate(asks)
    }


def _capped_horizons(asks: list[_Ask]) -> list[int]:
    """Each ask's horizon, those reaching furthest cut to the leases they can need there.

    Past the furthest of the other horizons only the asks with the furthest horizon can take a
    lease, and the leases there are alike to the objective (only lease 0 counts) and hold any one
    ask each (its size is at most the capacity). So as many leases as those asks need in all,
    counted from there, admit every plan the full horizon admits: without the cut, one deadline
    a million leases ahead (`pack`'s test) would make a million-variable MIP. Lease 0 is kept
    out of the cut: what those asks take there is what the objective weighs.
    """
    furthest = max(ask.horizon for ask in asks)
    last = [ask for ask in asks if ask.horizon == furthest]
    before = max((ask.horizon for ask in asks if ask.horizon < furthest), default=0)
    cap = min(furthest, max(before, 1) + sum(ask.leases for ask in last))
    return [min(ask.horizon, cap) for ask in asks]


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
        whole_second_estimates: bool = False,
        selection: str = "greedy",
        mip_time_limit_s: float = MIP_TIME_LIMIT_S,
    ) -> None:
        if not math.isfinite(lease_s) or lease_s <= 0:
            raise ValueError(f"lease_s must be finite and > 0, got {lease_s}")
        if spare not in SPARE_RULES:
            raise ValueError(f"unknown spare rule {spare!r}; use {', '.join(SPARE_RULES)}")
        if selection not in SELECTIONS:
            raise ValueError(f"unknown selection {selection!r}; use {', '.join(SELECTIONS)}")
        if not math.isfinite(mip_time_limit_s) or mip_time_limit_s <= 0:
            raise ValueError(f"mip_time_limit_s must be finite and > 0, got {mip_time_limit_s}")
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
        # True: a job's estimate is cut to whole seconds before its leases are counted, as the
        # artifact's ``int()`` cuts its ``estimate_duration``: an estimate within a second past
        # a multiple of the lease then needs as many leases as that multiple, not one more.
        self.whole_second_estimates = whole_second_estimates
        # "mip": every boundary replans all guaranteed jobs with `select_leases`, the greedy
        # selection only where that finds no plan (the artifact's ``flush_lease_jobs``).
        self.selection = selection
        self.mip_time_limit_s = mip_time_limit_s
        # The artifact's ``adaptive`` MIP objective: minimise the guaranteed workers in the
        # current lease while some deadline job it does not guarantee can still meet its
        # deadline (they get the spare workers), else maximise them. Counted at the end of each
        # boundary, for the next, as the artifact counts ``number_of_accepted``.
        self._others_hopeful = False
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
        # The boundary the last decision asked to be woken at when it skipped those before it,
        # at which nothing would have changed (`_wake_s`); None when it skipped none.
        self._skipped_to: int | None = None

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
        if self._skipped_to is not None:
            self._pass_skipped(index, view.now, self._skipped_to)
            self._skipped_to = None
        credit: dict[str, float] = {}
        charge: dict[str, float] = {}
        if index > self._lease_index:
            self._lease_index = index
            self._boundary(view, index, alive)
            credit, self._credit = self._credit, {}
            charge, self._charge = self._charge, {}
        workers = {j: g for j, g in self._workers.items() if j in alive}
        # Nothing left to decide about: waking at every boundary would never end the run.
        wake = self._wake_s(view, index) if view.jobs else None
        if self.credit_waited_lease or self.charge_resumes:  # the artifact's own accounting
            return ArtifactDecision(workers, wake, credit_s=credit, charge_s=charge)
        return Decision(workers, wake)

    def _wake_s(self, view: ClusterView, index: int) -> float:
        """The next boundary; while `_idle`, the first at which a plan's lease comes due, where
        the backend lets the boundaries between be skipped (``DecisionClock.skips_idle``)."""
        first = min((s.plan[0] for s in self._jobs.values() if s.plan), default=None)
        if first is not None and first > self._base and self._idle():
            # Lease ``_base`` is the next boundary's, ``index + 1``.
            target = index + 1 + (first - self._base)
            wake = target * self.lease_s
            if view.clock.skips_idle(self.lease_s, wake):
                self._skipped_to = target
                return wake
        return (index + 1) * self.lease_s

    def _idle(self) -> bool:
        """Whether, until an event, every boundary before the first planned lease would only
        move the lease count on: nothing runs or was lent spare workers (so none fits them),
        no arrival waits to be judged, every guaranteed job holds a plan (none to plan or to
        find overrun), and the greedy selection keeps plans (the MIP replans at each)."""
        return (
            self.selection == "greedy"
            and not self._workers
            and not self._arrivals
            and all(s.plan for s in self._jobs.values() if s.guaranteed)
        )

    def _pass_skipped(self, index: int, now: float, skipped_to: int) -> None:
        """Count the boundaries the last decision skipped, up to the one it asked for, that a
        decision at each would have handled before now (those before ``index``, and ``index``
        when now is past it) as handled: as `_idle` promised, each would only have moved the
        lease count on."""
        passed = index if now > index * self.lease_s else index - 1
        last = min(passed, skipped_to - 1)
        if last > self._lease_index:
            self._base += last - self._lease_index
            self._lease_index = last

    def _boundary(self, view: ClusterView, index: int, alive: dict[str, JobState]) -> None:
        """A lease boundary: guarantees shrunk or dropped, the waiting guaranteed jobs planned,
        the lease starting handed out, arrivals admitted, the spare lent."""
        total = view.cluster.total_workers
        self._shrink_guarantees(alive)
        if self.selection == "mip" and self._select_by_mip(alive, index, total):
            waiting = []
        else:
            waiting = self._waiting(alive, index)
        self._plan_greedily(waiting, total)
        workers = self._start_lease(alive)
        # Guaranteed jobs starting their lease after a wait (not running in the last one).
        resumed = {j for j in workers if j not in self._workers}
        if self.credit_waited_lease:
            self._credit = dict.fromkeys(resumed, self.lease_s)
        self._held.pop(self._base, None)
        self._base += 1
        judged = self._admit_arrivals(alive, index + 1, total, index * self.lease_s)
        lent = self._lend_spare(view, alive, dict(workers), total)
        if self.selection == "mip":
            self._others_hopeful = any(
                not s.guaranteed
                and alive[j].spec.deadline_s is not None
                and (j in judged or not self._past_hope(view, alive[j], s))
                for j, s in self._jobs.items()
            )
        if self.charge_resumes:
            self._charge_resumes(lent, resumed, workers)
        self._workers = lent

    def _shrink_guarantees(self, alive: dict[str, JobState]) -> None:
        """Each guaranteed job's plan shrunk to what it still needs; one out of leases and
        plan loses its guarantee (overrun)."""
        for state_id, state in self._jobs.items():
            if state.guaranteed:
                self._shrink(state, alive[state_id])
                if state.leases_left <= 0 and not state.plan:
                    state.guaranteed, state.overrun, state.plan = False, True, None

    def _plan_greedily(self, waiting: list[_Ask], total: int) -> None:
        """Plan the ``waiting`` jobs one at a time, as the artifact's greedy selection does: a
        job that no longer fits loses its guarantee and leaves the leases it would have taken
        to the others. Each plan is packed against the leases the plans before it in this loop
        took at their packing size, and held from then on at the job's own count
        (`_promised_free` next time)."""
        free = self._promised_free(total)
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

    def _start_lease(self, alive: dict[str, JobState]) -> dict[str, int]:
        """The workers of the jobs whose plan holds the lease starting now (``_base``), each
        plan's first lease taken."""
        workers: dict[str, int] = {}
        for job_id, state in self._jobs.items():
            if state.plan and state.plan[0] == self._base:
                workers[job_id] = alive[job_id].spec.requested_workers
                state.leases_left -= 1
                del state.plan[0]
        return workers

    def _charge_resumes(
        self, lent: dict[str, int], resumed: set[str], workers: dict[str, int]
    ) -> None:
        """A job given workers after a wait (resumed, or lent spare workers) pays a restart."""
        for job_id, g in lent.items():
            if job_id in resumed or job_id not in workers:
                cost = _RESUME_COST_S * (1 + math.log2(g))
                self._charge[job_id] = cost
                self._jobs[job_id].charged_s += cost

    def _waiting(self, alive: dict[str, JobState], index: int) -> list[_Ask]:
        """The guaranteed jobs still without a plan."""
        return [
            self._ask(alive[j], s, index)
            for j, s in self._jobs.items()
            if s.guaranteed and s.plan is None and s.leases_left > 0
        ]

    def _select_by_mip(self, alive: dict[str, JobState], index: int, total: int) -> bool:
        """Replan every guaranteed job at once with `select_leases`; False, changing nothing,
        where it finds no plan (the artifact's MIP then yields None values, its use of them
        raises and its bare ``except`` takes the greedy selection)."""
        jobs = {j: s for j, s in self._jobs.items() if s.guaranteed and s.leases_left > 0}
        if not jobs:
            return True
        objective = "minimize" if self._others_hopeful else "maximize"
        asks = [self._ask(alive[j], s, index) for j, s in jobs.items()]
        plans = select_leases(asks, total, objective, self.mip_time_limit_s)
        if plans is None:
            return False
        for job_id, state in jobs.items():
            self._release(state.plan or (), state.workers)
            state.plan = [self._base + lease for lease in plans[job_id]]
            self._hold(state.plan, state.workers)
        return True

    def _admit_arrivals(
        self, alive: dict[str, JobState], index: int, total: int, boundary_s: float
    ) -> set[str]:
        """Judge the arrivals against the leases from ``index`` on, in arrival order (with
        ``boundary_clock``, only those from before the boundary at ``boundary_s``); returns
        the ids judged."""
        later = [
            job
            for job in self._arrivals
            if self.boundary_clock and job.spec.submit_s > boundary_s + _EPS
        ]
        waiting = {job.job_id for job in later}
        judged: set[str] = set()
        for job in self._arrivals:
            if job.job_id not in alive or job.job_id in waiting:
                continue
            judged.add(job.job_id)
            rate = job.curve.rate(job.spec.requested_workers)
            g = job.spec.requested_workers
            coef = 1 + (1 + math.log2(g)) * _RESUME_COST_S / self.lease_s
            estimate = job.remaining_iterations / rate * coef * _ESTIMATE_MARGIN
            if self.whole_second_estimates:
                estimate = float(math.floor(estimate))
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
        return judged

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
        planned_left_s = state.estimate_s - self._done_s(job, state)
        if not self._past_hope(view, job, state):
            return (2, planned_left_s * g, job.spec.submit_s)
        assert deadline is not None  # a job without one is never past hope
        if self.spare == "artifact":
            return (3, -(view.now + planned_left_s - deadline) * g, job.spec.submit_s)
        return (3, planned_left_s * g, job.spec.submit_s)

    def _past_hope(self, view: ClusterView, job: JobState, state: _Lease) -> bool:
        """Whether a deadline job can no longer meet it on its own workers (the artifact's
        ``LOWEST``)."""
        deadline = job.spec.deadline_s
        g = job.spec.requested_workers
        left_s = job.spec.iterations / job.curve.rate(g) - self._done_s(job, state)
        return deadline is not None and deadline < view.now + left_s

    @staticmethod
    def _done_s(job: JobState, state: _Lease) -> float:
        """Run time the job has to its credit on its own workers, as the artifact counts it."""
        return job.iterations_done / job.curve.rate(job.spec.requested_workers) + state.charged_s
