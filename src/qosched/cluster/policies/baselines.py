"""Baselines that give each job the workers its user requested, in different orders."""

from __future__ import annotations

import math

from qosched.cluster.policies.base import Policy, greedy_requested, register
from qosched.cluster.state import ClusterView, Decision, JobState, Phase


@register("fifo")
class Fifo(Policy):
    """First come, first served, never preempting: the default Kubernetes scheduler's behaviour.

    Running jobs keep their workers; waiting jobs start in arrival order when their request fits,
    and a job that does not fit does not block smaller ones behind it (pods are scheduled one by
    one).
    """

    def allocate(self, view: ClusterView) -> Decision:
        running = [job for job in view.jobs if job.phase is Phase.RUNNING]
        free = view.cluster.total_workers - sum(job.workers for job in running)
        workers = {job.job_id: job.workers for job in running}
        waiting = (job for job in view.jobs if job.phase is not Phase.RUNNING)
        workers.update(greedy_requested(waiting, free))
        return Decision(workers)


def _deadline_key(job: JobState) -> tuple[float, float]:
    deadline = job.spec.deadline_s
    return (math.inf if deadline is None else deadline, job.spec.submit_s)


#: The ElasticFlow artifact's EDF never gives a job more GPUs than this (``jobs.py`` ``max_gpu``).
ARTIFACT_EDF_MAX_WORKERS = 64
EDF_SIZINGS = ("requested", "artifact")


@register("edf")
class EarliestDeadlineFirst(Policy):
    """Earliest deadline first, preemptive; best-effort jobs go last.

    ``sizing="requested"`` (default) runs each job on the workers its user requested. The
    ElasticFlow artifact's EDF (``sizing="artifact"``, ``scheduler.py`` ``edf_sim_allocation``)
    ignores the request: in deadline order each job gets its quota, the largest measured count
    capped by its batch size and 64, or when fewer workers are free the largest measured count
    that fits them.
    """

    def __init__(self, sizing: str = "requested") -> None:
        if sizing not in EDF_SIZINGS:
            raise ValueError(f"unknown EDF sizing {sizing!r}; use {', '.join(EDF_SIZINGS)}")
        self.sizing = sizing
        self.honours_requests = sizing == "requested"

    def allocate(self, view: ClusterView) -> Decision:
        ordered = sorted(view.jobs, key=_deadline_key)
        if self.sizing == "requested":
            return Decision(greedy_requested(ordered, view.cluster.total_workers))
        free = view.cluster.total_workers
        workers: dict[str, int] = {}
        for job in ordered:
            measured = job.curve.measured
            quota = min(max(measured), job.spec.batch_size, ARTIFACT_EDF_MAX_WORKERS, free)
            if quota not in measured:
                quota = max((g for g in measured if g <= quota), default=0)
            if quota:
                workers[job.job_id] = quota
                free -= quota
            if not free:
                break
        return Decision(workers)


@register("srtf")
class ShortestRemainingTimeFirst(Policy):
    """Shortest remaining time (on the requested workers) first, preemptive."""

    def allocate(self, view: ClusterView) -> Decision:
        def remaining_s(job: JobState) -> tuple[float, float]:
            return (
                job.remaining_iterations / job.curve.rate(job.spec.requested_workers),
                job.spec.submit_s,
            )

        ordered = sorted(view.jobs, key=remaining_s)
        return Decision(greedy_requested(ordered, view.cluster.total_workers))


@register("las")
class LeastAttainedService(Policy):
    """Tiresias' discretised two-dimensional least-attained-service (2D-LAS), preemptive.

    Attained service is worker-seconds (workers x time held, restart pauses included). Jobs sit in
    priority queues split at ``thresholds_worker_s``; a lower queue always goes first, first come
    first served inside a queue. The policy wakes itself when a running job crosses into the
    next queue. Tiresias' starvation promotion is not modelled.
    """

    def __init__(self, thresholds_worker_s: tuple[float, ...] = (3600.0, 36000.0)) -> None:
        if list(thresholds_worker_s) != sorted(thresholds_worker_s) or any(
            t <= 0 for t in thresholds_worker_s
        ):
            raise ValueError(f"thresholds must be positive and increasing: {thresholds_worker_s}")
        self.thresholds = tuple(thresholds_worker_s)

    def _queue(self, attained: float) -> int:
        for index, threshold in enumerate(self.thresholds):
            # A tiny tolerance so a job woken exactly at its threshold counts as having crossed it.
            if attained < threshold * (1 - 1e-9):
                return index
        return len(self.thresholds)

    def allocate(self, view: ClusterView) -> Decision:
        ordered = sorted(
            view.jobs, key=lambda job: (self._queue(job.attained_worker_s), job.spec.submit_s)
        )
        workers = greedy_requested(ordered, view.cluster.total_workers)
        wake_at = math.inf
        for job in ordered:
            g = workers.get(job.job_id, 0)
            queue = self._queue(job.attained_worker_s)
            if g and queue < len(self.thresholds):
                crossing = view.now + (self.thresholds[queue] - job.attained_worker_s) / g
                wake_at = min(wake_at, crossing)
        return Decision(workers, None if math.isinf(wake_at) else wake_at)
