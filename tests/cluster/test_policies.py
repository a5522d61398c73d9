"""Tests for qosched.cluster.policies: hand-computed runs of every policy, and the registry.

Speeds are chosen so that finish times are easy on paper: model ``m`` runs ``g`` iterations/s on
``g`` GPUs, model ``s`` scales badly (1, 1.5, 2 iterations/s on 1, 2, 4 GPUs). Restart pauses are
0 unless a test is about them.
"""

from __future__ import annotations

import pytest
from cluster_helpers import job

from qosched.cluster.artifact import ArtifactConfig
from qosched.cluster.generate import GeneratorConfig, generate_trace
from qosched.cluster.job import JobSpec
from qosched.cluster.policies import Policy, create_policy, policy_names, register
from qosched.cluster.policies.elasticflow import ElasticFlow
from qosched.cluster.simulator import JobOutcome, SimConfig, simulate
from qosched.cluster.spec import ClusterSpec
from qosched.cluster.state import ClusterView, Decision, JobState
from qosched.cluster.throughput import ThroughputModel
from qosched.core.errors import InputError

TABLES = ThroughputModel(
    {
        "m": {64: {1: 1.0, 2: 2.0, 4: 4.0, 8: 8.0}},
        "s": {64: {1: 1.0, 2: 1.5, 4: 2.0}},
        # Ten times faster than "m" on one GPU, but a doubling adds only a fifth of that.
        "big": {64: {1: 10.0, 2: 12.0, 4: 14.0}},
        # More GPUs do not help at all.
        "flat": {64: {1: 1.0, 2: 1.0, 4: 1.0}},
    }
)


def run(
    policy: str | Policy,
    jobs: list[JobSpec],
    *,
    nodes: int = 1,
    workers_per_node: int = 4,
    pause: float = 0.0,
) -> dict[str, JobOutcome]:
    if isinstance(policy, str):
        policy = create_policy(policy)
    result = simulate(
        ClusterSpec.from_flags(nodes, workers_per_node),
        TABLES,
        policy,
        jobs,
        SimConfig(restart_pause_s=pause, cross_node_factor=1.0),
    )
    return {outcome.job_id: outcome for outcome in result.outcomes}


def times(outcome: JobOutcome) -> tuple[float | None, float | None]:
    return outcome.start_s, outcome.finish_s


# --- fifo ---------------------------------------------------------------------------------------


def test_fifo_backfills_a_smaller_later_job_past_one_that_does_not_fit():
    # 4 GPUs. "a" holds 3 from 0 to 10 (30 iterations at 3/s); "b" wants all 4 and must wait
    # for it; "c" needs 1 GPU, which is free, and runs 2..7 ahead of "b"; "b" runs 10..20.
    outcomes = run(
        "fifo",
        [job("a", 0, 30, workers=3), job("b", 1, 40, workers=4), job("c", 2, 5, workers=1)],
    )
    assert {k: times(o) for k, o in outcomes.items()} == {
        "a": (0.0, 10.0),
        "b": (10.0, 20.0),
        "c": (2.0, 7.0),
    }


def test_fifo_does_not_preempt_for_an_earlier_deadline():
    # "a" holds all 4 GPUs 0..10; "b" (deadline 3) waits and runs 10..12 on 1 GPU.
    outcomes = run("fifo", [job("a", 0, 40, workers=4), job("b", 1, 2, workers=1, deadline=3)])
    assert (times(outcomes["a"]), outcomes["a"].reallocations) == ((0.0, 10.0), 0)
    assert times(outcomes["b"]) == (10.0, 12.0)


# --- edf ----------------------------------------------------------------------------------------

EDF_JOBS = [
    job("a", 0, 40, workers=4, deadline=100),
    job("b", 2, 8, workers=4, deadline=10),
]


def test_edf_preempts_a_running_job_for_an_earlier_deadline():
    outcomes = run("edf", EDF_JOBS)
    # "b" takes all 4 GPUs at once: 8 iterations at 4/s.
    assert times(outcomes["b"]) == (2.0, 4.0)


@pytest.mark.parametrize(
    ("pause", "finish"),
    [(0.0, 12.0), (5.0, 17.0), (30.0, 42.0)],
    ids=["no-pause", "5s", "30s"],
)
def test_edf_preempted_job_pays_exactly_one_restart_pause_when_it_resumes(pause, finish):
    outcomes = run("edf", EDF_JOBS, pause=pause)
    # "a" does 8 iterations in 0..2, is preempted until "b" ends at 4, then waits out the pause
    # on its 4 GPUs and needs 32 / 4 = 8 s more: 4 + pause + 8.
    assert outcomes["a"].finish_s == pytest.approx(finish)


def test_edf_preempted_job_is_charged_its_workers_during_the_pause():
    outcomes = run("edf", EDF_JOBS, pause=5.0)
    # 4 GPUs for 0..2 and 4..17: 8 + 52 GPU-seconds; a preemption and a resume.
    assert (outcomes["a"].worker_seconds, outcomes["a"].reallocations) == (pytest.approx(60.0), 2)


def test_edf_runs_best_effort_jobs_after_every_deadline_job():
    outcomes = run("edf", [job("a", 0, 40, workers=4), job("b", 2, 8, workers=4, deadline=1000)])
    # However far "b"'s deadline, it preempts best-effort "a" at 2 and runs 2..4; "a" resumes
    # with 32 iterations left: 4 + 8.
    assert (times(outcomes["b"]), outcomes["a"].finish_s) == ((2.0, 4.0), 12.0)


def test_edf_does_not_preempt_for_a_later_deadline():
    outcomes = run(
        "edf", [job("a", 0, 40, workers=4, deadline=10), job("b", 2, 8, workers=4, deadline=100)]
    )
    assert (times(outcomes["a"]), times(outcomes["b"])) == ((0.0, 10.0), (10.0, 12.0))


# --- srtf ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("newcomer", "a_finish", "b_times"),
    [
        # At 5 "a" has 40 iterations left: 10 s on its 4 GPUs; "b" needs 20 / 4 = 5 s, so it
        # runs 5..10 and "a" resumes 10..20.
        (job("b", 5, 20, workers=4), 20.0, (5.0, 10.0)),
        # "b" has fewer iterations than "a" has left (30 < 40) but model "s" does 2/s on 4 GPUs:
        # 15 s, longer than "a"'s 10 s, so "a" finishes at 15 and "b" runs 15..30.
        (job("b", 5, 30, workers=4, model="s"), 15.0, (15.0, 30.0)),
    ],
    ids=["shorter-newcomer-preempts", "fewer-iterations-but-slower-waits"],
)
def test_srtf_orders_by_remaining_time_on_the_requested_workers(newcomer, a_finish, b_times):
    outcomes = run("srtf", [job("a", 0, 60, workers=4), newcomer])
    assert (outcomes["a"].finish_s, times(outcomes["b"])) == (a_finish, b_times)


# --- las ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("b_submit", "b_times"),
    [
        # At 12 "a" has 48 GPU-s, past the 40 GPU-s threshold: new "b" (queue 0) takes over.
        (12, (12.0, 17.0)),
        # At 5 both are in queue 0 and "a" came first; "a" crosses 40 GPU-s at 10 and "b" starts.
        (5, (10.0, 15.0)),
    ],
    ids=["arrives-after-the-crossing", "waits-for-the-crossing"],
)
def test_las_demotes_a_job_past_its_threshold_and_a_newcomer_preempts_it(b_submit, b_times):
    policy = create_policy("las", thresholds_worker_s=(40.0,))
    outcomes = run(policy, [job("a", 0, 80, workers=4), job("b", b_submit, 20, workers=4)])
    assert times(outcomes["b"]) == b_times


@pytest.mark.parametrize("b_submit", [12, 5], ids=["arrives-after-the-crossing", "before"])
def test_las_demoted_job_finishes_after_the_newcomer(b_submit):
    policy = create_policy("las", thresholds_worker_s=(40.0,))
    outcomes = run(policy, [job("a", 0, 80, workers=4), job("b", b_submit, 20, workers=4)])
    # Either way "a" loses 5 s to "b" (20 iterations at 4/s): 80 / 4 + 5.
    assert outcomes["a"].finish_s == 25.0


def test_las_without_a_crossing_serves_first_come_first():
    outcomes = run("las", [job("a", 0, 80, workers=4), job("b", 5, 20, workers=4)])
    # Default thresholds start at 3600 GPU-s; "a" attains only 80 s x 4 GPUs.
    assert (times(outcomes["a"]), times(outcomes["b"])) == ((0.0, 20.0), (20.0, 25.0))


@pytest.mark.parametrize(
    "thresholds", [(10.0, 5.0), (0.0,), (-1.0, 5.0)], ids=["decreasing", "zero", "negative"]
)
def test_las_rejects_thresholds_that_are_not_positive_and_increasing(thresholds):
    with pytest.raises(ValueError, match="thresholds"):
        create_policy("las", thresholds_worker_s=thresholds)


def _artifact_las_run(queues: str, jobs: list[JobSpec], thresholds: tuple[float, ...]):
    policy = create_policy("las", thresholds_worker_s=thresholds, queues=queues)
    config = SimConfig(
        cross_node_factor=1.0, artifact=ArtifactConfig(restart_model="none", decision_slot_s=60.0)
    )
    result = simulate(ClusterSpec.from_flags(1, 2), TABLES, policy, jobs, config)
    return {outcome.job_id: outcome for outcome in result.outcomes}


@pytest.mark.parametrize(
    ("queues", "b_times"),
    # "a" (2 GPUs) crosses 300 GPU-s at 150 s. Exact: woken then. The artifact's job jump at
    # the decision at 60 (c's arrival) is ceil((300 - 60 s run) / 2) + 60 = 180, and only
    # then is "a" checked (360 GPU-s) and demoted; b and c run 10 s.
    [("exact", (150.0, 160.0)), ("artifact", (180.0, 190.0))],
)
def test_las_artifact_demotes_at_its_job_jump(queues, b_times):
    jobs = [
        job("a", 0, 1000, workers=2),
        job("b", 0, 10),
        job("c", 60, 10),
    ]
    outcomes = _artifact_las_run(queues, jobs, (300.0,))
    assert times(outcomes["b"]) == b_times
    assert times(outcomes["c"]) == b_times


@pytest.mark.parametrize(
    ("queues", "x_times"),
    # p runs 0-100; x (2 GPUs) and y (1) arrive within the first slot and are seen at 60: x
    # does not fit, y does. At 120, with both GPUs free of p: exact, x came first and takes
    # both (y is preempted); the artifact moved x, left waiting, behind the running y, so y
    # keeps its GPU and x waits for y's end at 360.
    [("exact", (120.0, 170.0)), ("artifact", (360.0, 410.0))],
)
def test_las_artifact_keeps_running_jobs_ahead_of_waiting_ones(queues, x_times):
    jobs = [job("p", 0, 100), job("x", 10, 100, workers=2), job("y", 20, 300)]
    outcomes = _artifact_las_run(queues, jobs, (10000.0,))
    assert times(outcomes["x"]) == x_times


@pytest.mark.parametrize(
    ("options", "match"), [({"queues": "fifo"}, "queues"), ({"slot_s": 0.0}, "slot_s")]
)
def test_las_rejects_bad_options(options, match):
    with pytest.raises(ValueError, match=match):
        create_policy("las", **options)


# --- elasticflow: admission ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("deadline", "declined", "finish"),
    [(20, True, None), (25, False, 25.0)],
    ids=["needs-5-workers-worth", "exactly-all-4-workers"],
)
def test_elasticflow_admits_a_lone_job_only_if_every_worker_can_meet_its_deadline(
    deadline, declined, finish
):
    # 100 iterations; 4 GPUs of model "m" do 4/s: 25 s at best.
    outcomes = run("elasticflow", [job("a", 0, 100, deadline=deadline)])
    assert (outcomes["a"].declined, outcomes["a"].finish_s) == (declined, finish)


def test_elasticflow_declined_job_never_runs():
    outcome = run("elasticflow", [job("a", 0, 100, deadline=20)])["a"]
    assert (outcome.start_s, outcome.finish_s, outcome.worker_seconds) == (None, None, 0.0)


def test_elasticflow_declines_a_newcomer_that_would_break_an_admitted_deadline():
    # "a" needs all 4 GPUs for 0..10. At 1, "b" could meet its own deadline alone (4 iterations
    # by 5), but "a" would then lack GPU-seconds: 36 + 4 > 4 GPUs x 9 s.
    outcomes = run("elasticflow", [job("a", 0, 40, deadline=10), job("b", 1, 4, deadline=5)])
    assert (outcomes["b"].declined, outcomes["a"].finish_s) == (True, 10.0)


def test_elasticflow_declines_a_newcomer_when_no_schedule_meets_every_deadline():
    # "j0" (deadline 20) takes all 4 GPUs for 0..12.5, then "j1" (deadline 25) for 12.5..25.
    # At 10, "j2" asks for 60 iterations by 30; from 10 on the three need 10 + 50 + 60 = 120
    # GPU-seconds by 30 but only 4 x 20 = 80 exist, so admitting "j2" must break a deadline.
    outcomes = run(
        "elasticflow",
        [
            job("j0", 0, 50, deadline=20),
            job("j1", 0, 50, deadline=25),
            job("j2", 10, 60, deadline=30),
        ],
    )
    assert outcomes["j2"].declined


@pytest.mark.parametrize(
    "jobs",
    [
        [job("a", 0, 40, deadline=10), job("e", 0, 8, workers=4)],
        [job("e", 0, 10**6, workers=4), job("a", 0, 40, deadline=10)],
    ],
    ids=["after-a-deadline-job", "huge-before-a-deadline-job"],
)
def test_elasticflow_never_declines_a_best_effort_job(jobs):
    assert not run("elasticflow", jobs)["e"].declined


def test_elasticflow_runs_best_effort_jobs_on_workers_no_deadline_job_needs():
    # "a" needs all 4 GPUs until 10; then best-effort "e" doubles up to 4 GPUs: 8 / 4 = 2 s.
    outcomes = run("elasticflow", [job("a", 0, 40, deadline=10), job("e", 0, 8, workers=4)])
    assert (outcomes["a"].finish_s, times(outcomes["e"])) == (10.0, (10.0, 12.0))


def test_elasticflow_never_declines_best_effort_jobs_on_a_crowded_trace():
    config = GeneratorConfig(jobs=60, load=3.0, cluster_workers=8, best_effort_fraction=0.5, seed=4)
    jobs = generate_trace(config, ThroughputModel.bundled())
    result = simulate(ClusterSpec.from_flags(1, 8), ThroughputModel.bundled(), ElasticFlow(), jobs)
    best_effort = [o for o in result.outcomes if o.deadline_s is None]
    assert best_effort and not any(o.declined for o in best_effort)


# --- elasticflow: allocation --------------------------------------------------------------------


def test_elasticflow_gives_a_lone_job_every_worker_beyond_its_minimum_share():
    # One GPU alone meets the deadline (40 iterations by 40), but the 3 spare GPUs go to it too:
    # 40 / 4 = 10 s.
    outcome = run("elasticflow", [job("a", 0, 40, deadline=40)])["a"]
    assert times(outcome) == (0.0, 10.0)


def test_elasticflow_gives_spare_workers_to_the_largest_gain_per_worker_in_single_worker_units():
    cluster = ClusterSpec.from_flags(1, 4)
    specs = [
        job("x", 0, 10, deadline=1000),
        job("y", 0, 10, deadline=1000, model="big"),
        job("w", 0, 10, deadline=1000, model="flat"),
    ]
    states = [JobState(spec, TABLES.curve(spec.model, 64)) for spec in specs]
    decision = ElasticFlow().allocate(ClusterView(0.0, cluster, states))
    # Each needs one GPU; the fourth goes to "x" (gain 1 single-GPU speed per added GPU), not
    # "y" (2 more iterations/s, but 0.2 of its single-GPU speed), nor "w" (no gain).
    assert dict(decision.workers) == {"x": 2, "y": 1, "w": 1}


def test_elasticflow_uses_power_of_two_counts_only():
    # Six GPUs on one node: a lone job could use all six (interpolated 6/s), but 4 is the
    # largest power of two: 40 / 4 = 10 s, not 40 / 6.
    outcome = run("elasticflow", [job("a", 0, 40, deadline=40)], workers_per_node=6)["a"]
    assert outcome.finish_s == 10.0


class RecordingElasticFlow(ElasticFlow):
    """ElasticFlow that keeps every decision it makes (not registered)."""

    def __init__(self) -> None:
        super().__init__()
        self.decisions: list[Decision] = []

    def allocate(self, view: ClusterView) -> Decision:
        decision = super().allocate(view)
        self.decisions.append(decision)
        return decision


def test_elasticflow_decisions_on_a_generated_trace_are_powers_of_two():
    jobs = generate_trace(
        GeneratorConfig(jobs=80, load=2.0, cluster_workers=24, seed=9), ThroughputModel.bundled()
    )
    policy = RecordingElasticFlow()
    simulate(ClusterSpec.from_flags(3, 8), ThroughputModel.bundled(), policy, jobs)
    counts = {g for decision in policy.decisions for g in decision.workers.values()}
    assert counts and all(g > 0 and g & (g - 1) == 0 for g in counts), counts


def test_elasticflow_meets_every_admitted_deadline_on_a_hand_checked_run():
    # 0: "a" needs 2 GPUs (40 by 20), "b" 1 (40 by 40); the spare GPU doubles "b": both on 2.
    # 10: "a" and "b" have 20 left each. "c" (30 by 25) needs 2 GPUs through 25; "a" still
    #     needs its 2; "b" can wait (1 GPU over 20..25 and then 1 until 40 would do): it is
    #     preempted.
    # 20: "a" ends; "c" keeps 2, "b" gets the other 2 (its 1 plus the spare doubling).
    # 25: "c" ends; "b" has 20 - 2 x 5 = 10 left and gets all 4: 2.5 s.
    outcomes = run(
        "elasticflow",
        [
            job("a", 0, 40, deadline=20),
            job("b", 0, 40, deadline=40),
            job("c", 10, 30, deadline=25),
        ],
    )
    assert {k: (o.declined, o.finish_s) for k, o in outcomes.items()} == {
        "a": (False, pytest.approx(20.0)),
        "b": (False, pytest.approx(27.5)),
        "c": (False, pytest.approx(25.0)),
    }


def test_elasticflow_meets_admitted_deadlines_its_plan_meets_exactly():
    # Model "s": 1, 1.5, 2 iterations/s on 1, 2, 4 GPUs; all three arrive at 0.
    # "j0" (20 by 15) gets 2 GPUs: 20 / 1.5, ends at 13.33. "j1" (30 by 20) gets the other 2:
    # 1.5 x 20 = 30, exactly at 20. "j2" (30 by 30) waits: 2 GPUs over 13.33..20 do 10, then
    # all 4 over 20..30 do 20: exactly 30 by 30. The plan made at 0 is feasible to the end.
    outcomes = run(
        "elasticflow",
        [
            job("j0", 0, 20, deadline=15, model="s"),
            job("j1", 0, 30, deadline=20, model="s"),
            job("j2", 0, 30, deadline=30, model="s"),
        ],
    )
    assert {k: (o.declined, o.met_deadline) for k, o in outcomes.items()} == {
        "j0": (False, True),
        "j1": (False, True),
        "j2": (False, True),
    }


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("load", [1.0, 3.0], ids=["load-1", "load-3"])
def test_elasticflow_meets_every_admitted_deadline_without_restart_or_network_costs(load, seed):
    # With free restarts and no split penalty nothing but a re-plan can break an admitted plan.
    tables = ThroughputModel.bundled()
    jobs = generate_trace(
        GeneratorConfig(jobs=150, load=load, cluster_workers=32, seed=seed), tables
    )
    result = simulate(
        ClusterSpec.from_flags(4, 8),
        tables,
        ElasticFlow(),
        jobs,
        SimConfig(restart_pause_s=0.0, cross_node_factor=1.0),
    )
    missed = [
        (o.job_id, o.deadline_s, o.finish_s)
        for o in result.outcomes
        if o.deadline_s is not None and not o.declined and not o.met_deadline
    ]
    assert missed == []


# --- registry -----------------------------------------------------------------------------------


def test_registry_holds_the_built_in_policies():
    assert set(policy_names()) >= {"fifo", "edf", "srtf", "las", "elasticflow"}


@pytest.mark.parametrize("name", policy_names())
def test_create_policy_returns_a_fresh_instance_named_as_registered(name):
    first, second = create_policy(name), create_policy(name)
    assert (first.name, second.name, first is second) == (name, name, False)


def test_create_policy_passes_options_to_the_constructor():
    assert create_policy("las", thresholds_worker_s=(1.0, 2.0)).thresholds == (1.0, 2.0)


def test_unknown_policy_name_raises_input_error_listing_the_known_names():
    with pytest.raises(InputError) as caught:
        create_policy("round-robin")
    message = str(caught.value)
    assert "round-robin" in message
    assert all(name in message for name in policy_names()), message


def test_registering_a_duplicate_name_raises_and_keeps_the_original():
    names, fifo_type = policy_names(), type(create_policy("fifo"))

    class Impostor(Policy):
        def allocate(self, view: ClusterView) -> Decision:
            return Decision()

    with pytest.raises(ValueError, match="fifo"):
        register("fifo")(Impostor)
    assert policy_names() == names
    assert type(create_policy("fifo")) is fifo_type
