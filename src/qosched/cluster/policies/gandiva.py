"""Gandiva's time-slicing scheduler, as the ElasticFlow artifact simulates it.

Gandiva (Xiao et al., OSDI 2018) groups jobs by the workers they request and gives each group
its own machines; a group with more jobs than room time-slices them, rotating which jobs run
every quantum. The artifact (``scheduler.py`` ``gandiva_sim_jobs``, ``cluster.py``
``gandiva_*``) models it so:

* a group's share of the cluster follows its demand: ``floor(demand / total demand x cluster)``
  workers, never more than it asks for (``gandiva_node_set_adjust``);
* inside a group, the jobs at the head of its queue run, one per slot, and at every quantum
  boundary the ones that ran move to the back (``time_slicing_execute``);
* packing never triggers: every model's memory use is 1 (``models.py``), so a GPU holds one job;
* a group keeps at least one slot while it has jobs (a shrink never frees its last node set).

By default a group's share is counted in requested-size slots and its jobs queue group-wide.
``node_sets=True`` keeps the artifact's own bookkeeping instead (``gandiva_nodesets``): jobs
bound to whole-node sets, each queueing its own jobs, with the artifact's quirks. Like the
artifact it rotates a set's jobs only in a round whose clock falls on a whole minute, which its
event-driven clock seldom reaches (5 of 1,739 rounds on a 400-job trace). Migration moves jobs
without changing what runs and is not modelled. ``work_conserving`` (default) hands
workers no group's share covers to waiting jobs in arrival order; the artifact leaves them idle.
"""

from __future__ import annotations

import math
from collections import defaultdict

from qosched.cluster.artifact import ArtifactDecision
from qosched.cluster.policies.base import Policy, greedy_requested, register
from qosched.cluster.policies.gandiva_nodesets import NodeSets
from qosched.cluster.state import ClusterView, Decision, JobState

#: The artifact's Gandiva time slice (``cluster.py`` ``time_slicing_execute``).
_SLICE_S = 60


@register("gandiva")
class Gandiva(Policy):
    """Per-size groups with demand-proportional shares, time-sliced round-robin inside each."""

    def __init__(
        self,
        # Gandiva suspends a job in GPU memory in about 0.1 s and slices every 60 s; here every
        # turn pays a checkpoint-restart pause (30 s by default), so turns are ten times longer
        # to keep that at 5%: at 60 s it halves throughput (DSR 0.15 against 0.22 on a 400-job
        # trace, docs/results/fidelity.md).
        quantum_s: float | None = 600.0,
        work_conserving: bool = True,
        node_sets: bool = False,
        adjust_ahead: bool = False,
    ) -> None:
        if quantum_s is not None and (not quantum_s > 0 or math.isinf(quantum_s)):
            raise ValueError(f"quantum_s must be positive and finite: {quantum_s}")
        self.quantum_s = quantum_s
        self.work_conserving = work_conserving
        # Each group's round-robin queue of job ids; its head runs.
        self._queues: dict[int, list[str]] = defaultdict(list)
        self._last_quantum: int | None = None
        self.node_sets = node_sets
        # With node_sets: resize the groups at the end of a round rather than at the start of the
        # next. Nothing changes in between, so the sets are the same, but the jobs that run in
        # the interval are then those the resized sets run, as in the artifact, which resizes
        # at the start of a round and then credits the past interval to the jobs its resized
        # sets run (``gandiva_sim_jobs``: ``gandiva_node_set_adjust`` before
        # ``time_slicing_execute``).
        self.adjust_ahead = adjust_ahead
        self._sets: NodeSets | None = None

    def _sync_queues(self, groups: dict[int, list[JobState]]) -> None:
        """Drop finished jobs from the queues and append newcomers in arrival order."""
        for size in list(self._queues):
            if size not in groups:
                del self._queues[size]
        for size, members in groups.items():
            present = {job.job_id for job in members}
            queue = [job_id for job_id in self._queues[size] if job_id in present]
            queued = set(queue)
            queue.extend(job.job_id for job in members if job.job_id not in queued)
            self._queues[size] = queue

    @staticmethod
    def _slots(groups: dict[int, list[JobState]], capacity: int) -> dict[int, int]:
        """How many jobs of each group run at once."""
        demand = {size: size * len(members) for size, members in groups.items()}
        total = sum(demand.values())
        slots = {
            size: min(math.floor(d / total * capacity), d) // size for size, d in demand.items()
        }
        free = capacity - sum(size * n for size, n in slots.items())
        # A group keeps one slot while it has jobs, smallest groups first, as room allows.
        for size in sorted(groups):
            if slots[size] == 0 and size <= free:
                slots[size] = 1
                free -= size
        return slots

    def _allocate_node_sets(self, view: ClusterView) -> tuple[dict[str, int], frozenset[str]]:
        """The artifact's order within a round: resize groups, retire finished jobs, place
        newcomers, and retry waiting jobs only if a set was emptied. The jobs the sets run, and
        those that are or were in the waiting list."""
        if self._sets is None:
            self._sets = NodeSets(view.cluster.num_nodes, view.cluster.workers_per_node)
        sets = self._sets
        present = {job.job_id for job in view.jobs}
        if not self.adjust_ahead:
            sets.adjust()  # still counts the jobs finished since, as the artifact's round does
        # The artifact slices time only in a round on the minute (``int(cur_time % 60) == 0``).
        rotate = int(view.now % _SLICE_S) == 0
        released = sets.finish(set(sets.size_of) - present, rotate)
        for job in view.jobs:
            if job.job_id not in sets.size_of:
                sets.size_of[job.job_id] = job.spec.requested_workers
                if not sets.place(job.job_id):
                    sets.wait(job.job_id)
        if released:
            sets.retry_waiting()
        if self.adjust_ahead:
            sets.adjust()  # the next round's, on the jobs in the sets until then
        return sets.running(), frozenset(sets.waited)

    def allocate(self, view: ClusterView) -> Decision:
        capacity = view.cluster.total_workers
        if self.node_sets:
            workers, waited = self._allocate_node_sets(view)
            if self.work_conserving:
                waiting = (job for job in view.jobs if job.job_id not in workers)
                workers.update(greedy_requested(waiting, capacity - sum(workers.values())))
            # The artifact's loop sets no overhead for a job in its waiting list, and resets
            # the overhead of those it started from there after every round.
            return ArtifactDecision(workers, overhead_not_carried=waited)
        groups: dict[int, list[JobState]] = defaultdict(list)
        for job in view.jobs:
            if job.spec.requested_workers <= capacity:
                groups[job.spec.requested_workers].append(job)
        self._sync_queues(groups)
        slots = self._slots(groups, capacity) if groups else {}

        rotate = False
        if self.quantum_s is not None:
            quantum = math.floor(view.now / self.quantum_s)
            rotate = self._last_quantum is not None and quantum > self._last_quantum
            self._last_quantum = quantum
        workers: dict[str, int] = {}
        sliced = False  # some group has more jobs than slots
        for size, queue in self._queues.items():
            n = slots[size]
            if len(queue) > n:
                sliced = True
                if rotate:
                    queue[:] = queue[n:] + queue[:n]
            for job_id in queue[:n]:
                workers[job_id] = size
        if self.work_conserving:
            waiting = (job for job in view.jobs if job.job_id not in workers)
            workers.update(greedy_requested(waiting, capacity - sum(workers.values())))
        wake_at = None
        if sliced and self.quantum_s is not None:
            wake_at = (math.floor(view.now / self.quantum_s) + 1) * self.quantum_s
        return Decision(workers, wake_at)
