"""Trace-driven simulation of a cluster under one policy, on the shared event engine.

A worker is the cluster's unit of allocation, a GPU or a CPU core (``ClusterSpec.resource``).
On a cluster of several GPU types (``ClusterSpec.gpu_types``) a job's gang runs on one type, at
that type's speed (`qosched.cluster.gpu_types`), on the fastest type with room for it; the
policy plans on the slowest type's speed (docs/simulator.md, "Mixed GPU types").
Between scheduling points every running job advances at its speed curve's rate for its worker
count, times ``cross_node_factor`` when it spans more nodes than it needs. Any change of a started
job's workers (resize, move, preemption and resume) costs ``restart_pause_s`` of no progress while
it holds the new workers: the stop-checkpoint-restart cycle of data-parallel training. A job's
first start is free.

``SimConfig.artifact`` (`qosched.cluster.artifact.ArtifactConfig`) swaps that for the cost models
of the ElasticFlow artifact's simulator (``scheduler/utils.py`` ``estimate_overhead``), its 60 s
decision slot and its ways of advancing and ending jobs; ``qosched sim cluster --fidelity
artifact`` sets them per policy (docs/results/fidelity.md).
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from qosched.cluster.artifact import (
    ARTIFACT_RESTART_EVERY,
    NO_ARTIFACT_FIELDS,
    ArtifactConfig,
    ArtifactDecision,
    artifact_overhead_s,
)
from qosched.cluster.gpu_types import GPU_TYPES, TypeSpeeds, slowest
from qosched.cluster.job import JobSpec
from qosched.cluster.placement import Placements, is_split, place
from qosched.cluster.policies.base import Policy
from qosched.cluster.policies.events import Changes, Delta, EventPolicy, as_event_policy
from qosched.cluster.spec import ClusterSpec
from qosched.cluster.state import ClusterView, DecisionClock, JobState, Phase, Placement
from qosched.cluster.throughput import SpeedCurve, ThroughputModel
from qosched.cluster.traces import Trace, check_job, column_name
from qosched.core.errors import InputError, SimulationError
from qosched.sim.engine import Engine, Event

# Events at one instant: completions and arrivals first (the arrivals after the completions for
# a policy that admits them together, as the ElasticFlow artifact does), then one decision.
_EVENT_PRIORITY, _ADMIT_PRIORITY, _DECIDE_PRIORITY = 0, 1, 2
# Fraction of a job's iterations below which what is left is float rounding, not work.
_DONE_TOLERANCE = 1e-9

#: The longest restart pause simulated: a day.
MAX_RESTART_PAUSE_S = 86_400.0
#: Decisions in a row that may leave every job waiting on an idle cluster, with no arrival to
#: come and no deadline ahead, before the policy is taken to be stuck (a week of 60 s slots):
#: without this bound a policy that waits for a moment the simulator never decides at would run
#: forever.
STALL_DECISIONS = 10_080
#: The smallest ``SimConfig.cross_node_factor``: a job split across nodes at least a tenth as fast.
MIN_CROSS_NODE_FACTOR = 0.1


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Mechanism constants. Defaults are documented in docs/ARCHITECTURE.md."""

    # Tens of seconds is what elastic-training systems report for stopping a data-parallel job,
    # checkpointing, and restarting it on a new set of workers; 30 s is a middle value.
    restart_pause_s: float = 30.0
    # A job split over more nodes than it needs sends its gradients over the slower inter-node
    # network; the tables measured consolidated jobs, so a split job is charged this factor.
    cross_node_factor: float = 0.85
    # The truth the tables do not tell (all off by default, so policies see exact speeds):
    # each job's real speed on g workers is table(g) * F * g**D, with a hidden speed factor
    # F ~ lognormal(0, speed_sigma) and scaling exponent D ~ normal(0, scaling_sigma) per job;
    # and at every decision a running job's speed is redrawn around that with relative noise
    # normal(0, noise). Drawn from ``seed``: same seed, same truth.
    speed_sigma: float = 0.0
    scaling_sigma: float = 0.0
    noise: float = 0.0
    seed: int = 0
    # How the simulator departs from its own behaviour to run as the ElasticFlow artifact's
    # (``qosched sim cluster --fidelity artifact``, `qosched.cluster.fidelity`); the default
    # departs in nothing.
    artifact: ArtifactConfig = field(default_factory=ArtifactConfig)

    def __post_init__(self) -> None:
        for name in ("speed_sigma", "scaling_sigma", "noise"):
            value = getattr(self, name)
            if not (math.isfinite(value) and 0 <= value < 1):
                raise InputError(f"must be in [0, 1), got {value}", field=name)
        # A checkpoint-restart takes seconds to minutes; past a day a pause is a unit mistake,
        # and pauses of 1e300 s left the planners' arithmetic spinning.
        if not 0 <= self.restart_pause_s <= MAX_RESTART_PAUSE_S:
            raise InputError(
                f"must be in [0, {MAX_RESTART_PAUSE_S:g}] seconds, got {self.restart_pause_s}",
                field="restart_pause_s",
            )
        if not isinstance(self.artifact, ArtifactConfig):
            raise InputError(
                f"must be an ArtifactConfig, got {type(self.artifact).__name__}", field="artifact"
            )
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise InputError(f"must be a whole number >= 0, got {self.seed!r}", field="seed")
        # A job spanning nodes it could fit in runs at most 10x slower: a smaller factor would
        # stretch its run past any horizon the policies' clocks can tick through.
        if not MIN_CROSS_NODE_FACTOR <= self.cross_node_factor <= 1:
            raise InputError(
                f"must be in [{MIN_CROSS_NODE_FACTOR}, 1], got {self.cross_node_factor}",
                field="cross_node_factor",
            )


@dataclass(frozen=True, slots=True)
class JobOutcome:
    job_id: str
    model: str
    submit_s: float
    deadline_s: float | None
    requested_workers: int
    declined: bool
    start_s: float | None
    finish_s: float | None
    worker_seconds: float
    reallocations: int
    # The time judged against the deadline when not the finish (``ArtifactConfig.slot_progress``).
    judged_s: float | None = None
    # On a cluster of several GPU types, the types the job ran on, in the order of first use.
    gpu_types: tuple[str, ...] = ()

    @property
    def jct_s(self) -> float | None:
        return None if self.finish_s is None else self.finish_s - self.submit_s

    @property
    def met_deadline(self) -> bool:
        judged = self.finish_s if self.judged_s is None else self.judged_s
        return (
            self.deadline_s is not None
            and self.finish_s is not None
            and judged is not None
            and judged <= self.deadline_s + 1e-6
        )


@dataclass(frozen=True, slots=True)
class SimResult:
    policy: str
    cluster: ClusterSpec
    outcomes: tuple[JobOutcome, ...]
    # (time, workers allocated from then on), one entry per change
    allocation_timeline: tuple[tuple[float, int], ...]
    wall_s: float
    decisions: int
    # Jobs given workers that found no room for them (on a mixed cluster: in no one type's
    # nodes), summed over the decisions; each is reported back to the policy as displaced.
    displaced: int = 0


class ClusterSimulator:
    """Run one policy over one trace: ``ClusterSimulator(...).run() -> SimResult``.

    The policy is driven through the event interface (`qosched.cluster.policies.events`): a
    full-view `Policy` through `FullView`, one that implements ``decide`` natively.
    """

    def __init__(
        self,
        cluster: ClusterSpec,
        throughputs: ThroughputModel,
        policy: Policy | EventPolicy,
        trace: Trace | Sequence[JobSpec],
        config: SimConfig | None = None,
        on_progress: Callable[[int, int], None] | None = None,
        type_speeds: TypeSpeeds | None = None,
    ) -> None:
        self.cluster = cluster
        self.policy = as_event_policy(policy)
        self.config = config or SimConfig()
        self.artifact = self.config.artifact
        self.on_progress = on_progress
        if not isinstance(trace, Trace):
            trace = Trace(tuple(trace))
        self._typed = _TypedSpeeds(cluster, throughputs, type_speeds) if cluster.gpu_types else None
        self._states = [
            self._validated_state(trace, i, throughputs) for i in range(len(trace.jobs))
        ]
        self._rng = np.random.default_rng(self.config.seed)
        self._truth = {
            state.job_id: (
                float(self._rng.lognormal(0.0, self.config.speed_sigma)),
                float(self._rng.normal(0.0, self.config.scaling_sigma)),
            )
            for state in self._states
        }
        # Arrival order: by submission time, ties in trace order.
        self._arrivals = sorted(self._states, key=lambda s: s.spec.submit_s)
        self.engine = Engine(start=self._arrivals[0].spec.submit_s if self._arrivals else 0.0)
        artifact = self.artifact
        grid_origin_s = (  # ``decision_grid``: the first arrival or the given time
            self.engine.now if artifact.grid_origin_s is None else artifact.grid_origin_s
        )
        self._clock = DecisionClock(
            artifact.decision_slot_s,
            grid_origin_s if artifact.decision_grid else None,
            # Restart rounds are counted decisions, idle ones included.
            counted=artifact.restart_model in ("every-decision", "on-start")
            or artifact.decide_at != "events",
            # An arrival not held for the slot's end is decided at once (`_on_arrival`).
            off_clock=not artifact.hold_last_arrival or artifact.decide_at != "events",
        )
        self._active: dict[str, JobState] = {}
        self._admitted = 0
        self._admit_seq: dict[str, int] = {}  # per admitted job, its place in admission order
        # What the next decision reports to the policy (`Changes`).
        self._arrived: list[JobState] = []
        self._ended: list[JobState] = []
        self._displaced: list[JobState] = []
        self._displaced_count = 0
        self._woke = False
        self._placements = Placements(
            cluster, None if self._typed is None else self._typed.spans_of
        )
        # Progress is brought up to date for every running job at every event only for a policy
        # that reads it (and the artifact accountings that step jobs by their plans); otherwise
        # a job's progress is its rate since ``last_update_s``, brought up to date when the job
        # changes (`_sync`), and jobs within rounding of their end are found in `_done_by`.
        artifact = self.artifact
        self._lazy = not (
            self.policy.reads_progress or artifact.slot_progress or artifact.ends_on != "iterations"
        )
        # (when the job is within `_DONE_TOLERANCE` of its end, sequence, its completion event,
        # the job): an entry counts while that event is the job's.
        self._done_by: list[tuple[float, int, Event, JobState]] = []
        self._done_seq = 0
        # The active jobs holding workers (`_apply`, `_finish`): progress is brought up to date
        # for them alone.
        self._running: dict[str, JobState] = {}
        self._declined: set[str] = set()
        self._allocated = 0
        self._timeline: list[tuple[float, int]] = []
        self._decide_event: Event | None = None
        self._wake_event: Event | None = None
        self._progress_at = -math.inf
        self._settled = 0
        self._decisions = 0
        self._idle_decisions = 0  # in a row, all jobs waiting, nothing running, none to arrive
        self._rounds = 0  # decisions counted toward the restart rounds
        self._owed: dict[str, float] = {}  # ``decide_at`` "arrivals": overheads still to pay
        self._last_decision_s = -math.inf
        self._seen_placements: set[tuple[int, int]] = set()  # the artifact's GPU-set cache
        # slot_progress: per job, when its work stops (its planned end), the end planned at its
        # last decision, and when its end event is due.
        self._work_until: dict[str, float] = {}
        self._planned_end: dict[str, float] = {}
        self._end_event_at: dict[str, float] = {}
        self._policy_planned_end: Mapping[str, float] = {}  # the last decision's planned ends
        self._layout_order: tuple[str, ...] = ()
        # "on-start": per job started at the last decision, the overhead it has yet to pay.
        self._start_charge: dict[str, float] = {}

    def _validated_state(self, trace: Trace, index: int, throughputs: ThroughputModel) -> JobState:
        job = trace.jobs[index]
        source, line = trace.where(index)
        check_job(job, throughputs, source=source, line=line, layout=trace.layout)
        if self.policy.honours_requests and job.requested_workers > self.cluster.total_workers:
            raise InputError(
                f"job {job.job_id} requests {self.cluster.count(job.requested_workers)} but the "
                f"cluster has {self.cluster.total_workers} ({self.cluster.describe()}), so policy "
                f"{self.policy.name!r}, which honours requests, could never run it",
                source=source,
                line=line,
                field=column_name(trace.layout, "workers"),
            )
        if self._typed is not None:
            curve = self._typed.add(job)
            if self.policy.honours_requests and not curve.available(job.requested_workers):
                raise InputError(
                    f"job {job.job_id} requests {self.cluster.count(job.requested_workers)}: "
                    "more than one GPU type's nodes hold, or a count some type has no speed at "
                    f"({self.cluster.describe()}), so policy {self.policy.name!r}, which "
                    "honours requests, could never run it",
                    source=source,
                    line=line,
                    field=column_name(trace.layout, "workers"),
                )
            return JobState(job, curve)
        return JobState(job, throughputs.curve(job.model, job.batch_size))

    # -- running ---------------------------------------------------------------------------

    def run(self) -> SimResult:
        started = time.perf_counter()
        self._next_arrival = 0
        if self._arrivals:
            self._schedule_next_arrival()
        self.engine.run()
        unfinished = [
            s.job_id
            for s in self._states
            if s.phase is not Phase.FINISHED and s.job_id not in self._declined
        ]
        if unfinished:
            raise SimulationError(
                f"policy {self.policy.name!r} left {len(unfinished)} job(s) unfinished with no "
                f"event pending at t={self.engine.now}: {', '.join(unfinished[:5])}"
            )
        return SimResult(
            policy=self.policy.name,
            cluster=self.cluster,
            outcomes=tuple(self._outcome(s) for s in self._states),
            allocation_timeline=tuple(self._timeline),
            wall_s=time.perf_counter() - started,
            decisions=self._decisions,
            displaced=self._displaced_count,
        )

    def _schedule_next_arrival(self) -> None:
        state = self._arrivals[self._next_arrival]
        self.engine.schedule(
            self._on_arrival,
            at=max(state.spec.submit_s, self.engine.now),  # later: held back by a decision slot
            priority=self._arrival_priority(),
            label=f"arrival {state.job_id}",
        )

    def _arrival_priority(self) -> int:
        return _ADMIT_PRIORITY if self.policy.admits_together else _EVENT_PRIORITY

    def _next_decision_s(self, at: float) -> float:
        """When a decision asked for at ``at`` is made: not within the slot of the last one,
        and with ``decision_grid`` on the next point of the grid."""
        return self._clock.next_decision_s(at, self._last_decision_s)

    def _held(self) -> bool:
        """Whether the arrival due now waits for the end of the last decision's slot."""
        now = self.engine.now
        if now >= self._next_decision_s(now):
            return False
        if not self.artifact.hold_last_arrival:
            later = (
                s for s in self._arrivals[self._next_arrival :] if s.spec.submit_s > now + 1e-9
            )
            return next(later, None) is not None
        return True

    def _on_arrival(self) -> None:
        # Within the slot but not held (``hold_last_arrival``): decided now.
        early = self.engine.now < self._next_decision_s(self.engine.now)
        if self._held():
            # Within the slot of the last decision: the artifact handles it at the slot's end.
            self.engine.schedule(
                self._on_arrival,
                at=self._next_decision_s(self.engine.now),
                priority=self._arrival_priority(),
                label="arrival",
            )
            return
        state = self._arrivals[self._next_arrival]
        self._next_arrival += 1
        if self.policy.admits_together:
            self._admit_together(state)
            return
        if self._next_arrival < len(self._arrivals):
            self._schedule_next_arrival()
        self._advance_progress()
        at = self.engine.now if early or self.artifact.decide_at == "arrivals" else None
        if self.policy.on_arrival(state, self._view):
            self._activate(state)
            self._request_decision(at)
        else:
            state.phase = Phase.DECLINED
            self._declined.add(state.job_id)
            self._settle()
            if at is not None:  # every arrival makes a round
                self._request_decision(at)

    def _admit_together(self, first: JobState) -> None:
        """A policy that ``admits_together`` judges every arrival due now at once (with a
        decision slot: all those held back by it), all admitted or all declined."""
        now = self.engine.now
        batch = [first]
        while (
            self._next_arrival < len(self._arrivals)
            and self._arrivals[self._next_arrival].spec.submit_s <= now
        ):
            batch.append(self._arrivals[self._next_arrival])
            self._next_arrival += 1
        if self._next_arrival < len(self._arrivals):
            self._schedule_next_arrival()
        self._advance_progress()
        admitted = self.policy.on_arrivals(batch, self._view)
        self._request_decision()  # declined or not, the artifact decides at every arrival
        for state in batch:
            if admitted or state.spec.deadline_s is None:
                self._activate(state)
                self._request_decision()
            else:
                state.phase = Phase.DECLINED
                self._declined.add(state.job_id)
                self._settle()

    def _activate(self, state: JobState) -> None:
        self._active[state.job_id] = state
        self._admit_seq[state.job_id] = self._admitted
        self._admitted += 1
        self._arrived.append(state)
        state.last_update_s = self.engine.now

    def _on_completion(self, state: JobState) -> None:
        state.completion_event = None
        self._advance_progress()
        if state.phase is not Phase.FINISHED:  # not already finished by _advance_progress
            self._finish(state)  # with slot_progress: at its end event, work left or not

    def _finish(self, state: JobState) -> None:
        self._sync(state)
        if state.completion_event is not None:
            self.engine.cancel(state.completion_event)
            state.completion_event = None
        left = state.remaining_iterations
        state.iterations_done = float(state.spec.iterations)
        state.phase = Phase.FINISHED
        state.finished_s = self.engine.now
        slot_end = self._next_decision_s(self.engine.now)
        if self.artifact.finish_at_slot_end and (
            left - state.rate * (slot_end - self.engine.now)
            <= _DONE_TOLERANCE * state.spec.iterations
        ):
            # Its work is done within the slot: it ends at the slot's end (its workers stay
            # idle until then, no decision comes within the slot). One stopped by its
            # duration with work left ends now.
            state.finished_s = max(state.finished_s, slot_end)
        self._set_allocation_total(self._allocated - state.workers)
        state.workers, state.placement, state.rate = 0, (), 0.0
        self._placements.set(state.job_id, ())
        self._work_until.pop(state.job_id, None)
        del self._active[state.job_id]
        self._running.pop(state.job_id, None)
        self._ended.append(state)
        self._settle()
        if self.artifact.decide_at == "events":
            self._request_decision()

    def _on_wake(self) -> None:
        self._wake_event = None
        self._woke = True
        self._request_decision()

    def _settle(self) -> None:
        self._settled += 1
        if self.on_progress is not None:
            self.on_progress(self._settled, len(self._states))

    def _request_decision(self, at: float | None = None) -> None:
        """A decision at the next time one may be made, or at ``at`` (sooner than one due)."""
        if at is not None and self._decide_event is not None and self._decide_event.time > at:
            self.engine.cancel(self._decide_event)
            self._decide_event = None
        if self._decide_event is None:
            self._decide_event = self.engine.schedule(
                self._decide,
                at=self._next_decision_s(self.engine.now) if at is None else at,
                priority=_DECIDE_PRIORITY,
                label="decide",
            )

    def _view(self) -> ClusterView:
        overhead = 0.0
        if self.artifact.restart_model == "every-decision":  # the least a decision costs a job
            overhead = artifact_overhead_s(
                1, self.cluster.total_workers, restart=False, cached=True
            )
        return ClusterView(
            self.engine.now,
            self.cluster,
            tuple(self._active.values()),
            self.config.restart_pause_s,
            overhead,
            self._clock,
        )

    def _advance_progress(self) -> None:
        """Bring every running job's progress and attained service up to now (when progress is
        kept lazily, only those of the jobs that end now).

        A job within rounding error of its last iteration finishes now: its completion event
        may sit a few ulps later than another event of the same instant. A job holding no
        workers is not looked at: nothing of it changes while it waits, and `_apply` starts its
        clock (``last_update_s``) when it is given workers again.
        """
        now = self.engine.now
        if now == self._progress_at:
            return
        self._progress_at = now
        if self._lazy:
            self._finish_all(self._due(now))
            return
        done = []
        work_until = self._work_until
        # NOTE: `_sync`'s update, inlined with ``max``/``min`` written out, and `_ran_out`
        # inlined for the usual end rule (the same values): this runs over every running job at
        # every event. A change to one is a change to both.
        by_iterations = self.artifact.ends_on == "iterations"
        for state in self._running.values():
            last, resume = state.last_update_s, state.resume_s
            since = resume if resume > last else last
            until = min(now, work_until.get(state.job_id, now)) if work_until else now
            if until > since:
                state.iterations_done = min(
                    float(state.spec.iterations),
                    state.iterations_done + state.rate * (until - since),
                )
            state.attained_worker_s += state.workers * (now - last)
            active = now - since
            state.active_s += active if active > 0.0 else 0.0
            if (
                state.remaining_iterations <= _DONE_TOLERANCE * state.spec.iterations
                if by_iterations
                else self._ran_out(state)
            ):
                done.append(state)
            state.last_update_s = now
        self._finish_all(done)

    def _finish_all(self, done: list[JobState]) -> None:
        if len(done) > 1:  # they finish in the order they were admitted in, `_active`'s
            seq = self._admit_seq
            done.sort(key=lambda state: seq[state.job_id])
        for state in done:
            self._finish(state)

    def _due(self, now: float) -> list[JobState]:
        """The running jobs within rounding error of their end at ``now``: those whose entry in
        `_done_by` is due and still theirs (a job being completed has no event any more)."""
        heap, done = self._done_by, []
        while heap and heap[0][0] <= now:
            _, _, event, state = heapq.heappop(heap)
            current = state.completion_event
            if (
                (current is event or current is None)
                and state.phase is Phase.RUNNING
                and state not in done
            ):
                done.append(state)
        return done

    def _sync(self, state: JobState) -> None:
        """Bring one running job's progress up to now, as `_advance_progress` does for all: with
        progress kept lazily, before anything of the job changes."""
        now, last = self.engine.now, state.last_update_s
        if last == now or state.job_id not in self._running:
            return
        resume = state.resume_s
        since = resume if resume > last else last
        work_until = self._work_until
        until = min(now, work_until.get(state.job_id, now)) if work_until else now
        if until > since:
            state.iterations_done = min(
                float(state.spec.iterations),
                state.iterations_done + state.rate * (until - since),
            )
        state.attained_worker_s += state.workers * (now - last)
        active = now - since
        state.active_s += active if active > 0.0 else 0.0
        state.last_update_s = now

    def _ran_out(self, state: JobState) -> bool:
        done = state.remaining_iterations <= _DONE_TOLERANCE * state.spec.iterations
        ends_on, duration = self.artifact.ends_on, state.spec.duration_s
        if ends_on == "iterations" or duration is None:
            return done
        timed_out = state.active_s >= duration - 1e-9
        return timed_out if ends_on == "duration" else timed_out or done

    def _decide(self) -> None:
        """One scheduling point: bring the jobs up to now, ask the policy what changes, apply
        its answer, then what the artifact's accountings charge, and ask for the next call."""
        self._decide_event = None
        self._catch_up()
        delta = self._ask_policy()
        counted, restart_round = self._count_round()
        counts = self._checked(delta)
        # What a policy reproducing the artifact hands its simulator; nothing for the others.
        decision = delta.decision
        extra = decision if isinstance(decision, ArtifactDecision) else NO_ARTIFACT_FIELDS
        self._policy_planned_end = extra.planned_end
        self._layout_order = extra.layout_order
        moved = self._placed(counts, delta)
        model = self.artifact.restart_model
        # Every active job, in admission order, where the decision does something to each.
        every = self.config.noise or model in ("every-decision", "on-start")
        jobs = tuple(self._active.values()) if every else ()
        if self.config.noise or model == "on-start":
            self._apply_to_every_job(jobs, moved, restart_round)
        else:
            self._apply_moved(moved, restart_round)
        for job_id, n in counts:
            state = self._active[job_id]
            if n and not state.workers:
                self._displaced.append(state)  # asked for, not placed
                self._displaced_count += 1
        self._artifact_accounting(extra, jobs, counted, restart_round)
        if self._allocated > self.cluster.total_workers:
            raise SimulationError(
                f"t={self.engine.now}: {self.cluster.count(self._allocated)} allocated, "
                f"cluster has {self.cluster.total_workers}"
            )
        self._check_stall()
        self._schedule_wake(delta.wake_at)
        if not counted and self._active:  # after the last arrival: a round every slot
            self._request_decision(self.engine.now + self.artifact.decision_slot_s)

    def _catch_up(self) -> None:
        """Before the policy is asked: progress up to now, and the overheads the artifact
        forgives or takes at a decision."""
        self._advance_progress()
        if self.artifact.forgive_overhead:
            now = self.engine.now
            for state in self._active.values():
                if state.workers and state.resume_s > now:
                    self._sync(state)
                    state.resume_s = now
                    self._set_rate(state)
        if self._start_charge:
            self._take_start_charges()
        self._last_decision_s = self.engine.now

    def _ask_policy(self) -> Delta:
        """The policy's answer to what changed since its last call (then forgotten here)."""
        changes = Changes(
            self.engine.now,
            self._arrived,
            self._ended,
            displaced=self._displaced,
            capacity=self.cluster if not self._decisions else None,
            woke=self._woke,
            view=self._view,
        )
        self._arrived, self._ended, self._displaced, self._woke = [], [], [], False
        delta = self.policy.decide(changes)
        self._decisions += 1
        return delta

    def _count_round(self) -> tuple[bool, bool]:
        """Whether this decision counts toward the artifact's restart rounds, and whether it is
        one. ``decide_at`` "arrivals": a round with no arrival left to come is free and
        uncounted."""
        counted = self.artifact.decide_at == "events" or self._next_arrival < len(self._arrivals)
        restart_round = counted and self._rounds > 0 and self._rounds % ARTIFACT_RESTART_EVERY == 0
        self._rounds += counted
        return counted, restart_round

    def _apply_moved(self, moved: Mapping[str, Placement], restart_round: bool) -> None:
        """The jobs whose placement changes take their new one, in admission order."""
        active, seq = self._active, self._admit_seq
        for job_id in sorted(moved, key=seq.__getitem__) if len(moved) > 1 else moved:
            self._apply(active[job_id], moved[job_id], restart_round)

    def _apply_to_every_job(
        self, jobs: Sequence[JobState], moved: Mapping[str, Placement], restart_round: bool
    ) -> None:
        """With noise or the "on-start" restart model every running job is looked at, in
        admission order: a new draw of the noise, a restart round's charge."""
        on_start = self.artifact.restart_model == "on-start"
        for state in jobs:
            ran = state.workers > 0
            new = moved.get(state.job_id)
            if new is not None:
                self._apply(state, new, restart_round)
            elif self.config.noise and state.workers:
                self._set_rate(state)  # same workers, a new draw of the noise
            if restart_round and ran and state.workers and on_start:
                # The artifact's Tiresias charges every running job a full restart on these
                # rounds, not only those it starts.
                self._pause(
                    state,
                    artifact_overhead_s(
                        state.workers, self.cluster.total_workers, restart=True, cached=False
                    ),
                )

    def _artifact_accounting(
        self,
        extra: ArtifactDecision,
        jobs: Sequence[JobState],
        counted: bool,
        restart_round: bool,
    ) -> None:
        """What the artifact's accountings credit and charge after a decision (nothing for a
        decision that carries no artifact fields under the default config)."""
        for state, seconds in self._seconds_by_job(extra.credit_s, "credit"):
            self._credit(state, seconds)
        for state, seconds in self._seconds_by_job(extra.charge_s, "charge"):
            self._pause(state, seconds)
        if self.artifact.restart_model == "every-decision":
            if counted:
                self._charge_every_decision(jobs, restart_round)
            if self.artifact.decide_at == "arrivals":
                self._owe_overhead(jobs, counted, restart_round, extra.overhead_not_carried)

    def _schedule_wake(self, wake_at: float | None) -> None:
        """The wake-up the answer asked for replaces the last one."""
        if self._wake_event is not None:
            self.engine.cancel(self._wake_event)
            self._wake_event = None
        if wake_at is not None:
            self._wake_event = self.engine.schedule(
                self._on_wake,
                at=self._next_decision_s(wake_at),
                priority=_EVENT_PRIORITY,
                label="wake",
            )

    def _seconds_by_job(
        self, seconds_by_job: Mapping[str, float], what: str
    ) -> list[tuple[JobState, float]]:
        """A decision's credits or charges, checked: each for an admitted unfinished job, finite
        and >= 0; those of jobs holding no workers, and zeros, left out."""
        checked = []
        for job_id, seconds in seconds_by_job.items():
            state = self._active.get(job_id)
            if state is None:
                raise SimulationError(f"t={self.engine.now}: {what} for unknown job {job_id!r}")
            if not math.isfinite(seconds) or seconds < 0:
                raise SimulationError(
                    f"t={self.engine.now}: {what} for job {job_id} must be >= 0, got {seconds}"
                )
            if state.workers and seconds:
                checked.append((state, seconds))
        return checked

    def _credit(self, state: JobState, seconds: float) -> None:
        """Count ``seconds`` of work on the job's allocation as done, from now, and as run (the
        mirror of `_take_start_charges`)."""
        self._sync(state)
        state.active_s += seconds
        state.iterations_done = min(
            float(state.spec.iterations), state.iterations_done + self.true_rate(state) * seconds
        )
        self._set_rate(state)

    def _check_stall(self) -> None:
        """SimulationError once the policy has left every job waiting on an idle cluster, with
        no arrival to come and every deadline passed, for ``STALL_DECISIONS`` decisions in a
        row: it is not going to start one, and the simulation would otherwise never end.

        Before the last deadline an idle wait can be the policy's plan (the artifact's Chronus
        keeps a guaranteed job waiting for its leases just before its deadline, however far)."""
        if (
            self._allocated
            or not self._active
            or self._next_arrival < len(self._arrivals)
            or any(
                s.spec.deadline_s is not None and s.spec.deadline_s > self.engine.now
                for s in self._active.values()
            )
        ):
            self._idle_decisions = 0
            return
        self._idle_decisions += 1
        if self._idle_decisions >= STALL_DECISIONS:
            raise SimulationError(
                f"t={self.engine.now}: policy {self.policy.name!r} has left "
                f"{len(self._active)} job(s) waiting on an idle cluster for {STALL_DECISIONS:,} "
                "decisions in a row with no arrival to come; it would never finish them"
            )

    def _take_start_charges(self) -> None:
        """Under "on-start", the start overhead of the jobs started at the last decision.

        The artifact's Tiresias plans a job it starts to end when its time left runs out, with
        no overhead; only at its next decision does it count the time since less the overhead
        as run. A job that ends before then never pays it.
        """
        for job_id, overhead in self._start_charge.items():
            state = self._active.get(job_id)
            if state is not None and state.workers:
                self._sync(state)
                state.active_s = max(0.0, state.active_s - overhead)
                state.iterations_done = max(0.0, state.iterations_done - state.rate * overhead)
                self._set_rate(state)
        self._start_charge.clear()

    def _charge_every_decision(self, jobs: Sequence[JobState], restart_round: bool) -> None:
        """The artifact's ElasticFlow: every running job loses its start-up overhead now, the
        cached amount if its GPU set was seen since the cache was last cleared."""
        seen = self._seen_placements
        cached = {}
        # The artifact re-places every job at every decision, largest first (ties by deadline),
        # on consecutive GPUs, and caches the GPU sets it has seen (any job's): a job's set is
        # its first GPU and its count in that packing.
        running = [state for state in jobs if state.workers]
        if self._layout_order:  # the policy's order (a stable sort by size keeps it)
            position = {job_id: i for i, job_id in enumerate(self._layout_order)}
            running.sort(key=lambda s: (-s.workers, position.get(s.job_id, len(position))))
        else:
            running.sort(key=lambda s: (-s.workers, _deadline_or_inf(s), s.spec.submit_s))
        first = 0
        for state in running:
            key = (first, state.workers)
            first += state.workers
            cached[state.job_id] = key in seen and self.artifact.overhead_cache
            seen.add(key)
        if restart_round:
            seen.clear()  # after the overheads were looked up, as the artifact does
        for state in jobs:
            if state.workers:
                overhead = artifact_overhead_s(
                    state.workers,
                    self.cluster.total_workers,
                    restart=restart_round,
                    cached=cached[state.job_id],
                )
                self._pause(state, overhead)

    def _owe_overhead(
        self,
        jobs: Sequence[JobState],
        counted: bool,
        restart_round: bool,
        not_carried: frozenset[str],
    ) -> None:
        """``decide_at`` "arrivals": the artifact's Gandiva loop sets every started job's
        overhead at a counted round and a job pays it in the next interval it runs in. Counted
        rounds come back to back until the last arrival, so only a job that waits across the
        last of them pays it later, in the first interval it runs in after (taken here as any
        job waiting then but those the decision says do not carry it,
        ``ArtifactDecision.overhead_not_carried``)."""
        if counted:
            self._owed = {
                state.job_id: artifact_overhead_s(
                    state.spec.requested_workers,
                    self.cluster.total_workers,
                    restart=restart_round,
                    cached=False,
                )
                for state in jobs
                if not state.workers and state.job_id not in not_carried
            }
            return
        for state in jobs:
            if state.workers and state.job_id in self._owed:
                self._pause(state, self._owed.pop(state.job_id))

    def _pause(self, state: JobState, seconds: float) -> None:
        """No progress for ``seconds`` more from now (or from the end of a pause in course)."""
        self._sync(state)
        if self.artifact.slot_progress:
            self._plan_slot_end(state, seconds)
            return
        state.resume_s = max(self.engine.now, state.resume_s) + seconds
        self._set_rate(state)

    def _plan_slot_end(self, state: JobState, overhead: float) -> None:
        """``slot_progress``: the artifact loses ``overhead`` of this slot (what is left of an
        earlier one is forgiven), plans the job's end in whole seconds, and ends it at the end of
        that slot plus the overhead."""
        now, slot = self.engine.now, self.artifact.decision_slot_s
        state.resume_s = now + overhead
        self._set_rate(state)  # the speed, and a completion event replaced below
        planned_by_policy = self._policy_planned_end.get(state.job_id)
        if planned_by_policy is not None:
            planned = float(math.ceil(planned_by_policy - 1e-9))
        else:
            planned = now + math.ceil(state.remaining_iterations / state.rate - 1e-9)
        self._work_until[state.job_id] = planned
        self._planned_end[state.job_id] = planned
        end_event = now + math.ceil((planned - now) / slot - 1e-9) * slot + overhead
        if planned <= state.resume_s and planned_by_policy is None:
            # No work fits in this slot any more: keep the end event already due, else a job
            # re-planned at every slot (as the artifact would) never ends.
            due = self._end_event_at.get(state.job_id, end_event)
            if due > now:
                end_event = min(end_event, due)
        self._end_event_at[state.job_id] = end_event
        self.engine.cancel(state.completion_event)
        state.completion_event = self.engine.schedule(
            lambda: self._on_completion(state),
            at=end_event,
            priority=_EVENT_PRIORITY,
            label=f"end event {state.job_id}",
        )

    def _checked(self, delta: Delta) -> list[tuple[str, int]]:
        """The answer's counts, checked: each for an admitted unfinished job, >= 0 and with a
        measured speed, and the cluster's workers not exceeded once they are applied."""
        now, name, unit = self.engine.now, self.policy.name, self.cluster.unit_plural
        counts: list[tuple[str, int]] = []
        total = self._allocated
        active = self._active
        # NOTE: `SpeedCurve.available` inlined (the same test): this runs over every job a
        # decision names, at every decision.
        for job_id, workers in delta.workers.items():
            state = active.get(job_id)
            if state is None:
                raise SimulationError(
                    f"t={now}: policy {name!r} allocated {unit} to {job_id!r}, "
                    "which is not an admitted unfinished job"
                )
            total -= state.workers
            counts.append((job_id, workers))
            if not workers:
                continue
            if workers < 0:
                raise SimulationError(
                    f"t={now}: policy {name!r} gave job {job_id} {workers} {unit}"
                )
            speeds = state.curve.speeds
            if not (workers < len(speeds) and speeds[workers] > 0.0):
                raise SimulationError(
                    f"t={now}: policy {name!r} gave job {job_id} {workers} {unit}, "
                    f"a count with no measured speed for {state.spec.model}"
                )
            total += workers
        if total > self.cluster.total_workers:
            raise SimulationError(
                f"t={now}: policy {name!r} allocated {total} {unit}, cluster "
                f"has {self.cluster.total_workers}"
            )
        if delta.wake_at is not None and not delta.wake_at > now:
            raise SimulationError(
                f"t={now}: policy {name!r} asked to wake at "
                f"{delta.wake_at}, which is not in the future"
            )
        return counts

    def _placed(self, counts: list[tuple[str, int]], delta: Delta) -> dict[str, Placement]:
        """The jobs whose placement changes, each with its new one (() for none): the changed
        counts alone placed where that splits none of them, else every job through `place`,
        which may re-pack (the same placements either way)."""
        placements = self._placements
        largest_first = self.policy.largest_first
        changed = placements.changed(counts, largest_first=largest_first)
        if changed is not None:
            return {
                job_id: new
                for job_id, new in changed.items()
                if new != placements.of.get(job_id, ())
            }
        wanted = [(job_id, n) for job_id, n in self.policy.allocations() if n]
        full = place(
            wanted,
            placements.of,
            self.cluster,
            largest_first=largest_first,
            pinned=delta.pinned,
            spans_of=placements.spans_of,
        )
        moved = {job_id: () for job_id in placements.of if job_id not in full}
        moved.update(
            (job_id, new) for job_id, new in full.items() if new != placements.of.get(job_id, ())
        )
        return moved

    def _apply(
        self, state: JobState, placement: tuple[tuple[int, int], ...], restart_round: bool = False
    ) -> None:
        self._sync(state)
        now = self.engine.now
        workers = sum(n for _, n in placement)
        waited = state.workers == 0
        self._placements.set(state.job_id, placement)
        if state.completion_event is not None:
            self.engine.cancel(state.completion_event)
            state.completion_event = None
        if state.has_started:
            state.reallocations += 1
        self._set_allocation_total(self._allocated - state.workers + workers)
        state.workers, state.placement = workers, placement
        if not workers:
            state.phase, state.rate = Phase.PENDING, 0.0
            self._running.pop(state.job_id, None)
            return
        if state.job_id not in self._running:
            # Nothing of it changed while it waited: its clock starts here.
            self._running[state.job_id] = state
            state.last_update_s = now
        model = self.artifact.restart_model
        if model == "pause" and state.has_started:
            state.resume_s = now + self.config.restart_pause_s
        elif model == "on-start" and waited:
            overhead = artifact_overhead_s(
                workers, self.cluster.total_workers, restart=restart_round, cached=False
            )
            if restart_round:
                state.resume_s = now + overhead
            else:
                self._start_charge[state.job_id] = overhead
        if not state.has_started:
            state.started_s = now
        if self._typed is not None:
            self._typed.ran_on(state.job_id, placement)
        state.phase = Phase.RUNNING
        self._set_rate(state)

    def true_rate(self, state: JobState) -> float:
        """The job's real speed on its placement, before per-decision noise."""
        speed_factor, scaling = self._truth[state.job_id]
        curve = state.curve
        if self._typed is not None and state.placement:
            curve = self._typed.curve_on(state.job_id, state.placement)
        rate = curve.rate(state.workers) * speed_factor * state.workers**scaling
        if is_split(state.placement, self.cluster.workers_per_node):
            rate *= self.config.cross_node_factor
        return rate

    def _set_rate(self, state: JobState) -> None:
        """Set the running job's speed and (re)schedule its completion."""
        self._sync(state)
        now = self.engine.now
        rate = self.true_rate(state)
        if self.config.noise:
            rate *= max(0.05, 1.0 + float(self._rng.normal(0.0, self.config.noise)))
        state.rate = rate
        if state.completion_event is not None:
            self.engine.cancel(state.completion_event)
        left_s = state.remaining_iterations / state.rate
        ends_on, duration = self.artifact.ends_on, state.spec.duration_s
        if ends_on != "iterations" and duration is not None:
            time_left_s = max(0.0, duration - state.active_s)
            left_s = time_left_s if ends_on == "duration" else min(left_s, time_left_s)
        finish = max(now, state.resume_s) + left_s
        state.completion_event = event = self.engine.schedule(
            lambda: self._on_completion(state),
            at=finish,
            priority=_EVENT_PRIORITY,
            label=f"completion {state.job_id}",
        )
        if self._lazy:  # when what is left is within `_DONE_TOLERANCE` of its iterations
            self._done_seq += 1
            done_by = finish - _DONE_TOLERANCE * state.spec.iterations / rate
            heapq.heappush(self._done_by, (done_by, self._done_seq, event, state))

    def _set_allocation_total(self, total: int) -> None:
        self._allocated = total
        now = self.engine.now
        if self._timeline and self._timeline[-1][0] == now:
            self._timeline[-1] = (now, total)
        else:
            self._timeline.append((now, total))

    def _outcome(self, state: JobState) -> JobOutcome:
        spec = state.spec
        return JobOutcome(
            job_id=spec.job_id,
            model=spec.model,
            submit_s=spec.submit_s,
            deadline_s=spec.deadline_s,
            requested_workers=spec.requested_workers,
            declined=state.phase is Phase.DECLINED,
            start_s=state.started_s,
            finish_s=state.finished_s,
            worker_seconds=state.attained_worker_s,
            reallocations=state.reallocations,
            judged_s=self._planned_end.get(spec.job_id) if self.artifact.slot_progress else None,
            gpu_types=() if self._typed is None else self._typed.types_run_on(spec.job_id),
        )


class _TypedSpeeds:
    """A mixed cluster's speeds: each job's curve per GPU type group, the curve its policy plans
    on (the slowest group's, at counts one group's nodes hold), and where its gang may go."""

    def __init__(
        self, cluster: ClusterSpec, throughputs: ThroughputModel, speeds: TypeSpeeds | None
    ) -> None:
        if speeds is None:
            if throughputs.device_type not in GPU_TYPES:
                raise InputError(
                    "a cluster of several GPU types scales speeds from tables of a known GPU "
                    f"type (--throughputs A100 or T4); {throughputs.source or 'these tables'} "
                    "name none"
                )
            speeds = TypeSpeeds(throughputs, throughputs.device_type)
        self.speeds = speeds
        self.types = tuple(name for name, _ in cluster.groups)
        self.spans = tuple(nodes for _, nodes in cluster.groups)
        self.group_of_node = [g for g, nodes in enumerate(self.spans) for _ in nodes]
        # Counts above what one group holds are no gang's; with one group the curves stay
        # whole, as on an unnamed cluster (a predictor fits the counts above the cluster too).
        largest = max(len(nodes) for nodes in self.spans) * cluster.workers_per_node
        self.most = largest if len(self.spans) > 1 else None
        self.curves: dict[str, tuple[SpeedCurve, ...]] = {}
        self.order: dict[tuple[str, int], tuple[range, ...]] = {}
        self.used: dict[str, list[str]] = {}

    def add(self, job: JobSpec) -> SpeedCurve:
        """Remember the job's curves per group; the curve its policy plans on."""
        curves = tuple(self.speeds.curve(t, job.model, job.batch_size) for t in self.types)
        self.curves[job.job_id] = curves
        return slowest(curves, self.most)

    def spans_of(self, job_id: str, workers: int) -> tuple[range, ...]:
        """The groups' nodes, fastest for the job at ``workers`` first (ties in spec order)."""
        key = (job_id, workers)
        order = self.order.get(key)
        if order is None:
            curves = self.curves[job_id]
            ranked = sorted(range(len(curves)), key=lambda g: -curves[g].rate(workers))
            order = tuple(self.spans[g] for g in ranked if curves[g].rate(workers) > 0.0)
            self.order[key] = order
        return order

    def curve_on(self, job_id: str, placement: Placement) -> SpeedCurve:
        return self.curves[job_id][self.group_of_node[placement[0][0]]]

    def ran_on(self, job_id: str, placement: Placement) -> None:
        name = self.types[self.group_of_node[placement[0][0]]]
        used = self.used.setdefault(job_id, [])
        if name not in used:
            used.append(name)

    def types_run_on(self, job_id: str) -> tuple[str, ...]:
        return tuple(self.used.get(job_id, ()))


def _deadline_or_inf(state: JobState) -> float:
    return math.inf if state.spec.deadline_s is None else state.spec.deadline_s


def simulate(
    cluster: ClusterSpec,
    throughputs: ThroughputModel,
    policy: Policy,
    trace: Trace | Sequence[JobSpec],
    config: SimConfig | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    type_speeds: TypeSpeeds | None = None,
) -> SimResult:
    return ClusterSimulator(
        cluster, throughputs, policy, trace, config, on_progress, type_speeds
    ).run()
