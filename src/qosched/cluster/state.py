"""The live state of a job inside a backend, and the read-only view policies decide from."""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from qosched.cluster.job import JobSpec
from qosched.cluster.spec import ClusterSpec
from qosched.cluster.throughput import SpeedCurve

# A placement: (node index, workers on that node) pairs, sorted by node index.
Placement = tuple[tuple[int, int], ...]


class Phase(enum.Enum):
    PENDING = "pending"  # admitted, waiting for workers or preempted
    RUNNING = "running"
    FINISHED = "finished"
    DECLINED = "declined"


class JobState:
    """A job as a backend tracks it. Policies read it; only the backend writes it."""

    __slots__ = (
        "active_s",
        "attained_worker_s",
        "completion_event",
        "curve",
        "finished_s",
        "iterations_done",
        "job_id",
        "last_update_s",
        "phase",
        "placement",
        "rate",
        "reallocations",
        "resume_s",
        "spec",
        "speed_mark",
        "started_s",
        "workers",
    )

    def __init__(self, spec: JobSpec, curve: SpeedCurve) -> None:
        self.spec = spec
        # NOTE: a plain attribute, not a property of ``spec``: read ~15 times per job per decision.
        self.job_id = spec.job_id
        self.curve = curve
        self.phase = Phase.PENDING
        self.iterations_done = 0.0
        self.workers = 0
        self.placement: Placement = ()
        self.rate = 0.0  # iterations/s while not paused, placement factor included
        self.last_update_s = spec.submit_s
        self.resume_s = -math.inf  # progress is paused (checkpoint-restart) until then
        self.started_s: float | None = None
        self.finished_s: float | None = None
        self.attained_worker_s = 0.0
        self.active_s = (
            0.0  # seconds holding workers outside restart pauses: the job's compute clock
        )
        self.reallocations = 0
        self.completion_event = None
        # (active_s, iterations_done) from which the job's progress measures its speed: set by a
        # backend where a start-up ends (a command's interpreter and imports, counted as active
        # time but no measure of the speed); None where every interval does.
        self.speed_mark: tuple[float, float] | None = None

    @property
    def remaining_iterations(self) -> float:
        # NOTE: ``max(0.0, left)`` without the call (the same value, -0.0 and NaN included):
        # read millions of times per simulation.
        left = self.spec.iterations - self.iterations_done
        return left if left > 0.0 else 0.0

    @property
    def has_started(self) -> bool:
        return self.started_s is not None

    def __repr__(self) -> str:
        return (
            f"JobState({self.job_id!r}, {self.phase.value}, workers={self.workers}, "
            f"done={self.iterations_done:.1f}/{self.spec.iterations})"
        )


#: Grid points are found to within this fraction of a slot (a time a few ulps past one is on it).
_GRID_TOLERANCE = 1e-9
#: Whole numbers of seconds below this are floats, and so are their sums of two.
_EXACT_SECONDS = 2.0**52


@dataclass(frozen=True, slots=True)
class DecisionClock:
    """When a backend makes a decision asked for (a policy's wake-up, an arrival, an end).

    Not within ``slot_s`` after its last decision; with ``grid_origin_s``, only at
    ``grid_origin_s + k * slot_s``. The default decides at once.
    """

    slot_s: float = 0.0
    grid_origin_s: float | None = None
    # The backend does something of its own at every decision, even with no job running (the
    # ElasticFlow artifact's restart rounds count decisions): one decision more or fewer
    # changes its results.
    counted: bool = False
    # Some decisions are made when asked, off the slot and grid (the artifact's Gandiva and
    # Tiresias loops decide their last arrival at once).
    off_clock: bool = False

    def next_decision_s(self, at: float, last_s: float) -> float:
        """When a decision asked for at ``at`` is made, the last one having been at ``last_s``."""
        when = max(at, last_s + self.slot_s)
        if self.grid_origin_s is not None:
            slot, origin = self.slot_s, self.grid_origin_s
            when = origin + math.ceil((when - origin) / slot - _GRID_TOLERANCE) * slot
        return when

    def skips_idle(self, period_s: float, until_s: float) -> bool:
        """Whether a policy with no job running, which would ask to be woken at each multiple of
        ``period_s`` in turn, may ask for ``until_s``, a later multiple, instead and count those
        between as decided: each would be decided exactly at that multiple, and a decision that
        runs nothing changes nothing of the backend's own.

        With no slot a wake-up is decided when asked. With a grid that holds every multiple of
        the period (``slot_s`` divides the period and the origin) and every time a whole number
        of seconds below 2**52, every sum and product here is exact, and a decision on the grid
        before a multiple leaves the slot open by it. Any other slot is refused: a wake-up
        could be decided late, and fewer decisions made than multiples passed.
        """
        if self.counted:
            return False
        if not self.slot_s:
            return True
        origin = self.grid_origin_s
        if origin is None or self.off_clock:
            return False
        seconds = (period_s, until_s, self.slot_s, origin)
        return (
            all(float(v).is_integer() and abs(v) < _EXACT_SECONDS for v in seconds)
            and period_s % self.slot_s == 0
            and origin % self.slot_s == 0
        )


@dataclass(frozen=True, slots=True)
class ClusterView:
    """What a policy sees at a decision: the clock, the cluster and the admitted unfinished jobs.

    ``jobs`` are in arrival order. The objects are the backend's own; policies must not modify them.
    """

    now: float
    cluster: ClusterSpec
    jobs: Sequence[JobState]
    restart_pause_s: float = 0.0
    # Seconds of progress every running job loses at every decision, whatever it changes (the
    # ElasticFlow artifact's cost model; 0 in every real backend): deciding often is not free.
    decision_overhead_s: float = 0.0
    # When the backend decides: a policy that skips wake-ups at which nothing would change
    # checks here that skipping them changes nothing either (``DecisionClock.skips_idle``).
    clock: DecisionClock = DecisionClock()
    # How quickly a job's speed on one allocation drifts, as the predictor's shortest memory in
    # seconds of running (``OnlinePredictor``'s ``recent_s``): set by a backend whose machines
    # are shared with other work; None (the simulator) when a job's speed there is steady.
    speed_recent_s: float | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    """workers each job should hold from now on (absent = 0), plus an optional wake-up time.

    The mapping's order is the placement priority: earlier jobs are placed first.
    ``wake_at`` asks the backend to call the policy again at that time even if nothing happens.
    ``pinned`` jobs keep their placement whenever their count is unchanged.
    (A policy reproducing a published simulator hands that simulator more:
    `qosched.cluster.artifact.ArtifactDecision`.)
    """

    workers: Mapping[str, int] = field(default_factory=dict)
    wake_at: float | None = None
    # Jobs the backend must not move to re-pack others while their count is unchanged: a move
    # costs a restart pause, which a job with little slack cannot afford.
    pinned: frozenset[str] = frozenset()
    # Why a job's count changed at this decision, in words with the numbers behind them, for
    # the backends that tell people (the local service records it on the job's re-size,
    # pre-emption or start). Optional: a job without one gets a reason the backend words from
    # what changed; the simulator ignores it.
    reasons: Mapping[str, str] = field(default_factory=dict)
