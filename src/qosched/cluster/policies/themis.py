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
(the cluster has room at the optimum) the artifact's order is whichever point its solver returns:
``solver="ecos"`` hands ECOS (the optional ``ecos`` package) the very problem cvxpy builds for it
in the artifact, rows and columns in the artifact's job order, and takes its ``x``
(docs/results/fidelity.md, ``themis``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from qosched.cluster.policies.base import Policy, greedy_requested, register
from qosched.cluster.state import ClusterView, Decision, JobState
from qosched.core.errors import InputError

RATIOS = ("sound", "artifact")
#: "closed-form": bisection on the ratio bound, the least sufficient fraction where there is room.
#: "ecos": the point ECOS returns on the artifact's cvxpy problem (needs the ``ecos`` package).
SOLVERS = ("closed-form", "ecos")
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


def _require_ecos() -> None:
    """ECOS is an optional dependency: say how to get it before a run starts, not midway."""
    try:
        import ecos  # noqa: F401
    except ImportError as error:
        raise InputError(
            "themis(solver='ecos'), which --fidelity artifact sets, needs the ecos package: "
            "pip install 'qosched[fidelity]'"
        ) from error


def ecos_fractions(terms: list[FairnessTerms], capacity: int) -> list[float]:
    """The time fractions ECOS returns for the artifact's minimax problem, with its defaults.

    This is the standard form cvxpy 1.9 hands ECOS for ``themis_sim_jobs`` (checked entry for
    entry against dumps from the artifact): variables (t, x_1..x_n, s_1..s_n), minimise t
    subject to (waited_i + work_i s_i) / alone_i <= t, 0 <= x_i <= 1, sum(workers_i x_i) <=
    capacity, and s_i >= 1 / (speed_i x_i) as the cone (speed_i x_i + s_i, speed_i x_i - s_i, 2).
    The order of ``terms`` is the order of the rows and columns, which ECOS's iterates depend on.
    With one job the artifact's problem has another form, and any fraction runs it alone: 1.
    """
    n = len(terms)
    if n <= 1:
        return [1.0] * n
    _require_ecos()
    import ecos
    from scipy import sparse

    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    h: list[float] = []

    def entry(row: int, col: int, value: float) -> None:
        rows.append(row)
        cols.append(col)
        vals.append(value)

    for i, term in enumerate(terms):  # the epigraph of the largest ratio
        # cvxpy divides by a constant as a product with its inverse: the same floats.
        inverse = 1.0 / term.alone
        entry(i, 0, -1.0)
        entry(i, n + 1 + i, term.work * inverse)
        h.append(-(term.waited_s * inverse))
    for i in range(n):  # x >= 0
        entry(n + i, 1 + i, -1.0)
        h.append(0.0)
    for i in range(n):  # x <= 1
        entry(2 * n + i, 1 + i, 1.0)
        h.append(1.0)
    for i, term in enumerate(terms):  # the cluster's GPUs
        entry(3 * n, 1 + i, float(term.workers))
    h.append(float(capacity))
    for i, term in enumerate(terms):  # s_i >= 1 / (speed_i x_i)
        row = 3 * n + 1 + 3 * i
        entry(row, 1 + i, -term.speed)
        entry(row, n + 1 + i, -1.0)
        entry(row + 1, 1 + i, -term.speed)
        entry(row + 1, n + 1 + i, 1.0)
        h.extend((0.0, 0.0, 2.0))
    shape = (len(h), 2 * n + 1)
    g = sparse.csc_matrix((vals, (rows, cols)), shape=shape)
    c = np.zeros(shape[1])
    c[0] = 1.0
    dims = {"l": 3 * n + 1, "q": [3] * n, "e": 0}
    solution = ecos.solve(c, g, np.asarray(h), dims, verbose=False)
    return [float(v) for v in solution["x"][1 : n + 1]]


@register("themis")
class Themis(Policy):
    """Finish-time fairness with requested workers; preempts every decision. See the module."""

    def __init__(
        self, ratio: str = "sound", round_s: float = 60.0, solver: str = "closed-form"
    ) -> None:
        if ratio not in RATIOS:
            raise ValueError(f"unknown Themis ratio {ratio!r}; use {', '.join(RATIOS)}")
        if solver not in SOLVERS:
            raise ValueError(f"unknown Themis solver {solver!r}; use {', '.join(SOLVERS)}")
        if solver == "ecos":
            _require_ecos()
        self.solver = solver
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
        rank = {job_id: index for index, job_id in enumerate(self._order)}
        if self.solver == "ecos":
            # The artifact's list of runnable jobs: last round's order, then arrivals.
            jobs.sort(key=lambda job: rank.get(job.job_id, len(rank)))
        capacity = view.cluster.total_workers
        active = frozenset(job.job_id for job in jobs)
        if active != self._active:  # an arrival or completion: the artifact's event time
            self._event_s = view.now
            self._active = active
        now = self._event_s if self.ratio == "artifact" else view.now
        share = math.ceil(capacity / len(jobs)) if jobs else 0
        terms = [self._terms(job, now, share) for job in jobs]
        if self.solver == "ecos":
            fractions = ecos_fractions(terms, capacity)
            # As the artifact: decreasing x, a stable sort of its runnable list.
            keyed = sorted(zip(jobs, fractions, terms, strict=True), key=lambda item: -item[1])
        else:
            fractions = minimax_fractions(terms, capacity)
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
