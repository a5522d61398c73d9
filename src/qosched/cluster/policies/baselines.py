"""Baselines that give each job the workers its user requested, in different orders."""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Sequence

from qosched.cluster.policies.base import Policy, greedy_requested, register
from qosched.cluster.policies.events import AdmitsAll, Changes, Delta
from qosched.cluster.state import ClusterView, Decision, JobState, Phase


def _capacity(total: int | None, changes: Changes, name: str) -> int:
    """The cluster's workers: told at the first call and at every change."""
    if changes.capacity is not None:
        return changes.capacity.total_workers
    if total is None:
        raise ValueError(f"policy {name!r}: the backend's first call must give the capacity")
    return total


@register("fifo")
class Fifo(AdmitsAll, Policy):
    """First come, first served, never preempting: the default Kubernetes scheduler's behaviour.

    Running jobs keep their workers; waiting jobs start in arrival order when their request fits,
    and a job that does not fit does not block smaller ones behind it (pods are scheduled one by
    one).

    Natively event-driven (``decide``): it keeps the waiting jobs in arrival order and the free
    workers, and looks at the waiting jobs only when one could fit.
    """

    def __init__(self) -> None:
        self._total: int | None = None
        self._free = 0
        self._seq: dict[str, int] = {}  # arrival order
        self._waiting: dict[str, JobState] = {}  # in arrival order
        self._sizes: Counter[int] = Counter()  # the waiting jobs' requests
        self._held: dict[str, int] = {}
        self._started: dict[str, int] = {}  # at the last call

    def decide(self, changes: Changes) -> Delta:
        total = _capacity(self._total, changes, self.name)
        if total != self._total:
            self._free += total - (self._total or 0)
            self._total = total
        held, waiting, sizes = self._held, self._waiting, self._sizes
        for job in changes.ended:
            self._free += held.pop(job.job_id, 0)
        for job in changes.arrived:
            self._seq[job.job_id] = len(self._seq)
            waiting[job.job_id] = job
            sizes[job.spec.requested_workers] += 1
        if changes.displaced:  # back to waiting, in its place in arrival order
            for job in changes.displaced:
                self._free += held.pop(job.job_id, 0)
                waiting[job.job_id] = job
                sizes[job.spec.requested_workers] += 1
            self._waiting = waiting = dict(
                sorted(waiting.items(), key=lambda item: self._seq[item[0]])
            )
        started: dict[str, int] = {}
        free = self._free
        if free and waiting and free >= min(n for n, count in sizes.items() if count):
            started = greedy_requested(waiting.values(), free)
            for job_id, n in started.items():
                sizes[waiting.pop(job_id).spec.requested_workers] -= 1
                held[job_id] = n
                free -= n
        self._free, self._started = free, started
        return Delta(started)

    def allocations(self) -> Sequence[tuple[str, int]]:
        """As `allocate` orders them: those running before the last call in arrival order, then
        those it started."""
        before = sorted((j for j in self._held if j not in self._started), key=self._seq.get)
        return [(j, self._held[j]) for j in before] + list(self._started.items())

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


_Entry = tuple[float, float, int, str, int, JobState]

#: The ElasticFlow artifact's EDF never gives a job more GPUs than this (``jobs.py`` ``max_gpu``).
ARTIFACT_EDF_MAX_WORKERS = 64
EDF_SIZINGS = ("requested", "artifact")


@register("edf")
class EarliestDeadlineFirst(AdmitsAll, Policy):
    """Earliest deadline first, preemptive; best-effort jobs go last.

    ``sizing="requested"`` (default) runs each job on the workers its user requested. The
    ElasticFlow artifact's EDF (``sizing="artifact"``, ``scheduler.py`` ``edf_sim_allocation``)
    ignores the request: in deadline order each job gets its quota, the largest measured count
    capped by its batch size and 64, or when fewer workers are free the largest measured count
    that fits them.

    Natively event-driven (``decide``): it keeps the jobs in deadline order as they arrive and
    end, instead of sorting them at every call, stops handing out workers once none of the jobs
    could fit in what is left, and answers with the counts that changed.
    """

    def __init__(self, sizing: str = "requested") -> None:
        if sizing not in EDF_SIZINGS:
            raise ValueError(f"unknown EDF sizing {sizing!r}; use {', '.join(EDF_SIZINGS)}")
        self.sizing = sizing
        self.honours_requests = sizing == "requested"
        self._total: int | None = None
        self._arrived = 0
        # (deadline or inf, submission, arrival, job id, request, job): `sorted` by
        # `_deadline_key` of the jobs in arrival order, kept.
        self._queue: list[_Entry] = []
        self._entry: dict[str, _Entry] = {}
        self._sizes: Counter[int] = Counter()  # the requests of the jobs in the queue
        self._held: dict[str, int] = {}  # the last hand-out
        self._free: int | None = None  # what the last hand-out left (None: unknown)

    def decide(self, changes: Changes) -> Delta:
        total = _capacity(self._total, changes, self.name)
        queue, held, entries = self._queue, self._held, self._entry
        # The hand-out of the jobs left is the last one when the jobs that ended held nothing
        # (they took no worker from a job behind them) or every job left holds its workers.
        free = self._free if total == self._total and not changes.displaced else None
        self._total = total
        ended_held = False
        for job in changes.ended:
            entry = entries.pop(job.job_id)
            del queue[bisect.bisect_left(queue, entry)]
            self._sizes[job.spec.requested_workers] -= 1
            n = held.pop(job.job_id, 0)
            if free is not None:
                free += n
            ended_held = ended_held or n > 0
        for job in changes.displaced:  # handed out again below
            held.pop(job.job_id, None)
        if ended_held and len(queue) != len(held):
            free = None
        for job in changes.arrived:
            deadline, submit = _deadline_key(job)
            want = job.spec.requested_workers
            entry = (deadline, submit, self._arrived, job.job_id, want, job)
            entries[job.job_id] = entry
            self._arrived += 1
            bisect.insort(queue, entry)
            self._sizes[want] += 1
        wants = sum(job.spec.requested_workers for job in changes.arrived)
        if self.sizing == "requested" and free is not None and wants <= free:
            # Arrivals that fit in what the hand-out leaves take it and change no other count:
            # every job behind one of them that held workers had at least that much left over
            # after it, and one that held none still has less than its request.
            self._free = free - wants
            arrived = sorted(entries[job.job_id] for job in changes.arrived)
            delta = {entry[3]: entry[4] for entry in arrived}
            held.update(delta)
            return Delta(delta)
        if self.sizing == "requested":
            chosen, delta = self._requested(total)
            self._free = total - sum(chosen.values())
        else:
            chosen = self._artifact([entry[5] for entry in queue], total)
            delta = {job_id: n for job_id, n in chosen.items() if held.get(job_id) != n}
        # NOTE: a set difference, then in queue order: most held jobs stay held.
        for job_id in sorted(held.keys() - chosen.keys(), key=entries.__getitem__):
            delta[job_id] = 0
        self._held = chosen
        return Delta(delta)

    def _requested(self, free: int) -> tuple[dict[str, int], dict[str, int]]:
        """`greedy_requested` in deadline order, stopped once no job's request fits: every
        job's count, and those that differ from what it holds."""
        chosen: dict[str, int] = {}
        changed: dict[str, int] = {}
        smallest = min((n for n, count in self._sizes.items() if count), default=0)
        if not smallest:
            return chosen, changed
        held = self._held
        for _, _, _, job_id, want, _ in self._queue:
            if want <= free:
                chosen[job_id] = want
                if held.get(job_id) != want:
                    changed[job_id] = want
                free -= want
                if free < smallest:
                    break
        return chosen, changed

    def allocations(self) -> Sequence[tuple[str, int]]:
        """The hand-out in queue order, as `allocate` gives it."""
        held = self._held
        return [(entry[3], held[entry[3]]) for entry in self._queue if entry[3] in held]

    def allocate(self, view: ClusterView) -> Decision:
        ordered = sorted(view.jobs, key=_deadline_key)
        if self.sizing == "requested":
            return Decision(greedy_requested(ordered, view.cluster.total_workers))
        return Decision(self._artifact(ordered, view.cluster.total_workers))

    @staticmethod
    def _artifact(ordered: Sequence[JobState], free: int) -> dict[str, int]:
        """The artifact's quotas, in deadline order."""
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
        return workers


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


#: "exact": a job is in the queue its attained service puts it in, first come first served.
#: "artifact": the ElasticFlow artifact's ``dlas_sim_jobs`` bookkeeping (see ``las``).
LAS_QUEUES = ("exact", "artifact")


@register("las")
class LeastAttainedService(Policy):
    """Tiresias' discretised two-dimensional least-attained-service (2D-LAS), preemptive.

    Attained service is worker-seconds (workers x time held, restart pauses included). Jobs sit in
    priority queues split at ``thresholds_worker_s``; a lower queue always goes first, first come
    first served inside a queue. The policy wakes itself when a running job crosses into the
    next queue. Tiresias' starvation promotion is not modelled.

    ``queues="artifact"`` keeps the queues as the ElasticFlow artifact's ``dlas-gpu``
    (``scheduler.py`` ``dlas_sim_jobs``) does: a job's service is its time running outside
    restart pauses times its workers, checked only at a decision, which moves a job that has
    reached its queue's limit to the back of the next queue; each queue is a list, arrivals at
    its back, and after every decision the jobs left waiting move to its back, so the running
    ones stay ahead of them; the policy wakes at the artifact's "job jump", which divides the
    limit less the running seconds (not worker-seconds) by the workers, and at least a slot on.
    """

    def __init__(
        self,
        thresholds_worker_s: tuple[float, ...] = (3600.0, 36000.0),
        queues: str = "exact",
        slot_s: float = 60.0,
    ) -> None:
        if list(thresholds_worker_s) != sorted(thresholds_worker_s) or any(
            t <= 0 for t in thresholds_worker_s
        ):
            raise ValueError(f"thresholds must be positive and increasing: {thresholds_worker_s}")
        if queues not in LAS_QUEUES:
            raise ValueError(f"unknown LAS queues {queues!r}; use {', '.join(LAS_QUEUES)}")
        if not (math.isfinite(slot_s) and slot_s > 0):
            raise ValueError(f"slot_s must be a positive number of seconds, got {slot_s}")
        self.thresholds = tuple(thresholds_worker_s)
        self.queues = queues
        self.slot_s = slot_s
        # queues="artifact": each queue's job ids in order, and the artifact's list of runnable
        # jobs (by size at the last decision, arrivals after), whose order demotions follow.
        self._lists: list[list[str]] = [[] for _ in range(len(self.thresholds) + 1)]
        self._level: dict[str, int] = {}
        self._runnable: list[str] = []

    def _queue(self, attained: float) -> int:
        for index, threshold in enumerate(self.thresholds):
            # A tiny tolerance so a job woken exactly at its threshold counts as having crossed it.
            if attained < threshold * (1 - 1e-9):
                return index
        return len(self.thresholds)

    def allocate(self, view: ClusterView) -> Decision:
        if self.queues == "artifact":
            return self._allocate_artifact(view)
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

    def _allocate_artifact(self, view: ClusterView) -> Decision:
        jobs = {job.job_id: job for job in view.jobs}
        level = self._level
        for job_id in [j for j in level if j not in jobs]:  # ended
            self._lists[level.pop(job_id)].remove(job_id)
        self._runnable = [j for j in self._runnable if j in jobs]
        for job in view.jobs:
            if job.job_id not in level:  # an arrival: the back of the first queue
                level[job.job_id] = 0
                self._lists[0].append(job.job_id)
                self._runnable.append(job.job_id)
        last = len(self.thresholds)
        for job_id in self._runnable:  # demotions, checked for the jobs that ran
            job = jobs[job_id]
            q = level[job_id]
            served = int(job.active_s) * job.spec.requested_workers
            if job.phase is Phase.RUNNING and q < last and served >= self.thresholds[q]:
                self._lists[q].remove(job_id)
                self._lists[q + 1].append(job_id)
                level[job_id] = q + 1
        free = view.cluster.total_workers
        workers: dict[str, int] = {}
        for queue in self._lists:
            for job_id in queue:
                want = jobs[job_id].spec.requested_workers
                if want <= free:
                    workers[job_id] = want
                    free -= want
        for index, queue in enumerate(self._lists):  # the waiting ones to the back
            self._lists[index] = [j for j in queue if j in workers] + [
                j for j in queue if j not in workers
            ]
        self._runnable.sort(key=lambda j: -jobs[j].spec.requested_workers)
        wake_at = math.inf
        for job_id, g in workers.items():
            q = level[job_id]
            if q < last:
                executed = int(jobs[job_id].active_s)
                jump = int(math.ceil((self.thresholds[q] - executed) / g) + view.now)
                wake_at = min(wake_at, jump)
        if wake_at - view.now < self.slot_s:
            wake_at = view.now + self.slot_s
        return Decision(workers, None if math.isinf(wake_at) else wake_at)
