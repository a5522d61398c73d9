"""The ElasticFlow artifact's behaviour behind ``--fidelity artifact``: its restart-cost models and
decision slot in the simulator (hand-computed runs), the peer options that reproduce its policies,
and the switch that sets them all."""

from __future__ import annotations

import json
import math

import pytest
from cluster_helpers import job

from qosched.cli.main import main
from qosched.cluster.artifact import ArtifactConfig, artifact_overhead_s
from qosched.cluster.fidelity import ARTIFACT_PEERS, configure
from qosched.cluster.policies import create_policy
from qosched.cluster.policies.events import FullView
from qosched.cluster.simulator import SimConfig, simulate
from qosched.cluster.spec import ClusterSpec
from qosched.cluster.state import ClusterView, JobState
from qosched.cluster.throughput import ThroughputModel
from qosched.core.errors import InputError

# Model m runs g iterations/s on g GPUs.
TABLES = ThroughputModel({"m": {64: {1: 1.0, 2: 2.0, 4: 4.0, 8: 8.0}}})
ONE_NODE = ClusterSpec.from_flags(1, 4)


def finishes(jobs, config: SimConfig, policy: str = "fifo") -> dict[str, float]:
    result = simulate(ONE_NODE, TABLES, create_policy(policy), jobs, config)
    return {o.job_id: o.finish_s for o in result.outcomes}


# --- the overhead formula (scheduler/utils.py estimate_overhead) --------------------------------

# (id, workers, cluster GPUs, restart round, cached, seconds)
OVERHEADS = [
    ("cached-small-cluster", 8, 64, False, True, 2.0),
    ("cached-beats-restart", 8, 64, True, True, 2.0),
    ("one-gpu", 1, 64, False, False, 4.0),
    ("eight-gpus", 8, 64, False, False, 10.0),
    ("restart-round", 8, 64, True, False, 37.0),
    ("large-cluster-cached", 8, 256, False, True, 7.0),
    ("large-cluster-restart", 4, 256, True, False, 60.0),
]


@pytest.mark.parametrize(
    ("workers", "cluster", "restart", "cached", "seconds"),
    [case[1:] for case in OVERHEADS],
    ids=[case[0] for case in OVERHEADS],
)
def test_artifact_overhead(workers, cluster, restart, cached, seconds):
    assert artifact_overhead_s(workers, cluster, restart=restart, cached=cached) == seconds


# --- restart models in the simulator -----------------------------------------------------------

# A: 1 GPU, 100 iterations from t=0; B arrives at t=50 (a second decision). fifo never moves A.
TWO_JOBS = [job("a", 0.0, 100), job("b", 50.0, 100)]
# (id, restart model, A's finish): "every-decision" charges A 4 s at t=0 (new placement) and 2 s
# at t=50 (placement seen); "on-start" charges 4 s when A starts; "pause" and "none" nothing
# (A never changes workers).
RESTART_MODELS = [
    ("pause", "pause", 100.0),
    ("none", "none", 100.0),
    ("on-start", "on-start", 104.0),
    ("every-decision", "every-decision", 106.0),
]


@pytest.mark.parametrize(
    ("model", "finish"), [c[1:] for c in RESTART_MODELS], ids=[c[0] for c in RESTART_MODELS]
)
def test_restart_model_charges_as_the_artifact_does(model, finish):
    done = finishes(
        TWO_JOBS, SimConfig(cross_node_factor=1.0, artifact=ArtifactConfig(restart_model=model))
    )
    assert done["a"] == pytest.approx(finish)


def test_every_decision_charges_a_full_restart_every_60th_decision():
    """61 arrivals one second apart, each a decision: A (running from t=0) pays 4 s at the first
    decision, 2 s (cached) at the next 59, and at the 61st (decisions[60], a restart round) 2 s
    again, since its placement was cached before the cache was cleared; at a 62nd it would pay
    4 s, not cached any more."""
    arrivals = [job(f"x{i}", float(i), 1, workers=1) for i in range(1, 61)]
    jobs = [job("a", 0.0, 1000, workers=4), *arrivals]  # a holds the node: x's wait for it
    done = finishes(
        jobs,
        SimConfig(cross_node_factor=1.0, artifact=ArtifactConfig(restart_model="every-decision")),
    )
    # a's first decision 2 + 2*(2 + 1) = 8 s, then 60 cached ones at 2 s.
    assert done["a"] == pytest.approx(1000 / 4 + 8 + 60 * 2)


def test_decision_slot_holds_an_arrival_until_the_slot_ends():
    jobs = [job("a", 0.0, 10), job("b", 10.0, 10)]
    done = finishes(jobs, SimConfig(artifact=ArtifactConfig(decision_slot_s=60.0)))
    assert done["a"] == pytest.approx(10.0)
    assert done["b"] == pytest.approx(70.0)  # arrives at 10, decided on at 60


SLOT_PROGRESS = SimConfig(
    cross_node_factor=1.0,
    artifact=ArtifactConfig(
        restart_model="every-decision", decision_slot_s=60.0, slot_progress=True
    ),
)


def judged(jobs, config: SimConfig) -> dict[str, tuple[float, bool]]:
    result = simulate(ONE_NODE, TABLES, create_policy("fifo"), jobs, config)
    return {o.job_id: (o.finish_s, o.met_deadline) for o in result.outcomes}


def test_slot_progress_ends_a_job_at_its_end_event_and_judges_the_planned_end():
    """A: 1 GPU (1 iteration/s), 100 iterations, deadline 100, alone. At t=0 it pays 4 s and is
    planned to end at 0 + ceil(100 / 1) = 100; its end event is the end of that slot, 120, plus
    the 4 s: 124. It does only 96 iterations (none past 100), ends at 124 anyway, and meets its
    deadline, judged on 100. Finishing its work instead, it would end at 104, late."""
    late = [job("a", 0.0, 100, deadline=100.0)]
    assert judged(late, SLOT_PROGRESS)["a"] == (pytest.approx(124.0), True)
    plain = SimConfig(
        cross_node_factor=1.0,
        artifact=ArtifactConfig(restart_model="every-decision", decision_slot_s=60.0),
    )
    assert judged(late, plain)["a"] == (pytest.approx(104.0), False)


def test_slot_progress_a_decision_before_its_end_event_plans_a_job_again():
    """A as above with deadline 200; B (1 GPU, 10 iterations, deadline 150) arrives at 90, a
    decision. The overhead cache packs B (earlier deadline) on GPU 0, seen before: 2 s; A on
    GPU 1: 4 s. A has done 86 (from 4 to 90), is planned to end at 90 + 14 = 104 (end event
    90 + 60 + 4 = 154); B at 100 (end event 152). B's end at 152 is a decision before A's:
    A has done 10 more (94 to 104, none past its planned end), pays 2 s on GPU 0, is planned
    again to end at 152 + 4 = 156 and ends at 152 + 60 + 2 = 214, met (156 <= 200)."""
    jobs = [job("a", 0.0, 100, deadline=200.0), job("b", 90.0, 10, deadline=150.0)]
    out = judged(jobs, SLOT_PROGRESS)
    assert out["b"] == (pytest.approx(152.0), True)
    assert out["a"] == (pytest.approx(214.0), True)


def test_slot_progress_needs_the_artifact_overheads_and_a_slot():
    with pytest.raises(InputError, match="slot_progress"):
        SimConfig(artifact=ArtifactConfig(slot_progress=True, decision_slot_s=60.0))
    with pytest.raises(InputError, match="slot_progress"):
        SimConfig(artifact=ArtifactConfig(slot_progress=True, restart_model="every-decision"))


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"restart_model": "sometimes"}, "restart_model"),
        ({"decision_slot_s": -1.0}, "decision_slot_s"),
        ({"decision_slot_s": math.inf}, "decision_slot_s"),
    ],
    ids=["unknown-model", "negative-slot", "infinite-slot"],
)
def test_bad_fidelity_options_are_refused(options, field):
    with pytest.raises(InputError, match=field):
        ArtifactConfig(**options)


# --- peer options ------------------------------------------------------------------------------


def test_artifact_edf_ignores_the_request_and_takes_its_quota():
    """Batch 64 and measured up to 8 GPUs: quota 8, or the largest measured count that fits."""
    cluster = ClusterSpec.from_flags(1, 12)
    early = JobState(job("early", 0.0, 100, workers=1, deadline=50.0), TABLES.curve("m", 64))
    late = JobState(job("late", 0.0, 100, workers=1, deadline=90.0), TABLES.curve("m", 64))
    decision = create_policy("edf", sizing="artifact").allocate(
        ClusterView(0.0, cluster, (late, early))
    )
    assert decision.workers == {"early": 8, "late": 4}


def test_artifact_elasticflow_turns_arrivals_away_while_an_admitted_job_fails():
    """An admitted job that can no longer make its deadline: the sound admission still takes a
    newcomer that harms no one, the artifact's turns it away."""
    cluster = ClusterSpec.from_flags(1, 8)
    late = JobState(job("late", 0.0, 10_000, deadline=100.0), TABLES.curve("m", 64))
    newcomer = JobState(job("new", 0.0, 10, deadline=1000.0), TABLES.curve("m", 64))
    view = ClusterView(0.0, cluster, (late,))
    assert create_policy("elasticflow").admit(newcomer, view)
    assert not create_policy("elasticflow", admission="artifact").admit(newcomer, view)


def test_artifact_spare_order_serves_a_waiting_job_first():
    cluster = ClusterSpec.from_flags(1, 8)
    running = JobState(job("running", 0.0, 10_000, deadline=100_000.0), TABLES.curve("m", 64))
    running.workers, running.started_s = 1, 0.0
    waiting = JobState(job("waiting", 0.0, 10, deadline=100_000.0), TABLES.curve("m", 64))
    policy = create_policy("elasticflow", spare_order="artifact")
    workers = {"running": 1}
    policy._hand_out_spare_as_artifact(ClusterView(0.0, cluster, (running, waiting)), workers, 1)
    assert workers == {"running": 1, "waiting": 1}


# --- the switch --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(ARTIFACT_PEERS))
def test_artifact_fidelity_sets_the_peer_and_its_simulator(name):
    peer = ARTIFACT_PEERS[name]
    policy, config = configure(name, "artifact", SimConfig())
    assert policy.name == name
    assert (
        config.artifact.restart_model,
        config.artifact.decision_slot_s,
        config.restart_pause_s,
        config.cross_node_factor,
    ) == (peer.restart_model, 60.0, 0.0, 1.0)
    assert (
        config.artifact.slot_progress,
        config.artifact.finish_at_slot_end,
        config.artifact.ends_on,
        config.artifact.decision_grid,
    ) == (peer.slot_progress, peer.finish_at_slot_end, peer.ends_on, peer.decision_grid)
    assert (
        config.artifact.decide_at,
        config.artifact.hold_last_arrival,
        config.artifact.overhead_cache,
        config.artifact.forgive_overhead,
    ) == (peer.decide_at, peer.hold_last_arrival, peer.overhead_cache, peer.forgive_overhead)
    for option, value in peer.options.items():
        assert getattr(policy, {"thresholds_worker_s": "thresholds"}.get(option, option)) == value


def test_artifact_gandiva_runs_in_the_artifacts_gandiva_loop():
    _, config = configure("gandiva", "artifact", SimConfig())
    assert (config.artifact.decide_at, config.artifact.overhead_cache, config.artifact.ends_on) == (
        "arrivals",
        False,
        "duration",
    )


def test_sound_fidelity_changes_nothing():
    config = SimConfig(restart_pause_s=12.0)
    policy, same = configure("elasticflow", "sound", config)
    assert same is config and policy.admission == "sound"


def test_a_policy_without_an_artifact_runs_in_the_artifact_elasticflows_simulator():
    _, config = configure("qos", "artifact", SimConfig())
    assert (
        config.artifact.restart_model,
        config.artifact.decision_slot_s,
        config.restart_pause_s,
        config.cross_node_factor,
    ) == ("every-decision", 60.0, 30.0, 1.0)


def test_unknown_fidelity_is_refused():
    with pytest.raises(InputError, match="fidelity"):
        configure("edf", "faithful", SimConfig())


def test_cli_fidelity_artifact_runs_every_peer(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text(
        "job_id,submit_time,iteration,model_name,ddl,batch_size,num_gpu,duration\n"
        "a,0,2000,resnet50,3600,64,2,500\n"
        "b,30,2000,resnet50,7200,64,4,500\n"
    )
    args = ["sim", "cluster", "--trace", str(trace), "--nodes", "1", "--gpus-per-node", "8"]
    policies = "elasticflow,edf,las,qos"
    assert main([*args, "--policy", policies, "--fidelity", "artifact", "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert [run["policy"] for run in runs] == policies.split(",")
    assert all(run["deadline_satisfactory_ratio"] == 1.0 for run in runs)


# --- the core types carry none of it -----------------------------------------------------------


def test_a_decision_and_the_simulator_config_carry_only_what_every_policy_needs():
    from dataclasses import fields

    from qosched.cluster.state import Decision

    assert [f.name for f in fields(Decision)] == ["workers", "wake_at", "pinned", "reasons"]
    artifact_only = {f.name for f in fields(ArtifactConfig)}
    assert len(artifact_only) == 11
    assert not artifact_only & {f.name for f in fields(SimConfig)}


def _decision_types(name: str, fidelity: str, options=None) -> set[str]:
    """The types of the decisions the policy ``configure`` gives returns over a small trace."""
    policy, config = configure(name, fidelity, SimConfig(), options)
    seen: set[str] = set()
    allocate = policy.allocate

    def recording(view: ClusterView):
        decision = allocate(view)
        seen.add(type(decision).__name__)
        return decision

    policy.allocate = recording
    jobs = [
        job("a", 0.0, 600, workers=2, deadline=900.0),
        job("b", 30.0, 1200, workers=4, deadline=2000.0),
        job("c", 90.0, 400, workers=1, deadline=3000.0),
    ]
    # Through the adapter, so that a policy driven natively (edf) answers with allocate too.
    simulate(ClusterSpec.from_flags(1, 8), TABLES, FullView(policy), jobs, config)
    return seen


@pytest.mark.parametrize(
    ("name", "fidelity", "options", "types"),
    [
        ("elasticflow", "sound", None, {"Decision"}),
        ("elasticflow", "artifact", None, {"ArtifactDecision"}),
        ("gandiva", "sound", None, {"Decision"}),
        ("gandiva", "artifact", None, {"ArtifactDecision"}),
        ("chronus", "sound", None, {"Decision"}),
        ("chronus", "sound", {"credit_waited_lease": True}, {"ArtifactDecision"}),
        ("chronus", "artifact", None, {"ArtifactDecision"}),
        ("edf", "artifact", None, {"Decision"}),
    ],
    ids=["elasticflow-sound", "elasticflow-artifact", "gandiva-sound", "gandiva-artifact",
         "chronus-sound", "chronus-credit", "chronus-artifact", "edf-artifact"],
)  # fmt: skip
def test_only_a_policy_reproducing_its_artifact_returns_artifact_decisions(
    name, fidelity, options, types
):
    assert _decision_types(name, fidelity, options) == types
