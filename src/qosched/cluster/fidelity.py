"""Which behaviour a simulation has: qosched's sound one, or that of the peers' published artifacts.

``qosched sim cluster --fidelity artifact`` runs each peer policy as the ElasticFlow artifact
(``pkusys/ElasticFlow``, ``scheduler/``) runs its counterpart, in the artifact's simulator: its
restart-cost model for that policy, its 60 s decision slot, no restart pause budgeted in plans,
and the policy options that reproduce its choices. The default, ``sound``, plans an admitted job
with the pauses it will pay. docs/results/fidelity.md measures one against the other.

What the artifact behaviour adds to the core types lives in :mod:`qosched.cluster.artifact`:
the simulator's settings (``ArtifactConfig``, ``ArtifactConfig.artifact``), set here per policy, and
what the policies reproducing their artifact return (``ArtifactDecision``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from qosched.cluster.artifact import ArtifactConfig
from qosched.cluster.policies import Policy, create_policy
from qosched.cluster.simulator import SimConfig
from qosched.core.errors import InputError

FIDELITIES = ("sound", "artifact")
#: The artifact's ``--scheduling_slot`` in the runs its README gives for simulation.
ARTIFACT_SLOT_S = 60.0


@dataclass(frozen=True, slots=True)
class ArtifactPeer:
    """How the artifact runs one of qosched's peer policies."""

    scheduler: str  # the artifact's ``--schedule`` name
    options: Mapping[str, Any]  # the qosched policy's options that reproduce it
    restart_model: str  # the artifact's overhead model in that scheduler's loop
    # The artifact's job accounting (``ArtifactConfig.slot_progress``): planned ends, end events.
    slot_progress: bool = False
    # A job ends, and is judged, at the end of the slot its work runs out in.
    finish_at_slot_end: bool = False
    # What ends a job whose trace gives a duration (``ArtifactConfig.ends_on``).
    ends_on: str = "iterations"
    # Decisions on the slot grid from the first arrival (``ArtifactConfig.decision_grid``).
    decision_grid: bool = False
    # Where that grid starts (``ArtifactConfig.grid_origin_s``; None: the first arrival).
    grid_origin_s: float | None = None
    # When decisions are made (``ArtifactConfig.decide_at``).
    decide_at: str = "events"
    # Whether the trace's last arrival waits for the slot's end
    # (``ArtifactConfig.hold_last_arrival``).
    hold_last_arrival: bool = True
    # Whether a GPU set seen before costs less (``ArtifactConfig.overhead_cache``).
    overhead_cache: bool = True
    # Whether a pause in course ends at the next decision (``ArtifactConfig.forgive_overhead``).
    forgive_overhead: bool = False


ARTIFACT_PEERS: Mapping[str, ArtifactPeer] = MappingProxyType(
    {
        # ef-accessctrl: its planner step for step (``policies/elasticflow.py``,
        # ``artifact_plan.py``), its job accounting, and no decision at a plan change alone.
        "elasticflow": ArtifactPeer(
            "ef-accessctrl",
            MappingProxyType({"planner": "artifact", "slot_s": ARTIFACT_SLOT_S}),
            "every-decision",
            slot_progress=True,
        ),
        "edf": ArtifactPeer("edf", MappingProxyType({"sizing": "artifact"}), "none"),
        # dlas-gpu: three queues split at 3,250 and 7,200 GPU-seconds (``jobs.py``).
        "las": ArtifactPeer(
            "dlas-gpu",
            MappingProxyType(
                {"thresholds_worker_s": (3250.0, 7200.0), "queues": "artifact", "slot_s": 60.0}
            ),
            "on-start",
            ends_on="duration",
            hold_last_arrival=False,
            forgive_overhead=True,
        ),
        # gandiva: node-set bookkeeping, idle spare GPUs; every running job pays the full
        # overhead at every round (``estimate_overhead`` without the cache); rounds only at
        # arrivals; the past interval credited to the jobs the resized sets run; a job ends when
        # its trace duration of run time is spent (``time_slicing_execute``).
        "gandiva": ArtifactPeer(
            "gandiva",
            MappingProxyType({"node_sets": True, "work_conserving": False, "adjust_ahead": True}),
            "every-decision",
            ends_on="duration",
            decide_at="arrivals",
            hold_last_arrival=False,
            overhead_cache=False,
            forgive_overhead=True,
        ),
        # themis: ``jobs.py`` gives every job a zero overhead on creation, and the loop only
        # estimates one for a job that has none, so its jobs never pay a restart; a job whose
        # iterations run out in a slot gets the slot's end as its ``end_time``, one whose trace
        # duration runs out first (``remaining_time``) that second.
        "themis": ArtifactPeer(
            "themis",
            MappingProxyType({"ratio": "artifact", "solver": "ecos"}),
            "none",
            finish_at_slot_end=True,
            ends_on="either",
            decision_grid=True,
        ),
        # Chronus is a separate simulator in the artifact (``chronus-scheduler/``); its restart
        # cost, half a second per worker-doubling per resume, is too small to model. Its clock
        # steps 60 s from 0 (``run``), so a lease boundary is decided on time, before the
        # arrivals that follow it, which wait for the next one, even on an idle cluster.
        "chronus": ArtifactPeer(
            "time-aware-with-lease",
            MappingProxyType(
                {
                    "spare": "artifact",
                    "boundary_clock": True,
                    "credit_waited_lease": True,
                    "charge_resumes": True,
                    "whole_second_estimates": True,
                }
            ),
            "none",
            decision_grid=True,
            grid_origin_s=0.0,
        ),
    }
)
#: Policies with no artifact of their own (qos, fifo, srtf) run in the simulator of the
#: artifact's ElasticFlow, the peer they are compared with, and keep their own options.
OTHERS_RESTART_MODEL = "every-decision"


def configure(
    name: str, fidelity: str, config: SimConfig, options: Mapping[str, Any] | None = None
) -> tuple[Policy, SimConfig]:
    """The policy called ``name`` and the simulator configuration to run it with; ``options``
    are the policy's own (``chronus``'s ``selection``), over those the fidelity sets."""
    options = options or {}
    if fidelity not in FIDELITIES:
        raise InputError(
            f"unknown fidelity {fidelity!r}; use {' or '.join(FIDELITIES)}", field="--fidelity"
        )
    if fidelity == "sound":
        return create_policy(name, **options), config
    # The artifact's simulation speeds come from the tables alone: a split job is not slowed.
    peer = ARTIFACT_PEERS.get(name)
    if peer is None:
        return create_policy(name, **options), replace(
            config,
            cross_node_factor=1.0,
            artifact=replace(
                config.artifact,
                restart_model=OTHERS_RESTART_MODEL,
                decision_slot_s=ARTIFACT_SLOT_S,
            ),
        )
    artifact_config = replace(
        config,
        restart_pause_s=0.0,  # the artifact's planners budget no overhead
        cross_node_factor=1.0,
        artifact=ArtifactConfig(
            restart_model=peer.restart_model,
            decision_slot_s=ARTIFACT_SLOT_S,
            slot_progress=peer.slot_progress,
            finish_at_slot_end=peer.finish_at_slot_end,
            ends_on=peer.ends_on,
            decision_grid=peer.decision_grid,
            grid_origin_s=peer.grid_origin_s,
            decide_at=peer.decide_at,
            hold_last_arrival=peer.hold_last_arrival,
            overhead_cache=peer.overhead_cache,
            forgive_overhead=peer.forgive_overhead,
        ),
    )
    return create_policy(name, **{**peer.options, **options}), artifact_config
