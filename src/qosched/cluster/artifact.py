"""What reproducing the peers' published artifacts adds to the core types (``--fidelity artifact``).

The ElasticFlow artifact's simulator (``pkusys/ElasticFlow``, ``scheduler/``) advances, charges
and ends jobs in ways of its own, and some of its policies hand it more than a count per job. The
settings of that simulator (`ArtifactConfig`, nested in ``SimConfig.artifact``) and what its
policies hand it (`ArtifactDecision`, a `Decision` with more fields) live here, beside
:mod:`qosched.cluster.fidelity`, which sets them per policy; a policy written for qosched's own
behaviour sees neither. Both modules are kept apart because the policies that return an
`ArtifactDecision` are what ``fidelity.configure`` constructs: this one imports no policy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from qosched.cluster.state import Decision
from qosched.core.errors import InputError

#: How restarts cost progress. "pause": ``SimConfig.restart_pause_s`` whenever a started job's
#: workers change (qosched's own model). The ElasticFlow artifact's models: "every-decision" (its
#: ElasticFlow: every running job loses a start-up overhead at every decision, less when its GPU
#: set was seen before), "on-start" (its Tiresias: a job loses the overhead when it starts or
#: resumes, counted at the next decision, and every running job a full restart's on every
#: ``ARTIFACT_RESTART_EVERY``-th decision), "none" (its EDF).
RESTART_MODELS = ("pause", "every-decision", "on-start", "none")
#: What ends a job whose trace gives a duration (``JobSpec.duration_s``): "iterations", its
#: work; "duration", having run that many seconds outside restart pauses, whatever its iterations
#: say (the ElasticFlow artifact's Tiresias loop, ``dlas_sim_jobs``, counts time, not
#: iterations); "either", whichever runs out first (its Themis loop, ``themis_sim_jobs``).
ENDS_ON = ("iterations", "duration", "either")
#: The artifact clears its cache of seen GPU sets, and charges a full restart, every this many
#: decisions (``schedule_count % scheduling_slot`` with its 60 s slot).
ARTIFACT_RESTART_EVERY = 60
#: When decisions are made. "events": at every arrival, end and wake-up (within a decision slot:
#: at its end). "arrivals": the ElasticFlow artifact's Gandiva loop (``gandiva_sim_jobs``), whose
#: rounds come only at arrivals (within a slot of the last round: at the slot's end); a job's
#: end frees its workers but makes no round. Once the last arrival is handled it
#: steps a slot at a time until every job is done, charging no overhead on those rounds (nor on
#: the last arrival's) and not counting them toward the restart rounds. Needs a decision slot.
DECIDE_AT = ("events", "arrivals")


def artifact_overhead_s(
    workers: int, cluster_workers: int, *, restart: bool, cached: bool
) -> float:
    """The ElasticFlow artifact's start-up overhead of a job on ``workers`` GPUs (seconds).

    2 s (7 s on a cluster of 256 GPUs or more) when its GPU set is cached; otherwise plus 27 s
    (47 s on 256+) on a restart round, plus 2 (log2 workers + 1) s.
    """
    large = cluster_workers >= 256
    overhead = 7.0 if large else 2.0
    if cached:
        return overhead
    if restart:
        overhead += 47.0 if large else 27.0
    return overhead + 2.0 * (math.log2(workers) + 1.0)


@dataclass(frozen=True, slots=True)
class ArtifactConfig:
    """How the simulator departs from its own behaviour to run as the ElasticFlow artifact's.

    The defaults are qosched's own behaviour: each setting is one departure, documented with the
    artifact's code it follows (docs/results/fidelity.md lists them all).
    """

    # See RESTART_MODELS. Under a model other than "pause", ``SimConfig.restart_pause_s`` is only
    # what policies are told to budget per change (``ClusterView.restart_pause_s``), not charged.
    restart_model: str = "pause"
    # 0: a decision at every event. Otherwise no decision (and no arrival) within this many
    # seconds after the last decision: events in between wait for it, as in the ElasticFlow
    # artifact's event loop, which moves events within one slot of the last to its end.
    decision_slot_s: float = 0.0
    # The ElasticFlow artifact's job accounting (``jobs.py`` ``run_all_jobs``, the end events of
    # ``scheduler.py``), with the "every-decision" model and a decision slot: at each decision a
    # running job is planned to end when the policy's plan has it end
    # (``ArtifactDecision.planned_end``, rounded up to a second), else at ``now + ceil(left /
    # speed)``; it does no work past that planned end (so the overhead charged now is never made
    # up), and ends at its end event, the end of the slot it is planned to end in plus that
    # overhead, unless a decision comes first and plans it again (moving its end event); its
    # deadline is judged on the end planned at its last decision.
    slot_progress: bool = False
    # The ElasticFlow artifact's Themis loop (``scheduler.py`` ``themis_sim_jobs``), with a
    # decision slot: a job whose work runs out within a slot ends at the slot's end, the next
    # decision, and its deadline is judged there.
    finish_at_slot_end: bool = False
    # With a decision slot: decisions (and arrivals) only on the slot's grid from the first
    # arrival, as in the artifact's Themis loop, whose clock steps a slot at a time, idle or not.
    decision_grid: bool = False
    # Where that grid starts: None, the first arrival (its Themis loop); a time, there (its
    # Chronus loop's clock starts at 0).
    grid_origin_s: float | None = None
    # See ENDS_ON: what running out ends a job whose trace gives a duration.
    ends_on: str = "iterations"
    # See DECIDE_AT.
    decide_at: str = "events"
    # With a decision slot: False, the trace's last arrival (with those of its instant) is
    # decided when it comes even within the slot of the last decision, as the artifact's
    # Gandiva and Tiresias loops do: they move an arrival to the slot's end only while another
    # arrival is queued behind it (``while ... len(JOBS.job_events) > 1``).
    hold_last_arrival: bool = True
    # True: a restart pause still in course at a decision ends there. The artifact's Gandiva and
    # Tiresias loops count a job's progress since the last decision as ``max(elapsed -
    # overhead, 0)`` and then reset its overhead, so what the time to the next decision does
    # not cover (a 62 s restart round of an 8-GPU job on 256 GPUs, 60 s apart) is forgiven.
    forgive_overhead: bool = False
    # "every-decision": a job whose GPU set was seen before pays the cached overhead (the
    # artifact's ElasticFlow); False: the full one at every decision (its Gandiva loop calls
    # ``estimate_overhead`` without the cache).
    overhead_cache: bool = True

    def __post_init__(self) -> None:
        if self.restart_model not in RESTART_MODELS:
            raise InputError(
                f"unknown restart model {self.restart_model!r}; use {', '.join(RESTART_MODELS)}",
                field="restart_model",
            )
        if not (math.isfinite(self.decision_slot_s) and 0 <= self.decision_slot_s <= 86400):
            raise InputError(
                f"must be in [0, 86400] seconds, got {self.decision_slot_s}",
                field="decision_slot_s",
            )
        if self.slot_progress and (
            self.restart_model != "every-decision" or not self.decision_slot_s
        ):
            raise InputError(
                "slot_progress needs restart_model every-decision and a decision slot",
                field="slot_progress",
            )
        if self.ends_on not in ENDS_ON:
            raise InputError(
                f"unknown end rule {self.ends_on!r}; use {', '.join(ENDS_ON)}", field="ends_on"
            )
        if self.decide_at not in DECIDE_AT:
            raise InputError(
                f"unknown decision rule {self.decide_at!r}; use {', '.join(DECIDE_AT)}",
                field="decide_at",
            )
        if self.grid_origin_s is not None and not math.isfinite(self.grid_origin_s):
            raise InputError(f"must be finite, got {self.grid_origin_s}", field="grid_origin_s")
        for name in ("finish_at_slot_end", "decision_grid"):
            if getattr(self, name) and not self.decision_slot_s:
                raise InputError(f"{name} needs a decision slot", field=name)
        if self.decide_at != "events" and not self.decision_slot_s:
            raise InputError("decide_at arrivals needs a decision slot", field="decide_at")


@dataclass(frozen=True, slots=True)
class ArtifactDecision(Decision):
    """A `Decision` with what a policy reproducing its artifact hands that artifact's simulator.

    Only the simulator under the matching `ArtifactConfig` reads these fields; every other
    backend reads the `Decision` alone.
    """

    # When the policy's plan has each job finish (seconds), for the backends that account jobs
    # by their planned end (``ArtifactConfig.slot_progress``); the others ignore it.
    planned_end: Mapping[str, float] = field(default_factory=dict)
    # The order the backend lays the jobs' workers out in, for the ElasticFlow artifact's
    # GPU-set cache (``ArtifactConfig.restart_model`` "every-decision"); empty: by size, then
    # deadline.
    layout_order: tuple[str, ...] = ()
    # Seconds of work on its new allocation the simulator credits a job at this decision,
    # though it did not run them: only reproductions of an artifact whose accounting does so
    # ask for it (Chronus's lease start, ``Chronus(credit_waited_lease=True)``).
    credit_s: Mapping[str, float] = field(default_factory=dict)
    # Seconds at the start of its allocation in which the simulator has a job do no work: a
    # restart cost the policy's artifact charges in its own way (Chronus's resume cost,
    # ``Chronus(charge_resumes=True)``).
    charge_s: Mapping[str, float] = field(default_factory=dict)
    # Waiting jobs that do not carry this decision's restart overhead until they next run
    # (``ArtifactConfig.decide_at`` "arrivals"): the artifact Gandiva's jobs that are or were in
    # its waiting list, whose overhead its loop sets never or resets every round
    # (``Gandiva(node_sets=True)``).
    overhead_not_carried: frozenset[str] = frozenset()


#: What a plain `Decision` hands the artifact's simulator: nothing beyond its counts.
NO_ARTIFACT_FIELDS = ArtifactDecision()
