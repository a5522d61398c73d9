"""ElasticFlow (Gu et al., ASPLOS'23): admission by Minimum Satisfactory Share, elastic scaling.

- A job's Minimum Satisfactory Share (MSS) is the fewest workers ``g`` such that, running on
  ``min(g, free workers)`` at every moment from now to its deadline, it finishes in time. Free
  workers are what earlier-deadline jobs leave over time, so plans are made in deadline order on
  a piecewise-constant profile of future free workers.
- Admission: a new job is admitted only if it gets an MSS in the future free capacity and no
  admitted job loses its own.
- Allocation, re-planned at every arrival and completion: each admitted job gets its plan's
  count for now; spare workers go one doubling at a time to the job with the largest marginal
  throughput gain per added worker (in single-worker units, so models compare); best-effort jobs and
  jobs whose plan broke (restart pauses can do that) take part only in this second step.
- Counts are powers of two and placed largest first, which is buddy allocation.

Two details the paper leaves open, settled so that admitted deadlines hold (tests check this on
generated traces with free restarts):
- Re-planning from scratch can fail a job the plan in force satisfies: with power-of-two counts,
  an earlier job's smaller recomputed share can leave workers a later job cannot use. The plan in
  force is kept as reservations; when a fresh plan fails a job the plan in force did not, the
  policy keeps every reservation that still delivers and plans only the rest, and takes
  whichever plan fails fewer jobs.
- A plan changes counts at future times (when an earlier job's reservation ends). The policy
  asks to be woken then, so the plan is applied on time even if no job arrives or finishes.

A job that has run before is planned with one restart pause taken off its time to the deadline,
since re-sizing it will cost that pause.

The ElasticFlow artifact (``pkusys/ElasticFlow``, ``scheduler/scheduler.py``) differs in two
choices, each an option here (docs/results/fidelity.md): ``admission="artifact"`` turns away every
arrival whose joint deadline-ordered plan fails *any* job, an admitted one included, and plans
from scratch at every decision with no plan in force to fall back on (``estimate_all_jobs``);
``spare_order="artifact"`` hands spare workers to waiting jobs first, then to the job whose
GPU-time grows the *most* per added worker (``allocate_free_gpus``, ``get_marginal``);
``share_shape="artifact"`` lays a minimum share out as ``ef_sim_allocation`` does
(`qosched.cluster.planning.artifact_share`), and still plans a job no share satisfies, on its
fastest count within what earlier-deadline jobs leave, from now until done
(`qosched.cluster.planning.artifact_fallback`): under overload the artifact's late jobs hold
workers ahead of those that can still make it.

Those three options approximate the artifact on qosched's continuous-time planner.
``planner="artifact"`` instead runs the artifact's own arithmetic (`qosched.cluster.artifact_plan`:
plans on the decision's slot grid, spare GPUs weighed by re-planned GPU-time), admits the arrivals
of one decision together, asks for no wake-up at plan changes, and hands the simulator each job's
planned end and the artifact's layout order (``ArtifactDecision.planned_end``, ``layout_order``).
``--fidelity artifact`` uses it; docs/results/fidelity.md compares it with the artifact decision by
decision.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from qosched.cluster.artifact import ArtifactDecision
from qosched.cluster.artifact_plan import ArtifactPlanner, PlannedJob
from qosched.cluster.planning import (
    SHARE_SHAPES,
    Demand,
    Ladder,
    Plan,
    Reservation,
    plan_demands,
)
from qosched.cluster.policies.base import Policy, register
from qosched.cluster.state import ClusterView, Decision, JobState
from qosched.cluster.throughput import SpeedCurve

_LADDERS: dict[tuple[str, int], tuple[SpeedCurve, Ladder]] = {}


def _ladder(curve: SpeedCurve) -> Ladder:
    """The measured speeds on the available power-of-two counts (cached per curve)."""
    key = (curve.model, curve.batch_size)
    cached = _LADDERS.get(key)
    if cached is None or cached[0] is not curve:
        powers = [1 << i for i in range(curve.max_workers.bit_length())]
        cached = _LADDERS[key] = (curve, Ladder(curve.speeds, powers))
    return cached[1]


@register("elasticflow")
class ElasticFlow(Policy):
    """ElasticFlow's admission control and elastic allocation, as described in the module."""

    largest_first = True
    honours_requests = False
    promises_deadlines = True

    def __init__(
        self,
        *,
        admission: str = "sound",
        spare_order: str = "gain",
        share_shape: str = "front",
        planner: str = "qosched",
        slot_s: float = 60.0,
    ) -> None:
        if admission not in ("sound", "artifact"):
            raise ValueError(f"unknown admission {admission!r}; use sound or artifact")
        if spare_order not in ("gain", "artifact"):
            raise ValueError(f"unknown spare order {spare_order!r}; use gain or artifact")
        if share_shape not in SHARE_SHAPES:
            raise ValueError(f"unknown share shape {share_shape!r}; use front or artifact")
        self.admission = admission
        self.spare_order = spare_order
        if planner not in ("qosched", "artifact"):
            raise ValueError(f"unknown planner {planner!r}; use qosched or artifact")
        if not slot_s > 0:
            raise ValueError(f"slot_s must be > 0, got {slot_s}")
        self.share_shape = share_shape
        self.planner = planner
        self.slot_s = slot_s
        # The artifact admits the arrivals of one decision together, all or none.
        self.admits_together = planner == "artifact"
        self._kept: dict[str, Reservation] = {}  # reservations of the plan in force
        self._failed: set[str] = set()  # deadline jobs the plan in force cannot satisfy
        self._admitted: set[str] = set()  # deadline jobs admitted by their plan
        # The plan made while admitting, reused by the allocation at the same instant.
        self._cached: tuple[float, frozenset[str], Plan] | None = None

    def _plan(
        self,
        jobs: Sequence[JobState],
        view: ClusterView,
        keep: dict[str, Reservation] | None = None,
    ) -> Plan:
        """Deadline order on measured speeds."""
        demands = [Demand.of_job(job, _ladder(job.curve), view) for job in jobs]
        return plan_demands(
            demands, view.now, view.cluster.total_workers, keep, shape=self.share_shape
        )

    def _best_plan(self, jobs: Sequence[JobState], view: ClusterView) -> Plan:
        """A fresh plan; when it fails a job the plan in force did not, the plan in force (kept
        reservations) if that fails fewer: shares recomputed from scratch can strand workers a later
        job counted on."""
        fresh = self._plan(jobs, view)
        if self.admission == "artifact" or not self._kept or set(fresh.failed) <= self._failed:
            return fresh
        kept = self._plan(jobs, view, keep=self._kept)
        return kept if len(kept.failed) < len(fresh.failed) else fresh

    def _adopt(self, plan: Plan) -> None:
        self._kept = plan.reservations
        self._failed = set(plan.failed)

    def _artifact_plan(
        self, jobs: Sequence[JobState], view: ClusterView
    ) -> tuple[ArtifactPlanner, list[PlannedJob], bool]:
        planner = ArtifactPlanner(view.now, view.cluster.total_workers, self.slot_s)
        ordered = sorted(jobs, key=lambda j: (j.spec.deadline_s, j.spec.submit_s))
        planned = [
            PlannedJob.of(j.job_id, j.curve, j.remaining_iterations, j.spec.deadline_s)
            for j in ordered
        ]
        met = planner.plan_all(planned)
        return planner, planned, met

    def admit_together(self, jobs: Sequence[JobState], view: ClusterView) -> bool:
        """``planner="artifact"``: the arrivals of one decision are admitted if the joint plan of
        every admitted job and all of them meets every deadline, else all are declined."""
        deadline_jobs = [j for j in view.jobs if j.spec.deadline_s is not None]
        arrivals = [j for j in jobs if j.spec.deadline_s is not None]
        if not arrivals:
            return True
        admitted = self._artifact_plan([*deadline_jobs, *arrivals], view)[2]
        if admitted:
            self._admitted.update(j.job_id for j in arrivals)
        return admitted

    def admit(self, job: JobState, view: ClusterView) -> bool:
        if job.spec.deadline_s is None:
            return True
        if self.planner == "artifact":
            return self.admit_together([job], view)
        deadline_jobs = [j for j in view.jobs if j.spec.deadline_s is not None]
        plan = self._best_plan([*deadline_jobs, job], view)
        failed = set(plan.failed)
        if job.job_id in failed or (self.admission == "artifact" and failed):
            return False
        # Admit only if the newcomer fails no job that is not failing without it.
        if not failed <= self._failed and not failed <= set(
            self._best_plan(deadline_jobs, view).failed
        ):
            return False
        ids = frozenset(j.job_id for j in deadline_jobs) | {job.job_id}
        self._cached = (view.now, ids, plan)
        self._adopt(plan)
        self._admitted.add(job.job_id)
        return True

    def is_guaranteed(self, job_id: str) -> bool:
        """A deadline job is admitted only when its plan meets its deadline (the paper's
        guarantee); one the plan in force has since failed (a restart pause can do that) is no
        longer guaranteed."""
        return job_id in self._admitted and job_id not in self._failed

    def _allocate_as_artifact(self, view: ClusterView) -> ArtifactDecision:
        """The artifact's plan and spare hand-out (:mod:`qosched.cluster.artifact_plan`); jobs in
        the order it lays out their GPUs, each with the real end its plan judges."""
        deadline_jobs = [j for j in view.jobs if j.spec.deadline_s is not None]
        planner, planned, _ = self._artifact_plan(deadline_jobs, view)
        order = planner.hand_out(planned)
        order = sorted(order, key=lambda p: -p.gpus)  # stable: the artifact's size sort
        workers = {p.job_id: p.gpus for p in order if p.gpus}
        planned_end = {p.job_id: p.real_end for p in order}
        # Jobs without a deadline (none in the artifact's traces) share what is left, in
        # submission order, each on the largest power of two that fits.
        free = view.cluster.total_workers - sum(workers.values())
        best_effort = [j for j in view.jobs if j.spec.deadline_s is None]
        for job in sorted(best_effort, key=lambda j: j.spec.submit_s):
            count = _ladder(job.curve).within(free)
            if count:
                workers[job.job_id] = count
                free -= count
        return ArtifactDecision(workers, planned_end=planned_end, layout_order=tuple(workers))

    def allocate(self, view: ClusterView) -> Decision:
        if self.planner == "artifact":
            return self._allocate_as_artifact(view)
        deadline_jobs = [j for j in view.jobs if j.spec.deadline_s is not None]
        ids = frozenset(j.job_id for j in deadline_jobs)
        cached, self._cached = self._cached, None
        if cached is not None and cached[0] == view.now and cached[1] == ids:
            plan = cached[2]
        else:
            plan = self._best_plan(deadline_jobs, view)
        self._adopt(plan)
        counts = {job_id: plan.count_now(job_id, view.now) for job_id in plan.reservations}
        free = view.cluster.total_workers - sum(counts.values())
        order = sorted(counts, key=counts.__getitem__, reverse=True)
        workers = {job_id: counts[job_id] for job_id in order if counts[job_id]}
        if free > 0 and self.spare_order == "artifact":
            self._hand_out_spare_as_artifact(view, workers, free)
        elif free > 0:
            self._hand_out_spare(view.jobs, workers, free)
        return Decision(workers, wake_at=plan.next_change(view.now))

    @staticmethod
    def _hand_out_spare(jobs: Sequence[JobState], workers: dict[str, int], free: int) -> None:
        """Doublings, best marginal gain per added worker first, while workers are free."""
        heap: list[tuple[float, int, JobState]] = []

        def push(position: int, job: JobState) -> None:
            ladder = _ladder(job.curve)
            if not ladder.counts:
                return
            current = workers.get(job.job_id, 0)
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
            current = workers.get(job.job_id, 0)
            step = next(g for g in _ladder(job.curve).counts if g > current)
            if step - current > free:
                continue
            workers[job.job_id] = step
            free -= step - current
            push(position, job)

    @staticmethod
    def _hand_out_spare_as_artifact(view: ClusterView, workers: dict[str, int], free: int) -> None:
        """The artifact's order: one doubling at a time, up to the job's fastest measured count
        (the artifact's per-model ``max_gpu``, ``models.py``, is that count on the A100 tables),
        a job holding no worker first, then the job whose remaining GPU-time grows the most per
        added worker."""

        def priority(job: JobState) -> tuple[bool, float] | None:
            current = workers.get(job.job_id, 0)
            step = _next_step(job, current)
            if not step or step - current > free:
                return None
            if not current:
                return (True, 0.0)
            growth = job.remaining_iterations * (
                step / job.curve.rate(step) - current / job.curve.rate(current)
            )
            return (False, growth / (step - current))

        while free > 0:
            ranked = [
                (key, position, job)
                for position, job in enumerate(view.jobs)
                if (key := priority(job)) is not None
            ]
            if not ranked:
                return
            # Waiting jobs first, then largest growth, then view order (the artifact's stable sort).
            _, _, job = min(ranked, key=lambda item: (not item[0][0], -item[0][1], item[1]))
            current = workers.get(job.job_id, 0)
            step = _next_step(job, current)
            workers[job.job_id] = step
            free -= step - current


def _next_step(job: JobState, current: int) -> int:
    """The next power of two above ``current`` up to the job's fastest measured count; 0 if none."""
    curve = job.curve
    fastest = max(curve.measured, key=curve.rate)
    return next((g for g in _ladder(curve).counts if current < g <= fastest), 0)
