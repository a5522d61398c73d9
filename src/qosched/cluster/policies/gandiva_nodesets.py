"""The ElasticFlow artifact's Gandiva bookkeeping: jobs bound to node sets (``cluster.py``).

Each group (jobs requesting the same worker count ``g``) owns node sets of ``ceil(g / per
node)`` whole nodes that run ``capacity = nodes x per node // g`` of their jobs at once; the
rest wait in that set's list. Node sets are kept in the artifact's list order (sorted by job
count after each change, stable), because which set a job lands on decides when it runs.
Reproduced on purpose, as the artifact behaves:

* a set takes a newcomer on its own only while its job count + 1 stays *below* its capacity;
  else the newcomer opens a new set if whole nodes are free, else joins the least loaded set;
* a growing group re-spreads its jobs over its sets only when the last set it tried to open
  had more than one node, or could not be opened (a loop variable reused in
  ``gandiva_node_set_expand``); otherwise the new sets stay empty until newcomers arrive;
* a shrinking group keeps at least one set and piles the freed sets' jobs on its head set;
* waiting jobs are retried only when a set is emptied, and a successful retry skips the next
  waiting job (a list is changed while it is walked);
* a job in the waiting list, or started from it, carries no restart overhead from one round to
  a later one (``waited``): the loop sets none for the list and resets the overhead of the jobs
  started from it after every round;
* groups are resized in order of size (its ``node_g`` dictionary), smallest first;
* time slicing only in a round whose clock is a whole minute: a set holding more jobs than it
  runs moves the ones it ran to its back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(slots=True)
class NodeSet:
    nodes: int
    capacity: int
    jobs: list[str] = field(default_factory=list)
    # Jobs added since the set was opened or re-spread; finishing jobs do not lower it
    # (``util`` in the artifact). It orders the sets and gates newcomers.
    load: int = 0

    def add(self, job_id: str) -> None:
        self.jobs.append(job_id)
        self.load += 1


def _load(node_set: NodeSet) -> int:
    return node_set.load


class NodeSets:
    """Node sets per group, free nodes and waiting jobs, updated once per decision."""

    def __init__(self, num_nodes: int, per_node: int) -> None:
        self.per_node = per_node
        self.total = num_nodes * per_node
        self.free_nodes = num_nodes
        self.groups: dict[int, list[NodeSet]] = {}
        self.size_of: dict[str, int] = {}
        self.waiting: list[str] = []
        # Jobs that are or were in the waiting list (the artifact's ``runnable_jobs``, whose
        # overhead its loop resets after every round), until they end.
        self.waited: set[str] = set()

    def _nodes_for(self, size: int) -> int:
        return math.ceil(size / self.per_node)

    def _new_set(self, size: int) -> NodeSet:
        nodes = self._nodes_for(size)
        self.free_nodes -= nodes
        return NodeSet(nodes, nodes * self.per_node // size)

    @staticmethod
    def _join_head(sets: list[NodeSet], job_id: str) -> None:
        sets[0].add(job_id)
        sets.sort(key=_load)

    def place(self, job_id: str) -> bool:
        """``gandiva_placement``: whether the job got a set."""
        size = self.size_of[job_id]
        sets = self.groups.setdefault(size, [])
        if sets:
            head = sets.pop(0)
            sets.append(head)  # to the back even when it refuses the job
            if head.load + 1 < head.capacity:
                head.add(job_id)
                sets.sort(key=_load)
                return True
        if self._nodes_for(size) <= self.free_nodes:
            fresh = self._new_set(size)
            fresh.add(job_id)
            sets.append(fresh)
            sets.sort(key=_load)
            return True
        if sets:  # time-slice on the (new) head set, moved to the back before the sort
            head = sets.pop(0)
            head.add(job_id)
            sets.append(head)
            sets.sort(key=_load)
            return True
        return False

    def _expand(self, size: int, sets: list[NodeSet], count: int) -> None:
        nodes = self._nodes_for(size)
        opened_last = False
        for _ in range(count):
            opened_last = nodes <= self.free_nodes
            if opened_last:
                sets.append(self._new_set(size))
        if opened_last and nodes == 1:
            return  # the artifact's reused loop variable ends at 0: no re-spreading
        jobs = [job_id for node_set in sets for job_id in node_set.jobs]
        for node_set in sets:
            node_set.jobs.clear()
            node_set.load = 0
        for job_id in jobs:
            self._join_head(sets, job_id)

    def _shrink(self, sets: list[NodeSet], count: int) -> None:
        count = min(count, len(sets) - 1)
        moved: list[str] = []
        for _ in range(count):
            freed = sets.pop(0)
            moved.extend(freed.jobs)
            self.free_nodes += freed.nodes
        for job_id in moved:
            self._join_head(sets, job_id)

    def wait(self, job_id: str) -> None:
        """A newcomer no set takes waits (``move_to_pending``)."""
        self.waiting.append(job_id)
        self.waited.add(job_id)

    def adjust(self) -> None:
        """``gandiva_node_set_adjust``: move whole sets toward demand-proportional shares."""
        demand = {size: size * sum(len(s.jobs) for s in sets) for size, sets in self.groups.items()}
        total = sum(demand.values())
        if not total:
            return
        for size, sets in sorted(self.groups.items()):  # the artifact's ``node_g``: by size
            if not demand[size]:
                continue
            target = min(math.floor(demand[size] / total * self.total), demand[size])
            diff = target - sum(s.nodes for s in sets) * self.per_node
            if diff > 0:
                self._expand(size, sets, math.ceil(diff / size))
            elif diff < 0:
                self._shrink(sets, math.ceil(-diff / size))

    def finish(self, gone: set[str], rotate: bool = False) -> bool:
        """Drop finished jobs; free the nodes of emptied sets. Whether any set was emptied.

        ``rotate`` (a round on the minute, ``time_slicing_execute``): a set holding more jobs
        than it runs, finished ones included, first moves the jobs it ran to its back.
        """
        released = False
        for sets in self.groups.values():
            for node_set in list(sets):
                if rotate and len(node_set.jobs) > node_set.capacity:
                    ran = node_set.jobs[: node_set.capacity]
                    node_set.jobs[:] = node_set.jobs[node_set.capacity :] + ran
                node_set.jobs[:] = [j for j in node_set.jobs if j not in gone]
                if not node_set.jobs:
                    sets.remove(node_set)
                    self.free_nodes += node_set.nodes
                    released = True
        self.waiting = [j for j in self.waiting if j not in gone]
        self.waited -= gone
        for job_id in gone:
            self.size_of.pop(job_id, None)
        return released

    def retry_waiting(self) -> None:
        index = 0
        while index < len(self.waiting):
            if self.place(self.waiting[index]):
                del self.waiting[index]
            index += 1  # after a deletion this skips the next job, as the artifact's loop does

    def running(self) -> dict[str, int]:
        """The first ``capacity`` jobs of every set run."""
        return {
            job_id: size
            for size, sets in self.groups.items()
            for node_set in sets
            for job_id in node_set.jobs[: node_set.capacity]
        }
