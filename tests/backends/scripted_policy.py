"""A policy the tests script, to force an allocation change at a known point (imported by
name: pytest puts this folder on sys.path).

``WANT[job_id]`` is a list of ``(from_iteration, workers)`` steps: a job is given the workers of
the last step whose ``from_iteration`` it has reached (its requested workers without a script).
It admits every job and promises nothing, like the request-based baselines.
"""

from __future__ import annotations

from qosched.cluster.policies import Policy, register
from qosched.cluster.state import ClusterView, Decision

NAME = "test-scripted"
WANT: dict[str, list[tuple[int, int]]] = {}


@register(NAME)
class Scripted(Policy):
    def allocate(self, view: ClusterView) -> Decision:
        workers: dict[str, int] = {}
        free = view.cluster.total_workers
        for job in view.jobs:
            want = job.spec.requested_workers
            for start, count in WANT.get(job.job_id, []):
                if job.iterations_done >= start:
                    want = count
            if want <= free:
                workers[job.job_id] = want
                free -= want
        return Decision(workers)
