"""qosched's own policy: deadlines from predicted speeds, guarantees, and calm autoscaling.

After "A QoS-oriented Scheduling and Autoscaling Framework for Deep Learning" (IJCNN 2019): the
user gives a deadline, never a resource request; the policy learns each job's speed from the
job's own progress and sizes it to finish in time.

- Prediction: every job has an :class:`~qosched.cluster.predict.OnlinePredictor`, primed with its
  model's speed table and fed the job's progress (iterations against its compute clock, restart
  pauses excluded) over each stretch at one count, ended where a decision changes the count or
  where the job's speeds are due for a re-read.
- Admission: a deadline job is guaranteed only if, on *pessimistic* predicted speeds (the lower
  edge of the prediction band: the safety margin), it gets a minimum satisfactory share without
  taking one from a job already guaranteed, and only if that share is worth it: its reservation
  holds at most ``MAX_RESERVATION_OVERHEAD`` times the worker-seconds of the job's work at its
  most efficient count. A job with no progress yet, whose band is still the prior's, that fails
  this is tried once more on its expected speed, a thin guarantee that lasts until its own
  progress refreshes its band. A plan charges the pause of a start or change of count now, not
  those of the later changes it makes (where the free workers dip below a share and come back);
  a reservation kept to a later instant is checked with them paid, and planned again from then
  if it no longer delivers. A job that cannot be guaranteed is not turned away: it runs best effort
  and still counts as met if it finishes in time (``decline_to_best_effort=False`` turns it
  away instead), which keeps admission from collapsing under overload. Unguaranteed jobs are
  tried again when their prediction narrows or a job leaves (a few per decision).
- Allocation, in this order: (1) each guaranteed job its planned count for now; (2) running
  best-effort jobs their smallest count (what they held beyond it is handed out again in (5)),
  or their whole count when they are about done (``FINISHING_PAUSES``); (3) unguaranteed
  deadline jobs that can still make it, planned by deadline on *expected* speeds on what the
  guarantees leave (the hopeful plan, bounded per decision); (4) the rest, best effort first,
  running jobs before waiting ones, shortest predicted time first; (5) spare workers one step at
  a time, best-effort jobs first, then to the job with the largest relative speed-up per added
  worker (for best-effort jobs divided by the square root of their remaining time: shorter ones
  first, softly), only where the time it saves outweighs the restart pause it costs and the
  added worker would do enough work to be kept busy (``min_spare_gain``); with
  ``spare_order="completion"``, every job's claim is divided so (best-effort ones weighted up),
  and the unguaranteed deadline jobs neither urgent nor running close to their deadline get
  workers only after the spare (`SPARE_ORDERS`); (6)
  guaranteed jobs keep workers beyond their plan while they fit (hysteresis: no restart without
  a reason). Running deadline jobs with little slack are pinned: the backend does not move them
  to re-pack others.
- Autoscaling: the policy re-plans at arrivals, completions, when a plan changes counts, and
  every ``tick_s``; a job is not re-sized again within ``min_interval_s`` of its last change
  unless its guarantee needs it.

Counts are powers of two up to a node, then whole nodes, placed largest first, so jobs pack
without splitting across nodes. Each decision says, for each job whose count it changes, why in
words (``Decision.reasons``): the step above that gave the count, a worker refused for gaining
less than ``min_spare_gain``, and the speed expected now where it was just re-read.

The same decision logic serves both policy interfaces: a backend calling ``allocate`` with the
full view (the local service, Kubernetes) and the simulator driving ``decide``
(`qosched.cluster.policies.events`), which runs ``allocate`` on the view of the moment and
answers with the counts that change.
"""

from __future__ import annotations

import bisect
import enum
import heapq
import math
import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from qosched.cluster.planning import (
    Demand,
    FreeProfile,
    Ladder,
    Plan,
    Reservation,
    TakeAllMemo,
    kept_delivers,
    leftover,
    most_delivered,
    plan_demands,
    plan_failing_fewer,
    work_by,
)
from qosched.cluster.policies.base import Policy, register
from qosched.cluster.policies.events import Changes, Delta, ViewSource
from qosched.cluster.predict import OnlinePredictor
from qosched.cluster.state import ClusterView, Decision, JobState


@dataclass(slots=True)
class _Tracked:
    """What the policy remembers about one job."""

    predictor: OnlinePredictor
    guaranteed: bool
    last_change_s: float = -math.inf
    observed_active_s: float = 0.0
    # The count of the interval the last sample started: the one it runs on since, as far as
    # this policy knows (`_sample` ends the interval when a decision changes it).
    observed_workers: int = 0
    observed_iterations: float = 0.0
    sampled_s: float = -math.inf  # the instant of the call that took the last sample
    state: JobState | None = None  # as the last call saw it (`predictor_of` samples it)
    # Where its kept reservation was last found to deliver (`QualityOfService._kept_bound`).
    kept_bound: tuple[Reservation, Ladder, bool, float, float, float] | None = None
    ladders: tuple[Ladder, Ladder] | None = None  # (expected, pessimistic), None = stale
    ladders_at_active_s: float = 0.0
    counts: tuple[int, ...] = field(default_factory=tuple)
    usable: tuple[int, ...] = field(default_factory=tuple)  # ``counts`` the curve has a speed at
    # What the last failed guarantee was tried on: (prediction as of, jobs that had left).
    tried_on: tuple[float, int] | None = None


class _FreshPrefix:
    """A fresh plan (nothing kept) of the guaranteed jobs in deadline order, made lazily.

    A fresh plan of the guaranteed jobs and one more job is, up to that job's deadline, the
    fresh plan of the guaranteed jobs alone: a guarantee retry needs only that prefix to learn
    whether the fresh plan can fit its job, and retries tried in deadline order share it.
    """

    __slots__ = ("demands", "failed", "key", "orders", "planned", "profile", "reservations")

    def __init__(self, key: tuple[float, frozenset[str]], demands: list[Demand]) -> None:
        self.key = key
        self.demands = demands  # in deadline order
        self.orders = [d.order for d in demands]
        self.planned = 0
        self.failed = 0
        self.profile: FreeProfile | None = None
        self.reservations: dict[str, Reservation] = {}

    def failures_up_to(self, order: tuple, now: float, capacity: int) -> int:
        """Plan the demands ordered no later than ``order`` (if not yet); return how many fail."""
        end = bisect.bisect_right(self.orders, order)
        if end < self.planned:  # asked for a shorter prefix than made: start again
            self.planned, self.failed, self.profile, self.reservations = 0, 0, None, {}
        if self.profile is None:
            self.profile = FreeProfile(now, capacity)
        for demand in self.demands[self.planned : end]:
            plan = plan_demands([demand], now, capacity, profile=self.profile)
            self.failed += len(plan.failed)
            self.reservations.update(plan.reservations)
        self.planned = end
        return self.failed

    def profile_copy(self, now: float, capacity: int) -> FreeProfile:
        """The free workers the planned prefix leaves (a copy: yours to consume)."""
        copy = FreeProfile(now, capacity)
        if self.profile is not None:
            copy.starts, copy.free = list(self.profile.starts), list(self.profile.free)
        return copy

    def after(self, order: tuple) -> list[Demand]:
        """The demands ordered after ``order``."""
        return self.demands[bisect.bisect_right(self.orders, order) :]


def _demand(
    job: JobState, ladder: Ladder, view: ClusterView, *, pay_kept_changes: bool = False
) -> Demand:
    """The job's demand as `qos` plans it: no pause while it keeps the count it holds, one if
    it must start or change count now, and none for the later changes its plan makes.

    Those later pauses are real: with ``pay_kept_changes`` a kept reservation is checked with
    them paid (`QualityOfService._pays_kept_changes`), so one whose re-sizes have eaten its
    slack is planned again from then, when the workers free then are known. Paying them up
    front instead planned every reservation fuller than it turned out, and under long
    overloads turned away jobs that fit (docs/results/cluster.md, "Long overloads")."""
    return Demand.of_job(job, ladder, view, keep_held=True, pay_kept_changes=pay_kept_changes)


def allowed_counts(max_workers: int, workers_per_node: int) -> tuple[int, ...]:
    """Powers of two up to a node, then whole nodes."""
    counts = [1 << i for i in range(workers_per_node.bit_length()) if (1 << i) <= workers_per_node]
    counts += range(2 * workers_per_node, max_workers + 1, workers_per_node)
    return tuple(g for g in counts if g <= max_workers)


#: Unguaranteed deadline jobs tried for a guarantee per decision, earliest deadline first.
RETRIES_PER_DECISION = 3
#: Unguaranteed deadline jobs planned on expected speeds per decision, earliest deadline first.
HOPEFUL_PER_DECISION = 32
#: A deadline is planned for only if its reservation holds at most this many times the
#: worker-seconds the job's remaining work takes at its most efficient count.
MAX_RESERVATION_OVERHEAD = 4.0
#: A running deadline job with less expected slack than this many restart pauses is not moved
#: to re-pack others.
PIN_SLACK_PAUSES = 10
#: How `qos` hands out spare workers (step 5). ``best_effort_first`` (the default) serves
#: best-effort jobs before deadline jobs. ``completion`` weighs every job alike, by speed-up per
#: added worker over the square root of its remaining time, and hands the spare out before the
#: unguaranteed deadline jobs neither urgent nor running close to their deadline: on the
#: 1,000-job traces of bench/cluster_jct.py it finishes the jobs every policy finished within
#: 1.01-1.10x of the better of elasticflow and pollux (best_effort_first: 1.17-1.30x) and meets
#: as many deadlines or more, but on the ITP release it meets fewer (cluster04 0.922 against
#: 0.929, cluster03 0.786 against 0.789): jobs that would just make it lose their workers to the
#: spare. docs/results/cluster-sim.md has both.
SPARE_ORDERS = ("best_effort_first", "completion")
#: Under ``spare_order="completion"``, a best-effort job's claim to a spare worker counts this many
#: times a deadline job's: its completion time is its only goal, while a guaranteed job already
#: meets its deadline on its plan. 3 kept best-effort completion times at or below the peers' on
#: the traces of bench/cluster_jct.py (1 left them up to 1.3x the best peer's; 4 raised the
#: deadline jobs' instead).
BEST_EFFORT_SPARE_WEIGHT = 3.0
#: Under ``spare_order="completion"``, a running deadline job whose fastest count, on expected
#: speeds, misses its deadline by less than this share of its remaining time still counts as able
#: to make it and keeps its workers: expected speeds err by that much, and taking its workers
#: away makes the miss certain. On bench/cluster_policy_table.py's traces (seed 1) 0.15 met
#: 805, 804 and 760 deadlines at loads 0.5, 1 and 2; 0.05 met 803, 803 and 740; 0.3 807, 804
#: and 744.
NEAR_MISS_SHARE = 0.15
#: A running best-effort job with less work left than this many restart pauses keeps its count:
#: re-sizing it would cost it a pause that is a large share of its remaining time.
FINISHING_PAUSES = 10


class Urgency(enum.IntEnum):
    """Classes of the jobs no plan holds, in the order they get workers."""

    MUST_RUN_SOON = 0  # deadline jobs that can still make it if they run now
    BEST_EFFORT = 1
    HOPELESS = 2  # deadline jobs that cannot make it any more


class Why(enum.Enum):
    """Which step of a decision gave a job its count (`_Hand.give`), for the reason in words a
    decision carries for each job it changes (``Decision.reasons``)."""

    PLANNED = "its guaranteed plan needs {count} now"
    SMALLEST = "best effort: a running job keeps its smallest count, the rest is shared again"
    FINISHING = "about done: it keeps its workers, a re-size would cost more than they give"
    HOPEFUL = "not guaranteed: planned to meet its deadline on its expected speed"
    MUST_RUN_SOON = "not guaranteed: it can still meet its deadline if it runs now"
    BEST_EFFORT = "best effort: it gets what the deadline jobs leave"
    HOPELESS = "its deadline can no longer be met: it runs on what is left"
    SPARE = "spare workers: each added one adds {gain:.2f} of its speed (min_spare_gain {least:g})"
    KEPT = "guaranteed: it keeps the workers it holds beyond its plan"


_URGENCY_WHY = {
    Urgency.MUST_RUN_SOON: Why.MUST_RUN_SOON,
    Urgency.BEST_EFFORT: Why.BEST_EFFORT,
    Urgency.HOPELESS: Why.HOPELESS,
}


@dataclass(slots=True)
class _Hand:
    """The workers one decision has given so far, and how many are still free; why each job
    has its count (the step that last gave it, and a spare worker's gain), and the gain of the
    worker each job was refused for gaining less than ``min_spare_gain``."""

    free: int
    workers: dict[str, int] = field(default_factory=dict)
    why: dict[str, tuple[Why, float]] = field(default_factory=dict)
    too_little: dict[str, float] = field(default_factory=dict)

    def give(
        self, job_id: str, count: int, had: int = 0, why: Why | None = None, gain: float = 0.0
    ) -> None:
        """Set the job's count to ``count``, from the ``had`` it was given before."""
        self.workers[job_id] = count
        self.free -= count - had
        if why is not None:
            self.why[job_id] = (why, gain)


@register("qos")
class QualityOfService(Policy):
    """Predict, guarantee, autoscale; see the module docstring.

    ``confidence`` is the coverage of the prediction band whose lower edge guarantees plan on.
    Wider is safer for each guarantee but guarantees fewer jobs; 0.2 (about 8% below the
    table before a job has run) met the most deadlines over the peer settings of
    ``bench/cluster_qos_evidence.py``, with exact and with hidden speeds alike.

    ``refresh_s``: a job's predicted speeds are re-read after 10% more of its running time plus
    this many seconds (refits are not free, and over a cluster's hours predictions move slowly);
    a backend whose jobs live seconds to minutes re-reads sooner. ``min_spare_gain``: a spare
    worker (step 5) goes only to a job whose expected speed-up per added worker is at least this
    (0.5: each added worker does at least half a worker's work), so that the workers handed out
    are kept busy; 0 hands them out wherever the time saved beats the pause.

    ``spare_order`` (`SPARE_ORDERS`): ``best_effort_first`` (default) or ``completion``, which
    shortens completion times, deadline jobs' too, at a cost in deadlines on some traces.
    """

    largest_first = True
    honours_requests = False
    promises_deadlines = True
    #: Driven natively (``decide``), it reads every job's remaining work at every call (and feeds
    #: a job's progress to its predictor where its count changes or its speeds are re-read), so
    #: the backend keeps that progress current.
    reads_progress = True

    def __init__(
        self,
        *,
        tick_s: float = 600.0,
        min_interval_s: float | None = None,
        gain_over_pause: float = 2.0,
        decline_to_best_effort: bool = True,
        confidence: float = 0.2,
        refresh_s: float = 60.0,
        min_spare_gain: float = 0.0,
        spare_order: str = "best_effort_first",
    ) -> None:
        if tick_s <= 0:
            raise ValueError(f"tick_s must be positive, got {tick_s}")
        if not 0 <= refresh_s < math.inf:
            raise ValueError(f"refresh_s must be seconds >= 0, got {refresh_s}")
        if not 0 <= min_spare_gain <= 1:
            raise ValueError(f"min_spare_gain must be in [0, 1], got {min_spare_gain}")
        if spare_order not in SPARE_ORDERS:
            raise ValueError(f"unknown spare order {spare_order!r}; use {', '.join(SPARE_ORDERS)}")
        self.spare_order = spare_order
        self.refresh_s = refresh_s
        self.min_spare_gain = min_spare_gain
        self.tick_s = tick_s
        self.min_interval_s = min_interval_s
        self.gain_over_pause = gain_over_pause
        self.decline_to_best_effort = decline_to_best_effort
        self.confidence = confidence
        self._jobs: dict[str, _Tracked] = {}
        self._counts: dict[tuple[int, int, int], tuple] = {}  # see _counts_of
        self._adopted = Plan()
        self._adopted_at = -math.inf  # when the plan in force was adopted
        self._kept: dict[str, Reservation] = {}
        self._failed: set[str] = set()
        self._departed = 0  # jobs seen to leave: each frees workers a guarantee may now use
        self._now = -math.inf  # the instant of the call in progress (or the last)
        self._decided_s = -math.inf  # the instant of the last decision
        self._reread: set[str] = set()  # jobs whose speeds were re-read since the last decision
        self._hoped: dict[str, Reservation] = {}  # the last hopeful plan's reservations
        self._fresh: _FreshPrefix | None = None  # see _fresh_prefix
        # (instant, jobs) the plan in force was made for, when it failed none and no decision
        # has changed a job since (see _kept_plan)
        self._adopted_for: tuple[float, frozenset[str]] | None = None
        # (instant, jobs) whose reservations in force were all found, at that instant, to deliver
        # and fit together, with no decision and no adoption since (see _note_kept)
        self._kept_for: tuple[float, frozenset[str]] | None = None
        # The kept reservations are taken together at decision after decision, mostly the same
        # ones: the last sweep is cut to the new instant instead of made again.
        self._swept = TakeAllMemo()
        # Driven natively (``decide``): the count each job holds by the last answer (less the
        # jobs that ended or were displaced since), that answer's non-zero counts in placement
        # order, and each job's place in admission order.
        self._held: dict[str, int] = {}
        self._given: list[tuple[str, int]] = []
        self._seq: dict[str, int] = {}
        self._arrivals = 0  # admitted so far: the next one's place

    # -- prediction -------------------------------------------------------------------------------

    def _track(self, job: JobState, view: ClusterView) -> _Tracked:
        tracked = self._jobs.get(job.job_id)
        if tracked is None:
            predictor = OnlinePredictor.from_curve(
                job.curve, confidence=self.confidence, recent_s=view.speed_recent_s
            )
            # The first sample only sets the start: take it now, so the job's first interval
            # of progress is not lost.
            predictor.observe(job.active_s, job.iterations_done, job.workers)
            tracked = _Tracked(
                predictor,
                guaranteed=False,
                observed_active_s=job.active_s,
                observed_workers=job.workers,
                observed_iterations=job.iterations_done,
            )
            tracked.counts, tracked.usable = self._counts_of(job, view)
            self._jobs[job.job_id] = tracked
        return tracked

    def _counts_of(
        self, job: JobState, view: ClusterView
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The job's allowed counts, and those its curve has a speed at. Kept per curve object
        and cluster: jobs of one model share their curve, and on a cluster of thousands of
        workers each arrival listed hundreds of counts (a burst of 1,000: a quarter of its
        admission's time)."""
        curve, cluster = job.curve, view.cluster
        key = (id(curve), cluster.total_workers, cluster.workers_per_node)
        kept = self._counts.get(key)
        if kept is None or kept[0] is not curve:  # the curve kept alive, so its id is not reused
            counts = allowed_counts(
                min(curve.max_workers, cluster.total_workers), cluster.workers_per_node
            )
            kept = (curve, counts, tuple(g for g in counts if curve.available(g)))
            if len(self._counts) >= 256:  # a long run meets many curves and cluster sizes
                self._counts.clear()
            self._counts[key] = kept
        return kept[1], kept[2]

    def _observe_jobs(self, view: ClusterView) -> None:
        """Track the new jobs, and feed a job's progress to its predictor where its speeds are
        due for a re-read: after 10% more compute time plus ``refresh_s`` (refits are not free
        and predictions move slowly). Between re-reads the ladders, not the predictor, are what
        the decisions read, so a job's progress is not fed at every call: an interval runs from
        one change of count to the next (`_decision` ends it there) or to a re-read, and one
        interval at one count says what many short ones would (the sums per count are the
        same; only the spread's degrees of freedom are fewer)."""
        tracked_jobs, refresh_s = self._jobs, self.refresh_s
        # Where speeds drift, the recent speed weighs each interval by its age: one per call.
        every_call = view.speed_recent_s is not None
        for job in view.jobs:
            tracked = tracked_jobs.get(job.job_id)
            if tracked is None:
                tracked = self._track(job, view)
            tracked.state = job
            workers, active_s = job.workers, job.active_s
            due = (
                workers
                and active_s > tracked.observed_active_s
                and active_s >= 1.1 * tracked.ladders_at_active_s + refresh_s
            )
            if workers != tracked.observed_workers:
                # Re-sized by no decision of this policy (the backend did not place the count it
                # was given, or moved the job since): if its interval began at the last
                # decision, it ran on this count since, as far as anyone can tell; if earlier,
                # it mixes two counts and is dropped.
                self._sample(job, tracked, drop=tracked.sampled_s != self._decided_s)
            elif due or (
                workers
                and active_s > tracked.observed_active_s
                # no progress since the last sample (a start-up): the next interval starts here,
                # as the predictor skips one without progress
                and (every_call or job.iterations_done <= tracked.observed_iterations)
            ):
                self._sample(job, tracked)
            if due:
                tracked.ladders = None
                self._reread.add(job.job_id)

    def _sample(self, job: JobState, tracked: _Tracked, *, drop: bool = False) -> None:
        """End the job's interval now (``drop``: without recording it) and start the next on the
        count it holds."""
        active_s = job.active_s
        predictor = tracked.predictor
        if drop:
            predictor.restart(max(active_s, tracked.observed_active_s), job.iterations_done)
        elif job.workers and active_s > tracked.observed_active_s:
            mark = job.speed_mark
            if mark is not None and mark[0] > tracked.observed_active_s:
                predictor.restart(*mark)  # a start-up ended there: measure from its end
            if job.iterations_done >= predictor.last_iterations:
                predictor.observe(active_s, job.iterations_done, job.workers)
            else:  # it lost progress (a backend restarted it from an older checkpoint)
                predictor.restart(active_s, job.iterations_done)
        else:
            predictor.restart(max(active_s, tracked.observed_active_s), job.iterations_done)
        tracked.observed_active_s = max(active_s, tracked.observed_active_s)
        tracked.observed_workers = job.workers
        tracked.observed_iterations = job.iterations_done
        tracked.sampled_s = self._now

    @staticmethod
    def _has_run(job: JobState, tracked: _Tracked) -> bool:
        """Whether the job made progress its predictor has or will have at its next sample."""
        return bool(tracked.predictor.observed_seconds) or (
            job.workers > 0
            and job.active_s > tracked.observed_active_s
            and job.iterations_done > (tracked.predictor.last_iterations or 0.0)
        )

    def _ladders(self, job: JobState, tracked: _Tracked) -> tuple[Ladder, Ladder]:
        """(expected, pessimistic) predicted speeds on the counts the job may use."""
        if tracked.ladders is None:
            expected = [0.0] * (job.curve.max_workers + 1)
            pessimistic = [0.0] * (job.curve.max_workers + 1)
            usable = tracked.usable
            for g, (rate, low) in zip(usable, tracked.predictor.rates(usable), strict=True):
                expected[g], pessimistic[g] = rate, low
            tracked.ladders = (
                Ladder(expected, tracked.counts),
                Ladder(pessimistic, tracked.counts),
            )
            tracked.ladders_at_active_s = tracked.observed_active_s
        return tracked.ladders

    # -- planning ---------------------------------------------------------------------------------

    def _plan(
        self,
        jobs: Sequence[JobState],
        view: ClusterView,
        keep: dict[str, Reservation] | None = None,
    ) -> Plan:
        """Deadline order on pessimistic predicted speeds: the safety margin."""
        if keep:
            plan = self._plan_keeping(jobs, view, keep)
            if plan is not None:
                return plan
        return plan_demands(self._demands(jobs, view), view.now, view.cluster.total_workers, keep)

    def _demands(self, jobs: Sequence[JobState], view: ClusterView) -> list[Demand]:
        """The jobs' demands on pessimistic predicted speeds (their ladders refreshed)."""
        tracked_jobs, ladders = self._jobs, self._ladders
        pay = self._pays_kept_changes(view.now)
        demands = []
        for job in jobs:
            tracked = tracked_jobs.get(job.job_id) or self._track(job, view)
            pessimistic = (tracked.ladders or ladders(job, tracked))[1]  # no call when kept
            demands.append(_demand(job, pessimistic, view, pay_kept_changes=pay))
        return demands

    def _pays_kept_changes(self, now: float) -> bool:
        """Whether a kept reservation's check pays the changes of count it makes: at every
        instant after the plan in force was adopted. At that instant each of its reservations
        delivers unpaid (planned then, unpaid, or kept then, checked paid), which the planning
        shortcuts rely on (`_kept_plan`, `_best_plan_with`)."""
        return now != self._adopted_at

    def _plan_keeping(
        self, jobs: Sequence[JobState], view: ClusterView, keep: dict[str, Reservation]
    ) -> Plan | None:
        """``_plan(jobs, view, keep)`` when the kept reservations that still deliver fit
        together (None when they do not: then each must be taken in turn): the same plan, with
        a demand made only for the jobs planned again (`kept_delivers`)."""
        tracked_jobs, ladders = self._jobs, self._ladders
        now, capacity = view.now, view.cluster.total_workers
        pay = self._pays_kept_changes(now)
        delivering, others = [], []
        for job in jobs:
            tracked = tracked_jobs.get(job.job_id) or self._track(job, view)
            pessimistic = (tracked.ladders or ladders(job, tracked))[1]  # no call when kept
            reservation = keep.get(job.job_id)
            bound = tracked.kept_bound
            if (
                bound is not None
                and bound[0] is reservation
                and bound[1] is pessimistic
                and bound[2] is pay
                and now <= bound[3]
                and job.resume_s <= now
                and job.remaining_iterations <= bound[4] - bound[5] * now
            ):
                delivering.append(job)  # its progress kept up with what the reservation needs
            elif reservation is not None and kept_delivers(
                job, pessimistic, reservation, view, pay_kept_changes=pay
            ):
                delivering.append(job)
                tracked.kept_bound = self._kept_bound(job, pessimistic, reservation, view, pay)
            else:
                others.append(_demand(job, pessimistic, view, pay_kept_changes=pay))
        delivering.sort(key=_deadline_key)  # a demand's order, as plan_demands sorts them
        profile = FreeProfile(now, capacity)
        if not self._swept.take_all([keep[j.job_id] for j in delivering], now, profile):
            return None
        planned = plan_demands(others, now, capacity, profile=profile)
        reservations = {j.job_id: keep[j.job_id] for j in delivering}
        reservations.update(planned.reservations)
        return Plan(reservations, planned.failed, profile)

    @staticmethod
    def _kept_bound(
        job: JobState, ladder: Ladder, reservation: Reservation, view: ClusterView, pay: bool
    ) -> tuple[Reservation, Ladder, bool, float, float, float] | None:
        """Where ``reservation``, found to deliver ``job`` now (`kept_delivers`), still does
        without a check: up to the end of its segment holding now, while the job is not paused
        and its remaining work stays at most ``a - b * t`` at instant ``t``. From then the
        reservation does at most its segment's pessimistic rate less per second that passes
        (less where a pause falls in there), so a job that keeps up with that rate (one running
        on its planned count at no less than its pessimistic speed, as a job on its expected
        speed does) is not checked again until its speeds are re-read (a new ladder), its plan
        changes (a new reservation) or a change of count pauses it. None where no bound holds
        (paused now, or no workers reserved now)."""
        now = view.now
        if job.resume_s > now:
            return None
        segment = next(((e, n) for s, e, n in reservation if s <= now < e), None)
        if segment is None:
            return None
        end, count = segment
        rates = ladder.rates
        rate = rates[count] if 0 < count < len(rates) else 0.0
        # the pause a started job pays, paid whether it has started or not: a start later only
        # lowers the bound
        deadline = job.spec.deadline_s - view.restart_pause_s
        until = min(end, deadline)
        if rate <= 0 or until <= now:
            return None
        done = work_by(ladder, reservation, now, deadline, view.restart_pause_s if pay else 0.0)
        # a hair under the bound: its arithmetic rounds otherwise than `delivers`'s
        start_done = done + rate * now
        a = most_delivered(start_done) - 1e-12 * (start_done + 1.0)
        return (reservation, ladder, pay, until, a, most_delivered(rate) - most_delivered(0.0))

    def _best_plan(
        self, jobs: Sequence[JobState], view: ClusterView, newcomer: JobState | None = None
    ) -> Plan:
        """Keep the reservations in force; re-plan from scratch only if that fails fewer jobs.

        With ``newcomer`` (one of ``jobs``), the fresh plan is not made when it must fail a job
        too (`_overfull`), which is the same answer without the cost."""
        if not self._kept:
            return self._plan(jobs, view)
        kept = self._plan(jobs, view, keep=self._kept)
        if newcomer is not None:
            self._note_kept(kept, [j for j in jobs if j is not newcomer], view.now)
        if not kept.failed:
            return kept
        if newcomer is not None and len(kept.failed) == 1:
            key = _deadline_key(newcomer)
            before = [j for j in jobs if j is not newcomer and _deadline_key(j) <= key]
            if self._overfull(newcomer, before, view):
                return kept
        # The fresh plan is taken only if it fails fewer jobs: planned until it cannot.
        demands = self._demands(jobs, view)
        fresh = plan_failing_fewer(demands, view.now, view.cluster.total_workers, len(kept.failed))
        return kept if fresh is None else fresh

    def _note_kept(self, kept: Plan, jobs: list[JobState], now: float) -> None:
        """Remember that ``kept`` (a plan keeping the reservations in force) kept every one of
        ``jobs``: then each of their reservations delivers and all fit together at ``now``, which
        is what `_kept_plan` would check again when an admission that failed is followed by a
        decision at the same instant (the jobs' states cannot change in between without a
        decision, which forgets this, or a job leaving, which changes the set)."""
        in_force = self._kept
        if all(
            (reservation := in_force.get(j.job_id)) is not None
            and kept.reservations.get(j.job_id) is reservation
            for j in jobs
        ):
            self._kept_for = (now, frozenset(j.job_id for j in jobs))

    def _best_plan_with(self, job: JobState, guaranteed: list[JobState], view: ClusterView) -> Plan:
        """``_best_plan([*guaranteed, job], view)``, the same plan, made without re-planning the
        guaranteed jobs when the adopted plan was made at this instant for exactly them.

        Kept: every guaranteed job keeps its reservation (each delivers and fits: they were
        planned together, at this instant, on these ladders), so the kept plan is ``job``
        planned on what the adopted plan leaves. Fresh: it is adopted only if it fails fewer
        jobs than the kept plan, and a fresh plan runs in deadline order, so up to ``job`` it is
        the fresh plan of ``guaranteed`` alone (made once per decision): if that fails a job
        before ``job``, or ``job`` fails on what it leaves, the fresh plan fails at least as
        many, and is not made.
        """
        now, capacity = view.now, view.cluster.total_workers
        ladder = self._ladders(job, self._track(job, view))[1]
        demand = _demand(job, ladder, view)
        own = plan_demands([demand], now, capacity, profile=leftover(self._adopted, now, capacity))
        kept = Plan({**self._adopted.reservations, **own.reservations}, own.failed, own.free)
        if not kept.failed:
            return kept
        # ``kept`` fails ``job`` alone, so the fresh plan is adopted only if it fails no job.
        key = _deadline_key(job)
        # a generator: `_overfull` often answers before it has seen them all
        before = (j for j in guaranteed if (j.spec.deadline_s, j.spec.submit_s) <= key)
        if self._overfull(job, before, view):
            return kept  # the fresh plan fails a job too
        prefix = self._fresh_prefix(guaranteed, view)
        if prefix.failures_up_to(demand.order, now, capacity):
            return kept
        profile = prefix.profile_copy(now, capacity)
        own = plan_demands([demand], now, capacity, profile=profile)
        if own.failed:
            return kept
        rest = plan_demands(prefix.after(demand.order), now, capacity, profile=profile)
        if rest.failed:
            return kept
        reservations = {**prefix.reservations, **own.reservations, **rest.reservations}
        return Plan(reservations, [], profile)

    def _overfull(self, job: JobState, before: Iterable[JobState], view: ClusterView) -> bool:
        """Whether ``job`` and the guaranteed jobs ``before`` it (deadlines no later than its)
        cannot all finish in time, by worker-seconds alone: each needs at least its remaining
        work at its most efficient count, all of it before ``job``'s deadline."""
        window = job.spec.deadline_s - view.now
        budget = view.cluster.total_workers * window - self._least_worker_s(job)
        for other in before:
            budget -= self._least_worker_s(other)
            if budget < 0:
                return True
        return budget < 0

    def _least_worker_s(self, job: JobState) -> float:
        """Worker-seconds of the job's remaining work at its most efficient pessimistic count."""
        ladder = self._ladders(job, self._jobs[job.job_id])[1]
        per_worker = ladder.per_worker()
        return job.remaining_iterations / per_worker if per_worker > 0 else 0.0

    def _fresh_prefix(self, guaranteed: list[JobState], view: ClusterView) -> _FreshPrefix:
        """The fresh plan of the guaranteed jobs, one per instant and guaranteed set, made only
        as far as the retries of that instant need it."""
        key = (view.now, frozenset(j.job_id for j in guaranteed))
        if self._fresh is None or self._fresh.key != key:
            demands = [
                _demand(j, self._ladders(j, self._track(j, view))[1], view) for j in guaranteed
            ]
            self._fresh = _FreshPrefix(key, sorted(demands, key=lambda d: d.order))
        return self._fresh

    def _guaranteed(self, view: ClusterView) -> list[JobState]:
        tracked_jobs = self._jobs
        return [
            j
            for j in view.jobs
            if j.spec.deadline_s is not None
            and (tracked_jobs.get(j.job_id) or self._track(j, view)).guaranteed
        ]

    # -- the policy interface -------------------------------------------------------------------

    def admit(self, job: JobState, view: ClusterView) -> bool:
        self._now = view.now
        self._track(job, view)
        if job.spec.deadline_s is None:
            return True
        self._observe_jobs(view)
        if self._try_to_guarantee(job, self._guaranteed(view), view):
            return True
        return self.decline_to_best_effort

    def admit_arrivals(
        self,
        jobs: Sequence[JobState],
        view: ClusterView,
        joins: Callable[[JobState, bool], bool],
    ) -> list[bool]:
        """`admit` for each arrival in turn, with what every call would recompute kept between
        them: the known jobs observed once (an arrival's first sample is taken as it is
        tracked, so observing it again changes nothing), the guaranteed jobs listed once and
        extended, and the plan in force, once it was made at this instant for exactly those jobs,
        extended by each arrival instead of checked again reservation by reservation
        (`_best_plan_with`, as `allocate`'s retries do). One by one, each admission costs in
        proportion to the jobs admitted before it."""
        self._now = view.now
        answers: list[bool] = []
        guaranteed: list[JobState] | None = None  # listed at the first deadline job, as admit
        in_force = False
        for job in jobs:
            tracked = self._track(job, view)
            if job.spec.deadline_s is None:
                answer = True
            else:
                if guaranteed is None:
                    self._observe_jobs(view)
                    guaranteed = self._guaranteed(view)
                    key = (view.now, frozenset(j.job_id for j in guaranteed))
                    in_force = self._adopted_for == key
                if self._try_to_guarantee(job, guaranteed, view, in_force=in_force):
                    # adopted for exactly [*guaranteed, job] at this instant, unless it failed one
                    in_force = self._adopted_for is not None
                    answer = True
                else:
                    answer = self.decline_to_best_effort
            answers.append(answer)
            if joins(job, answer) and guaranteed is not None and tracked.guaranteed:
                guaranteed.append(job)
        return answers

    def _try_to_guarantee(
        self,
        job: JobState,
        guaranteed: list[JobState],
        view: ClusterView,
        *,
        in_force: bool = False,
    ) -> bool:
        """Guarantee ``job`` if a plan meets it without failing a job guaranteed before it: on
        its pessimistic speeds, or, for a job with no progress yet whose speeds are no
        measurement of its own (no ``curve.spread``), on its expected ones.

        ``in_force``: the adopted plan was made at this instant for exactly ``guaranteed`` (as
        in `allocate`), which lets `_best_plan_with` skip re-planning them."""
        tracked = self._jobs[job.job_id]
        if self._guarantee_on_ladders(job, guaranteed, view, in_force):
            return True
        ladders = tracked.ladders
        unmeasured = job.curve.spread is None
        if ladders is not None and unmeasured and not self._has_run(job, tracked):
            # No progress yet: its pessimistic speed is the lower edge of the prior's band,
            # which refuses jobs that fit on the expected speed. Guarantee it on that speed
            # until its first refresh after it runs (`_observe_jobs`), when its own progress
            # gives it a band. Under long overloads this meets more deadlines than the hedge
            # saves (docs/results/cluster.md, "Long overloads"). Not for speeds the job itself
            # measured on this machine (a ``spread``): their band is what it was seen to do.
            tracked.ladders = (ladders[0], ladders[0])
            if self._guarantee_on_ladders(job, guaranteed, view, in_force):
                return True
            tracked.ladders = ladders
        tracked.tried_on = (tracked.ladders_at_active_s, self._departed)
        return False

    def _guarantee_on_ladders(
        self, job: JobState, guaranteed: list[JobState], view: ClusterView, in_force: bool
    ) -> bool:
        """`_try_to_guarantee` on the job's ladders as they stand: one try, adopted if met."""
        if in_force:
            plan = self._best_plan_with(job, guaranteed, view)
        else:
            plan = self._best_plan([*guaranteed, job], view, newcomer=job)
        reservation = plan.reservations.get(job.job_id)
        # A job the plan cannot meet is no guarantee, even when the plan in force failed it too.
        if (
            reservation is None
            or set(plan.failed) - self._failed
            or not self._worth_it(job, reservation)
        ):
            return False
        tracked = self._jobs[job.job_id]
        tracked.guaranteed = True
        tracked.tried_on = None
        self._adopt(plan, view.now, [*guaranteed, job])
        return True

    def _retry_guarantees(self, guaranteed: list[JobState], view: ClusterView) -> None:
        """Guarantee unguaranteed deadline jobs that now fit, earliest deadline first.

        A job's first try, at arrival, uses the prior's wide band; once it has run, its band
        narrows, and completions free workers. Each job is tried again only when one of those
        changed since its last try, and at most ``RETRIES_PER_DECISION`` per decision, to keep
        a decision's time bounded. A job that would miss its deadline even alone on its
        fastest count at its pessimistic speed is no candidate: no plan can guarantee it, and
        under overload such jobs, having the earliest deadlines, would otherwise take every try
        and leave none for the jobs behind them that still fit.
        """
        candidates = []
        now = view.now
        for job in view.jobs:
            tracked = self._jobs[job.job_id]
            if job.spec.deadline_s is None or tracked.guaranteed:
                continue
            # refreshed, so tried_on compares the current prediction
            fastest = self._ladders(job, tracked)[1].rate_within[-1]
            if fastest <= 0 or now + job.remaining_iterations / fastest > job.spec.deadline_s:
                continue
            if tracked.tried_on != (tracked.ladders_at_active_s, self._departed):
                candidates.append(job)
        candidates.sort(key=_deadline_key)
        for job in candidates[:RETRIES_PER_DECISION]:
            if self._try_to_guarantee(job, guaranteed, view, in_force=True):
                guaranteed.append(job)

    def _adopt(self, plan: Plan, now: float, jobs: Sequence[JobState]) -> None:
        """Put ``plan``, made at ``now`` for ``jobs``, in force."""
        self._adopted = plan
        self._adopted_at = now
        self._kept = plan.reservations
        self._failed = set(plan.failed)
        self._adopted_for = None if plan.failed else (now, frozenset(j.job_id for j in jobs))
        self._kept_for = None  # about the reservations in force before this plan

    def _kept_plan(self, guaranteed: list[JobState], view: ClusterView) -> Plan:
        """``_best_plan(guaranteed, view)``, made without checking each reservation when the
        plan in force was made at this instant, for exactly these jobs, failing none (an
        admission just now, with no decision since): each reservation was planned now, on
        these ladders, so each delivers, and the kept plan is all of them taken together. The
        same when an admission that failed just now found each of them delivering
        (`_note_kept`)."""
        now, capacity = view.now, view.cluster.total_workers
        key = (now, frozenset(j.job_id for j in guaranteed))
        if key in (self._adopted_for, self._kept_for):
            ordered = sorted(guaranteed, key=_deadline_key)
            profile = FreeProfile(now, capacity)
            if self._swept.take_all([self._kept[j.job_id] for j in ordered], now, profile):
                return Plan({j.job_id: self._kept[j.job_id] for j in ordered}, [], profile)
        return self._best_plan(guaranteed, view)

    def allocate(self, view: ClusterView) -> Decision:
        self._now = view.now
        self._observe_all(view)
        if not view.jobs:
            return Decision()  # nothing to watch: no tick, or the clock would run forever
        guaranteed, plan = self._renew_guarantees(view)
        hand = _Hand(view.cluster.total_workers)
        self._give_planned(guaranteed, plan, view.now, hand)
        self._keep_best_effort_running(view, hand)
        hopeful = self._give_hopeful(guaranteed, plan, view, hand)
        self._give_the_rest(view, hand)
        if hand.free > 0:
            self._hand_out_spare(view, hand)
        self._keep_beyond_plan(guaranteed, plan, hand)
        return self._decision(view, hand, (plan, hopeful))

    # -- the steps of a decision, in order ---------------------------------------------------------

    def _observe_all(self, view: ClusterView) -> None:
        """Feed every job's progress; forget the jobs that left (each frees workers a guarantee
        may now use)."""
        self._observe_jobs(view)
        live = {job.job_id for job in view.jobs}
        for job_id in [j for j in self._jobs if j not in live]:
            del self._jobs[job_id]
            self._departed += 1

    def _renew_guarantees(self, view: ClusterView) -> tuple[list[JobState], Plan]:
        """Keep the plan in force where it still delivers, drop the guarantees no plan can keep
        any more, and try a few unguaranteed jobs again. Returns the guaranteed jobs in deadline
        order and the plan adopted for them."""
        guaranteed = self._guaranteed(view)
        plan = self._kept_plan(guaranteed, view)
        self._adopt(plan, view.now, guaranteed)
        for job_id in plan.failed:  # a worse prediction broke its guarantee
            self._jobs[job_id].guaranteed = False
        guaranteed = [j for j in guaranteed if self._jobs[j.job_id].guaranteed]
        self._retry_guarantees(guaranteed, view)
        guaranteed.sort(key=_deadline_key)
        return guaranteed, self._adopted

    def _give_planned(
        self, guaranteed: list[JobState], plan: Plan, now: float, hand: _Hand
    ) -> None:
        """(1) Each guaranteed job its planned count for now."""
        for job in guaranteed:
            need = plan.count_now(job.job_id, now) if job.job_id in plan.reservations else 0
            if need:
                hand.give(job.job_id, need, why=Why.PLANNED)

    def _keep_best_effort_running(self, view: ClusterView, hand: _Hand) -> None:
        """(2) Running best-effort jobs keep their smallest count, or their whole count when
        about done: preempting one loses its pause and its progress towards the only goal it
        has, finishing. What they held beyond it is not kept: it goes back into the spare
        hand-out, where newer best-effort jobs compete for it on equal terms (an old job holding
        many workers while a new one runs on one costs mean completion time)."""
        running_best_effort = [
            j
            for j in view.jobs
            if j.spec.deadline_s is None and j.workers and j.job_id not in hand.workers
        ]
        for job in running_best_effort:
            expected = self._ladders(job, self._jobs[job.job_id])[0]
            keep = expected.counts[0] if expected.counts else 0
            why = Why.SMALLEST
            if job.workers <= hand.free and self._finishing(job, expected, view):
                keep = job.workers  # a pause would cost it more than its workers give others
                why = Why.FINISHING
            if keep and keep <= hand.free:
                hand.give(job.job_id, keep, why=why)

    def _give_hopeful(
        self, guaranteed: list[JobState], plan: Plan, view: ClusterView, hand: _Hand
    ) -> Plan:
        """(3) Unguaranteed deadline jobs, planned by deadline on what the guarantees leave and
        on *expected* speeds: no promise, but the best hope of meeting them. A job whose
        reservation starts later is left to `_give_the_rest`: workers idle now are better spent
        on it than kept for later. Returns the hopeful plan."""
        hopeful = self._hopeful_plan(guaranteed, plan, view)
        for job_id, reservation in hopeful.reservations.items():
            need = Plan.count_now_of(reservation, view.now)
            if 0 < need <= hand.free:
                hand.give(job_id, need, why=Why.HOPEFUL)
        return hopeful

    def _give_the_rest(self, view: ClusterView, hand: _Hand) -> None:
        """(4) Everyone else, in `Urgency` order; running jobs before waiting ones (no churn),
        shortest first. Before the first hopeless deadline job, best-effort jobs share the spare
        among themselves: what old ones held beyond their smallest count competes with the
        newcomers' needs, and a hopeless deadline does not take it from them. Under
        ``completion`` every job given workers so far shares it there, so a deadline job not
        urgent, or already lost, does not take workers a job closer to its goal would use."""
        now = view.now
        others = [j for j in view.jobs if j.job_id not in hand.workers]
        # once per job: nothing it depends on changes during the decision
        priority = {j.job_id: self._other_priority(j, now) for j in others}
        others.sort(key=lambda j: priority[j.job_id])
        best_effort_shared = False
        for job in others:
            if hand.free <= 0:
                break
            if not best_effort_shared and priority[job.job_id][0] is Urgency.HOPELESS:
                self._hand_out_spare(
                    view, hand, best_effort_only=self.spare_order == "best_effort_first"
                )
                best_effort_shared = True
                if hand.free <= 0:
                    break
            share = job.workers if job.workers else self._starting_share(job, view, hand.free)
            if 0 < share <= hand.free:
                hand.give(job.job_id, share, why=_URGENCY_WHY[priority[job.job_id][0]])

    def _keep_beyond_plan(self, guaranteed: list[JobState], plan: Plan, hand: _Hand) -> None:
        """(6) Guaranteed jobs keep what they hold beyond their plan while it fits: no
        scale-down without need, unless what they hold beyond it gains less than
        ``min_spare_gain`` per worker (learnt since it was handed out: it would idle)."""
        for job in guaranteed:
            need = hand.workers.get(job.job_id, 0)
            if (
                job.job_id in plan.reservations
                and job.workers > need
                and job.workers - need <= hand.free
            ):
                gain = self._extra_gain(job, need) if self.min_spare_gain else None
                if gain is None or gain >= self.min_spare_gain:
                    hand.give(job.job_id, job.workers, had=need, why=Why.KEPT)
                else:
                    hand.too_little[job.job_id] = gain

    def _extra_pays(self, job: JobState, need: int) -> bool:
        """Whether the workers ``job`` holds beyond ``need`` reach ``min_spare_gain`` each on its
        expected speeds (always, from none: a job is never stopped for this)."""
        gain = self._extra_gain(job, need)
        return gain is None or gain >= self.min_spare_gain

    def _extra_gain(self, job: JobState, need: int) -> float | None:
        """The speed-up each worker ``job`` holds beyond ``need`` adds on its expected speeds,
        relative to its speed on ``need``; None from none (a job is never stopped for this)."""
        if not need:
            return None
        rates = self._ladders(job, self._jobs[job.job_id])[0].rates
        if not rates[need] > 0.0:
            return None
        return (rates[job.workers] / rates[need] - 1.0) / (job.workers - need)

    def _decision(self, view: ClusterView, hand: _Hand, plans: tuple[Plan, ...]) -> Decision:
        """The counts, largest first, the next time ``plans`` change a count, the pinned jobs,
        and why each changed job has its count; notes which jobs were re-sized."""
        now = view.now
        workers = hand.workers
        changed = []
        tracked_jobs = self._jobs
        for job in view.jobs:
            count = workers.get(job.job_id, 0)
            if count != job.workers:
                tracked = tracked_jobs[job.job_id]
                tracked.last_change_s = now
                self._sample(job, tracked)  # its interval on the count it leaves ends here
                tracked.observed_workers = count
                changed.append(job)
        self._decided_s = now
        reasons = self._reasons(changed, hand, view) if changed else {}
        self._reread.clear()
        # The tick re-plans on fresher predictions. Where every decision costs every running job
        # progress (view.decision_overhead_s), only events and plan changes wake the policy.
        wake = now + self.tick_s if not view.decision_overhead_s else math.inf
        for changing in plans:
            change = changing.next_change(now)
            if change is not None:
                wake = min(wake, change)
        # the decision changes jobs, so re-check every reservation
        self._adopted_for = self._kept_for = None
        order = sorted(workers, key=lambda job_id: -workers[job_id])
        return Decision(
            {job_id: workers[job_id] for job_id in order if workers[job_id]},
            None if math.isinf(wake) else wake,
            pinned=self._tight(view, workers),
            reasons=reasons,
        )

    def _reasons(
        self, changed: Sequence[JobState], hand: _Hand, view: ClusterView
    ) -> dict[str, str]:
        """Why each of the ``changed`` jobs has the count ``hand`` gives it, in words: the step
        that gave it, and a worker it was refused for gaining less than ``min_spare_gain``."""
        planned: int | None = None  # workers the guaranteed jobs get: said when one gets none
        reasons = {}
        for job in changed:
            count = hand.workers.get(job.job_id, 0)
            if count:
                why, gain = hand.why.get(job.job_id, (Why.BEST_EFFORT, 0.0))
                text = why.value.format(count=count, gain=gain, least=self.min_spare_gain)
            else:
                if planned is None:
                    planned = sum(n for j, n in hand.workers.items() if self.is_guaranteed(j))
                text = (
                    f"no worker is left for it: {planned} of {view.cluster.total_workers} go "
                    f"to guaranteed jobs, the rest to jobs ahead of it"
                )
            gain = hand.too_little.get(job.job_id)
            if gain is not None:
                text += (
                    f"; more workers would add only {gain:.2f} of its speed each, below "
                    f"min_spare_gain {self.min_spare_gain:g}"
                )
            if job.job_id in self._reread:
                shown = count or job.workers
                rate = self._ladders(job, self._jobs[job.job_id])[0].rate(shown)
                text += (
                    f"; its speed was re-read from its progress: {rate:.3g} iterations/s "
                    f"expected on {shown}"
                )
            reasons[job.job_id] = text
        return reasons

    # -- the event-driven interface (events.py) ---------------------------------------------------

    def on_arrival(self, job: JobState, view: ViewSource) -> bool:
        return self.admit(job, view())

    def on_arrivals(self, jobs: Sequence[JobState], view: ViewSource) -> bool:
        return self.admit_together(jobs, view())

    def decide(self, changes: Changes) -> Delta:
        """`allocate` on the view of the moment (one decision logic for both interfaces),
        answered with the counts that change against the counts this policy gave: a job it did
        not re-size is not named, so the backend checks and places the changed jobs alone."""
        if changes.view is None:
            raise ValueError(f"policy {self.name!r} reads the full view; the backend gave none")
        held, seq = self._held, self._seq
        for job in changes.arrived:
            seq[job.job_id] = self._arrivals
            self._arrivals += 1
        for job in changes.ended:
            held.pop(job.job_id, None)
            del seq[job.job_id]
        for job in changes.displaced:  # the backend could not place what it was given
            held.pop(job.job_id, None)
        decision = self.allocate(changes.view())
        workers = decision.workers
        delta = {job_id: n for job_id, n in workers.items() if held.get(job_id) != n}
        # taken away, in admission order (as the adapter names them)
        for job_id in sorted(held.keys() - workers.keys(), key=seq.__getitem__):
            delta[job_id] = 0
        self._held = {job_id: n for job_id, n in workers.items() if n}
        self._given = list(self._held.items())
        return Delta(delta, decision.wake_at, decision.pinned, decision)

    def allocations(self) -> Sequence[tuple[str, int]]:
        """The last answer's counts, largest first, as `allocate` gave them."""
        return self._given

    # -- what a backend may ask ---------------------------------------------------------------

    def is_guaranteed(self, job_id: str) -> bool:
        """Whether the policy currently guarantees the job's deadline."""
        tracked = self._jobs.get(job_id)
        return tracked is not None and tracked.guaranteed

    def predictor_of(self, job_id: str) -> OnlinePredictor | None:
        """The job's speed predictor, fed with its progress up to now (a decision feeds it only
        where the count changes or the speeds are re-read; what it ran since on the count it
        holds is fed here); None for a job not tracked."""
        tracked = self._jobs.get(job_id)
        if tracked is None:
            return None
        job = tracked.state
        if job is not None and job.workers and job.workers == tracked.observed_workers:
            self._sample(job, tracked)  # what it did since, for a forecast of the moment
        return tracked.predictor

    # -- helpers ----------------------------------------------------------------------------------

    def _hopeful_plan(self, guaranteed: list[JobState], plan: Plan, view: ClusterView) -> Plan:
        """Unguaranteed deadline jobs that can still make it, planned on expected speeds on the
        workers ``plan`` leaves; last decision's reservations are kept while they still deliver."""
        now = view.now
        tracked_jobs = self._jobs
        hopeful_jobs = [
            job
            for job in view.jobs
            if job.spec.deadline_s is not None
            and job.spec.deadline_s > now
            and not tracked_jobs[job.job_id].guaranteed
        ]
        # Earliest deadlines first, and a bounded number per decision: planning a job that
        # cannot fit walks the whole profile, and the rest get their turn at later decisions.
        # (Chosen before their demands are made: a demand's order is its job's deadline key.
        # `_retry_guarantees` refreshed every unguaranteed job's ladders this decision, so the
        # jobs left out lose no refresh.)
        demands = [
            _demand(job, self._ladders(job, tracked_jobs[job.job_id])[0], view)
            for job in heapq.nsmallest(HOPEFUL_PER_DECISION, hopeful_jobs, key=_deadline_key)
        ]
        if not demands:
            self._hoped = {}
            return Plan()
        capacity = view.cluster.total_workers
        hopeful = plan_demands(demands, now, capacity, self._hoped, leftover(plan, now, capacity))
        by_id = {job.job_id: job for job in view.jobs}
        for job_id in [
            j for j, r in hopeful.reservations.items() if not self._worth_it(by_id[j], r)
        ]:
            del hopeful.reservations[job_id]
        self._hoped = hopeful.reservations
        return hopeful

    def _worth_it(self, job: JobState, reservation: Reservation) -> bool:
        """Whether meeting this deadline is worth what the reservation holds: at most
        ``MAX_RESERVATION_OVERHEAD`` times the worker-seconds of the job's remaining work at its
        most efficient count. One deadline bought with many poorly scaling workers can cost
        the deadlines of many small jobs that arrive while it runs."""
        expected = self._ladders(job, self._jobs[job.job_id])[0]
        per_worker = expected.per_worker()
        if per_worker <= 0:
            return True
        held = sum((end - start) * count for start, end, count in reservation if count)
        efficient = job.remaining_iterations / per_worker
        return held <= MAX_RESERVATION_OVERHEAD * efficient

    def _tight(self, view: ClusterView, workers: dict[str, int]) -> frozenset[str]:
        """Running deadline jobs, unchanged in count, whose expected slack is under
        ``PIN_SLACK_PAUSES`` restart pauses: moving one to re-pack others could cost it its
        deadline."""
        margin = PIN_SLACK_PAUSES * view.restart_pause_s
        now, tracked_jobs = view.now, self._jobs
        tight = set()
        for job in view.jobs:
            deadline = job.spec.deadline_s
            held = job.workers
            if deadline is None or not held or workers.get(job.job_id) != held:
                continue
            tracked = tracked_jobs[job.job_id]
            rates = (tracked.ladders or self._ladders(job, tracked))[0].rates  # no call when kept
            rate = rates[held] if held < len(rates) else 0.0  # Ladder.rate; ``held`` is > 0
            if rate > 0 and deadline - now - job.remaining_iterations / rate < margin:
                tight.add(job.job_id)
        return frozenset(tight)

    def _finishing(self, job: JobState, expected: Ladder, view: ClusterView) -> bool:
        """Less work left at its current count than ``FINISHING_PAUSES`` restart pauses."""
        rate = expected.rate(job.workers)
        left = job.remaining_iterations / rate if rate > 0 else math.inf
        return left < FINISHING_PAUSES * view.restart_pause_s

    def _interval(self, view: ClusterView) -> float:
        """How long a re-sized job is left alone: ``min_interval_s`` (default: ten restart
        pauses)."""
        return 10 * view.restart_pause_s if self.min_interval_s is None else self.min_interval_s

    def _other_priority(self, job: JobState, now: float) -> tuple:
        tracked = self._jobs[job.job_id]
        expected = self._ladders(job, tracked)[0]
        best = expected.rate_within[-1]  # the fastest count the job may use
        remaining_s = job.remaining_iterations / best if best > 0 else math.inf
        deadline = job.spec.deadline_s
        if deadline is None:
            return (Urgency.BEST_EFFORT, job.workers == 0, remaining_s, job.spec.submit_s)
        if now + remaining_s <= deadline:
            slack = deadline - now - remaining_s
            if slack <= remaining_s + 2 * self.tick_s:
                return (
                    Urgency.MUST_RUN_SOON,
                    job.workers == 0,
                    deadline,
                    job.spec.submit_s,
                )  # can make it, must run soon
        if (
            job.workers
            and self.spare_order == "completion"
            and now + (1.0 - NEAR_MISS_SHARE) * remaining_s <= deadline
        ):
            # running, and may make it: it keeps its workers (under ``completion`` the spare is
            # handed out before the hopeless jobs, and would take them)
            return (Urgency.MUST_RUN_SOON, False, deadline, job.spec.submit_s)
        return (Urgency.HOPELESS, job.workers == 0, remaining_s, job.spec.submit_s)

    def _starting_share(self, job: JobState, view: ClusterView, free: int) -> int:
        """Fewest workers (within ``free``) meeting the deadline, else the best use of one step."""
        expected = self._ladders(job, self._jobs[job.job_id])[0]
        counts = [g for g in expected.counts if g <= free]
        if not counts:
            return 0
        deadline = job.spec.deadline_s
        if deadline is not None:
            for g in counts:
                if view.now + job.remaining_iterations / expected.rate(g) <= deadline:
                    return g
        return counts[0]

    def _hand_out_spare(
        self, view: ClusterView, hand: _Hand, best_effort_only: bool = False
    ) -> None:
        """(5) One step up at a time to the job with the largest relative speed-up per added
        worker over the square root of its remaining time, where the time saved beats
        ``gain_over_pause`` restart pauses, the speed-up per added worker reaches
        ``min_spare_gain`` and the job was not just re-sized. Shorter jobs first, softly: a
        strict shortest-first piles workers on one job past where they pay off, and mean
        completion time is lowest when short jobs leave early. Under ``best_effort_first`` (the
        default) best-effort jobs come first, and only their claims are divided so; under
        ``completion`` every job's is, best-effort ones counted `BEST_EFFORT_SPARE_WEIGHT`
        times (completion time is their only goal)."""
        workers = hand.workers
        pause = view.restart_pause_s
        enough = self.gain_over_pause * pause
        min_gain = self.min_spare_gain
        completion = self.spare_order == "completion"
        heap: list[tuple[bool, float, int, JobState]] = []
        gains: dict[str, float] = {}  # each job's next step's speed-up per added worker
        tracked_jobs, ladders = self._jobs, self._ladders

        def push(position: int, job: JobState, current: int) -> None:
            tracked = tracked_jobs[job.job_id]
            expected = (tracked.ladders or ladders(job, tracked))[0]  # no call when kept
            counts = expected.counts
            index = bisect.bisect_right(counts, current)
            if index == len(counts):
                return
            step = counts[index]
            if step - current > hand.free:
                return
            # A job that has run pays a pause for the change, unless this decision moves it anyway.
            pays = pause if current == job.workers and job.started_s is not None else 0.0
            rates = expected.rates
            rate_now, rate_step = rates[current], rates[step]
            remaining = job.remaining_iterations
            saving = remaining * (1 / rate_now - 1 / max(rate_step, 1e-12))
            if saving - pays > enough:
                speedup = rate_step / rate_now - 1.0
                has_deadline = job.spec.deadline_s is not None
                gain = speedup / (step - current)
                if gain < min_gain:  # the added workers would idle more than they work
                    hand.too_little[job.job_id] = gain
                    return
                gains[job.job_id] = gain
                if completion:
                    gain /= math.sqrt(max(remaining / rate_now, 1.0))
                    if not has_deadline:
                        gain *= BEST_EFFORT_SPARE_WEIGHT
                    heapq.heappush(heap, (False, -gain, position, job))
                else:
                    if not has_deadline:
                        gain /= math.sqrt(max(remaining / rate_now, 1.0))
                    heapq.heappush(heap, (has_deadline, -gain, position, job))

        interval = self._interval(view)
        now = view.now
        for position, job in enumerate(view.jobs):
            current = workers.get(job.job_id, 0)
            if not current or (best_effort_only and job.spec.deadline_s is not None):
                continue
            if (
                job.started_s is None
                or job.workers != current
                or now - tracked_jobs[job.job_id].last_change_s >= interval  # calm
            ):
                push(position, job, current)
        while heap and hand.free > 0:
            _, _, position, job = heapq.heappop(heap)
            current = workers[job.job_id]
            counts = ladders(job, tracked_jobs[job.job_id])[0].counts
            step = counts[bisect.bisect_right(counts, current)]
            if step - current > hand.free:
                continue
            hand.give(job.job_id, step, had=current, why=Why.SPARE, gain=gains[job.job_id])
            push(position, job, step)


#: A job's (deadline, submit time): a demand's order. An attrgetter, not a function: it sorts
#: every guaranteed job at every decision, without a Python call per job.
_deadline_key: Callable[[JobState], tuple[float, float]] = operator.attrgetter(
    "spec.deadline_s", "spec.submit_s"
)
