"""The event-driven policy interface: the backend says what changed, the policy answers with the
allocations that change.

A full-view `Policy` is handed every active job at every decision and answers with a count for
each; the backend then checks and places every count. Here, as in kube-scheduler's framework and
vLLM's scheduler, the policy keeps its own state between calls. The backend calls:

- ``on_arrival(job, view)`` once per arrival (``on_arrivals`` for the arrivals of one instant
  when ``admits_together``), before the job is in any view. ``view`` builds today's full
  `ClusterView` on demand: a policy that needs it pays for it, one that does not never builds it.
  False declines the job; an admitted job is reported in the next ``decide``'s ``arrived``.
- ``decide(changes)`` at every scheduling point (after arrivals and ends, at the wake-up asked
  for), once per instant. ``changes`` names what happened since the last call, and only that.
  The answer, a `Delta`, names only the jobs whose count changes (0 takes a job's workers away),
  in placement priority order. The backend checks those counts alone (an unknown job, a negative
  count, a count without a measured speed, a total over the cluster: each an error naming the
  policy), places those jobs alone (every other job keeps its workers where they are), and calls
  again at ``wake_at`` if given (each answer's ``wake_at`` replaces the last).
- ``allocations()`` only when placing the changed jobs would split one over more nodes than it
  needs and the backend tries a re-pack of every job: every job's count after the last answer,
  in the priority order a full decision would give. It may cost time linear in the jobs.

What a call may read: ``job.spec`` and ``job.curve`` always. A job's progress
(``iterations_done``, ``active_s``, ``attained_worker_s``) is kept by the backend as a rate and a
start time and brought up to date only when it changes the job's allocation, unless the policy
sets ``reads_progress``: then every running job's progress is current at every call, as the
full view has it. What a call may change: the policy's own state only; `JobState` objects are the
backend's.

`FullView` runs any full-view `Policy` through this interface unchanged: it builds the view at
each call and answers with the difference between the policy's decision and the jobs' counts.
`as_event_policy` picks: a policy that implements ``decide`` itself is driven natively.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from qosched.cluster.state import ClusterView, Decision, JobState

if TYPE_CHECKING:
    from qosched.cluster.policies.base import Policy
    from qosched.cluster.spec import ClusterSpec

#: Builds the full view of the moment on demand (what a full-view policy reads).
ViewSource = Callable[[], ClusterView]


@dataclass(frozen=True, slots=True)
class Changes:
    """What happened since the policy's last ``decide``: each list in the order it happened."""

    now: float
    # Jobs admitted since (arrival order).
    arrived: Sequence[JobState] = ()
    # Jobs finished since: their workers are free.
    ended: Sequence[JobState] = ()
    # Jobs whose measured speed left the band the policy was told of (a real backend's measure;
    # the simulator's speeds are the tables' and it reports none).
    speed_changed: Sequence[JobState] = ()
    # Jobs the backend took every worker from without being asked: it could not place the
    # count the policy gave them (a cluster too fragmented for it).
    displaced: Sequence[JobState] = ()
    # The cluster at the first call, and whenever it changed since (nodes added or lost);
    # None: as before.
    capacity: ClusterSpec | None = None
    # Whether this call is the wake-up the last answer asked for.
    woke: bool = False
    # The full view of this moment, built on demand.
    view: ViewSource | None = None


@dataclass(frozen=True, slots=True)
class Delta:
    """A policy's answer: the counts that change (absent: unchanged), in placement priority order.

    ``wake_at`` asks for a call at that time even if nothing happens (None: none).
    ``pinned`` as in `Decision`: jobs a re-pack must not move while their count is unchanged.
    ``decision`` is the full decision the delta was taken from, when the policy made one
    (`FullView`): the backend reads what an ``ArtifactDecision`` adds from it.
    """

    workers: Mapping[str, int] = field(default_factory=dict)
    wake_at: float | None = None
    pinned: frozenset[str] = frozenset()
    decision: Decision | None = None


@runtime_checkable
class EventPolicy(Protocol):
    """A policy driven by changes; see the module's docstring for when each call comes."""

    name: str
    largest_first: bool
    honours_requests: bool
    admits_together: bool
    #: True: every running job's progress is current at every call.
    reads_progress: bool

    def on_arrival(self, job: JobState, view: ViewSource) -> bool:
        """Called once when ``job`` arrives; False declines it."""
        ...

    def on_arrivals(self, jobs: Sequence[JobState], view: ViewSource) -> bool:
        """With ``admits_together``: whether to admit all of ``jobs``, which arrive at once;
        False declines those with a deadline."""
        ...

    def decide(self, changes: Changes) -> Delta:
        """Called at each scheduling point with what changed since the last call."""
        ...

    def allocations(self) -> Sequence[tuple[str, int]]:
        """Called only for a re-pack: every job's count now, in placement priority order."""
        ...


class FullView:
    """Runs a full-view `Policy` through the event interface: a view at every call, and the
    difference between its decision and the jobs' counts as the answer."""

    reads_progress = True

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.name = policy.name
        self.largest_first = policy.largest_first
        self.honours_requests = policy.honours_requests
        self.admits_together = policy.admits_together
        self._wanted: list[tuple[str, int]] = []

    def on_arrival(self, job: JobState, view: ViewSource) -> bool:
        return self.policy.admit(job, view())

    def on_arrivals(self, jobs: Sequence[JobState], view: ViewSource) -> bool:
        return self.policy.admit_together(jobs, view())

    def decide(self, changes: Changes) -> Delta:
        if changes.view is None:
            raise ValueError(f"policy {self.name!r} reads the full view; the backend gave none")
        view = changes.view()
        decision = self.policy.allocate(view)
        held = {job.job_id: job.workers for job in view.jobs}
        # An id not held (an unknown job) is always named, so the backend's check sees it.
        delta = {job_id: n for job_id, n in decision.workers.items() if held.get(job_id) != n}
        for job_id, n in held.items():
            if n and job_id not in decision.workers:
                delta[job_id] = 0
        self._wanted = [(job_id, n) for job_id, n in decision.workers.items() if n]
        return Delta(delta, decision.wake_at, decision.pinned, decision)

    def allocations(self) -> Sequence[tuple[str, int]]:
        return self._wanted


class AdmitsAll:
    """The event interface's admission for a native policy that declines nothing."""

    reads_progress = False

    def on_arrival(self, job: JobState, view: ViewSource) -> bool:
        return True

    def on_arrivals(self, jobs: Sequence[JobState], view: ViewSource) -> bool:
        return True


def as_event_policy(policy: Policy | EventPolicy) -> EventPolicy:
    """``policy`` itself when it implements the event interface, else `FullView` of it.

    A subclass that overrides ``allocate`` below the class that implements ``decide`` is run
    through `FullView`: its ``allocate`` is the decision its author meant."""
    if not isinstance(policy, EventPolicy):
        return FullView(policy)
    mro = type(policy).__mro__
    decides = next((i for i, cls in enumerate(mro) if "decide" in cls.__dict__), len(mro))
    allocates = next((i for i, cls in enumerate(mro) if "allocate" in cls.__dict__), len(mro))
    if allocates < decides:
        return FullView(policy)  # type: ignore[arg-type]
    return policy
