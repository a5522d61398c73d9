"""The policy interface: the one thing simulators and real backends call to decide.

A backend calls :meth:`Policy.admit` once when a job arrives, then :meth:`Policy.allocate` at every
scheduling point: after arrivals, after completions, and at the ``wake_at`` the last decision asked
for. Events at the same instant are handled first and the policy is asked once. A policy never
knows which backend runs it.

The simulator drives policies through the event-driven interface of
:mod:`qosched.cluster.policies.events`, a `Policy` through its `FullView` adapter (the same
calls, the same outcomes); a policy may implement that interface itself as well, as ``fifo``,
``edf`` and ``qos`` do.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, ClassVar

from qosched.cluster.state import ClusterView, Decision, JobState
from qosched.core.registry import PluginGroup, Registry

if TYPE_CHECKING:
    from qosched.cluster.predict import OnlinePredictor


class Policy(ABC):
    """Base class of cluster policies; subclasses override what they need."""

    name: ClassVar[str]
    #: Place workers largest job first (buddy allocation for power-of-two counts) instead of in
    #: the decision's priority order.
    largest_first: ClassVar[bool] = False
    #: Runs each job on the workers its user requested, so a request larger than the cluster can
    #: never run (the backend refuses such a trace up front). Deadline-aware policies that size
    #: jobs themselves set this False.
    honours_requests: ClassVar[bool] = True
    #: Promises deadlines to the jobs it guarantees (``is_guaranteed``); a real backend then
    #: runs a job it does not guarantee only if its user allowed best effort.
    promises_deadlines: ClassVar[bool] = False

    #: Judges the arrivals of one instant together (``admit_together``) instead of one by one.
    admits_together: bool = False

    def admit_together(self, jobs: Sequence[JobState], view: ClusterView) -> bool:
        """With ``admits_together``: whether to admit all of ``jobs``, which arrive at once (none
        is in ``view.jobs`` yet); False declines those with a deadline."""
        return all(self.admit(job, view) for job in jobs)

    def admit(self, job: JobState, view: ClusterView) -> bool:
        """Called once when ``job`` arrives (it is not in ``view.jobs`` yet).

        Return False to decline it: it never runs and counts as a missed deadline.
        """
        return True

    def admit_arrivals(
        self,
        jobs: Sequence[JobState],
        view: ClusterView,
        joins: Callable[[JobState, bool], bool],
    ) -> list[bool]:
        """Called by a real backend with the jobs that arrived since its last round, in arrival
        order (none is in ``view.jobs`` yet): ``admit`` for each in turn, each judged with the
        jobs of ``view`` and the arrivals before it that joined them. After each answer the
        policy calls ``joins(job, answer)``, where the backend applies its own rule (it may ask
        ``is_guaranteed`` there) and says whether the job joins. Returns the answers.

        The default calls ``admit`` with a view per job; a policy that can judge a burst in bulk
        overrides it with the same answers, and leaves its state as the calls one by one would.
        """
        known = list(view.jobs)
        answers = []
        for job in jobs:
            answer = self.admit(job, dataclasses.replace(view, jobs=list(known)))
            answers.append(answer)
            if joins(job, answer):
                known.append(job)
        return answers

    @abstractmethod
    def allocate(self, view: ClusterView) -> Decision:
        """Called at each scheduling point: the workers every admitted unfinished job holds next.

        The total must not exceed the cluster's workers and every count must be one the job's
        speed curve has (``job.curve.available``); the backend raises otherwise.
        """

    def is_guaranteed(self, job_id: str) -> bool:
        """May be called after ``admit`` and after any ``allocate``: whether the policy now
        guarantees the job's deadline. A policy that promises nothing never does."""
        return False

    def what_if(self, view: ClusterView) -> Policy:
        """May be called at any time: a policy in this one's state, to ask hypothetical
        questions of (``admit`` a job that is not submitted, or with another deadline) without
        changing this one. The copy shares ``view``'s jobs, which policies only read.

        The default is a deep copy; a policy holding what cannot be copied (a lock, a handle)
        overrides it."""
        shared: dict[int, object] = {id(job): job for job in view.jobs}
        return copy.deepcopy(self, shared)

    def predictor_of(self, job_id: str) -> OnlinePredictor | None:
        """May be called at any time: the model the policy predicts the job's speed with (fed
        with its progress), or None when it keeps none for this job."""
        return None


def greedy_requested(jobs: Iterable[JobState], capacity: int) -> dict[str, int]:
    """Requested workers in the given order, skipping (not blocking on) a job that does not fit."""
    workers: dict[str, int] = {}
    free = capacity
    for job in jobs:
        want = job.spec.requested_workers
        if want <= free:
            workers[job.job_id] = want
            free -= want
            if free == 0:
                break
    return workers


#: Other packages add policies under this entry-point group (docs/plugins.md).
PLUGINS = PluginGroup(
    "qosched.cluster_policies",
    lambda cls: issubclass(cls, Policy) and not inspect.isabstract(cls),
    "a subclass of qosched.cluster.policies.Policy that implements allocate",
)
_POLICIES: Registry[Policy] = Registry("policy", PLUGINS)
#: Class decorator: make a policy constructible by name. A duplicate name raises.
register = _POLICIES.register
policy_names = _POLICIES.names
#: A new policy by registered name; an unknown name lists the known ones.
create_policy = _POLICIES.create
