"""Tests for qosched.cluster.simulator: the conformance every policy passes, the progress model
(cross-node factor, restart pause), strictness about bad decisions and bad input, determinism."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
from cluster_helpers import job

from qosched.cluster.artifact import ArtifactConfig, ArtifactDecision
from qosched.cluster.generate import GeneratorConfig, generate_trace
from qosched.cluster.job import JobSpec
from qosched.cluster.metrics import summarize
from qosched.cluster.policies import Policy, create_policy, policy_names
from qosched.cluster.simulator import JobOutcome, SimConfig, SimResult, simulate
from qosched.cluster.spec import ClusterSpec
from qosched.cluster.state import ClusterView, Decision, DecisionClock
from qosched.cluster.throughput import ThroughputModel
from qosched.core.errors import InputError, SimulationError

SMALL = ThroughputModel(
    {
        "m": {64: {1: 1.0, 2: 2.0, 4: 4.0, 8: 8.0}},
        "s": {64: {1: 1.0, 2: 1.5, 4: 2.0}},
        "wide": {64: {1: 1.0, 2: 2.0, 4: 4.0, 8: 8.0, 16: 16.0}},
    }
)


def outcomes_of(result: SimResult) -> dict[str, JobOutcome]:
    return {outcome.job_id: outcome for outcome in result.outcomes}


class Scripted(Policy):
    """A test-only policy (not registered) whose decisions come from a function of the view."""

    name = "test-scripted"

    def __init__(self, decide: Callable[[ClusterView], Decision]) -> None:
        self.decide = decide

    def allocate(self, view: ClusterView) -> Decision:
        return self.decide(view)


# --- conformance: every registered policy on generated traces -----------------------------------

BUNDLED = ThroughputModel.bundled()
CONFORMANCE_CLUSTER = ClusterSpec.from_flags(4, 8)
LOADS = {"load-0.5": (0.5, 1), "load-1": (1.0, 2), "load-3": (3.0, 3)}


def conformance_trace(load_id: str) -> list[JobSpec]:
    load, seed = LOADS[load_id]
    config = GeneratorConfig(jobs=150, load=load, cluster_workers=32, seed=seed)
    return generate_trace(config, BUNDLED)


@pytest.fixture(
    scope="module",
    params=list(itertools.product(policy_names(), LOADS)),
    ids=[f"{name}-{load}" for name, load in itertools.product(policy_names(), LOADS)],
)
def conformance(request) -> tuple[list[JobSpec], SimResult]:
    name, load_id = request.param
    jobs = conformance_trace(load_id)
    return jobs, simulate(CONFORMANCE_CLUSTER, BUNDLED, create_policy(name), jobs)


@pytest.mark.slow
def test_conformance_every_job_is_reported_once_in_trace_order(conformance):
    jobs, result = conformance
    assert [o.job_id for o in result.outcomes] == [j.job_id for j in jobs]


@pytest.mark.slow
def test_conformance_every_admitted_job_starts_and_finishes(conformance):
    _, result = conformance
    unfinished = [
        o.job_id
        for o in result.outcomes
        if not o.declined and (o.start_s is None or o.finish_s is None)
    ]
    assert unfinished == []


def test_conformance_declined_jobs_never_run(conformance):
    _, result = conformance
    ran = [
        o.job_id
        for o in result.outcomes
        if o.declined and (o.start_s, o.finish_s, o.worker_seconds) != (None, None, 0.0)
    ]
    assert ran == []


def test_conformance_jobs_start_after_submission_and_finish_after_starting(conformance):
    _, result = conformance
    early = [
        o.job_id
        for o in result.outcomes
        if not o.declined and not (o.submit_s <= o.start_s <= o.finish_s)
    ]
    assert early == []


def test_conformance_no_job_beats_its_top_speed(conformance):
    jobs, result = conformance
    too_fast = []
    for spec, outcome in zip(jobs, result.outcomes, strict=True):
        if outcome.declined:
            continue
        curve = BUNDLED.curve(spec.model, spec.batch_size)
        top = max(curve.rate(g) for g in range(1, CONFORMANCE_CLUSTER.total_workers + 1))
        if outcome.finish_s - outcome.start_s < spec.iterations / top * (1 - 1e-9):
            too_fast.append(spec.job_id)
    assert too_fast == []


def test_conformance_never_allocates_more_workers_than_exist(conformance):
    _, result = conformance
    allocated = [workers for _, workers in result.allocation_timeline]
    assert allocated and min(allocated) >= 0
    assert max(allocated) <= CONFORMANCE_CLUSTER.total_workers


def test_conformance_timeline_moves_forward_and_ends_empty(conformance):
    _, result = conformance
    times = [t for t, _ in result.allocation_timeline]
    assert all(a < b for a, b in itertools.pairwise(times))
    assert result.allocation_timeline[-1][1] == 0


def hand_integral(timeline) -> float:
    total = 0.0
    for (start, workers), (end, _) in itertools.pairwise(timeline):
        total += workers * (end - start)
    return total


def test_conformance_worker_seconds_of_jobs_add_up_to_the_timeline(conformance):
    _, result = conformance
    assert sum(o.worker_seconds for o in result.outcomes) == pytest.approx(
        hand_integral(result.allocation_timeline), rel=1e-9
    )


def test_conformance_summary_counts_jobs_accepted_and_declined(conformance):
    jobs, result = conformance
    summary = summarize(result)
    declined = sum(o.declined for o in result.outcomes)
    assert (summary.jobs, summary.accepted, summary.declined) == (
        len(jobs),
        len(jobs) - declined,
        declined,
    )


def test_conformance_dsr_counts_declined_deadline_jobs_as_missed(conformance):
    jobs, result = conformance
    deadline_jobs = [(j, o) for j, o in zip(jobs, result.outcomes, strict=True) if j.deadline_s]
    met = sum(
        1
        for j, o in deadline_jobs
        if not o.declined and o.finish_s is not None and o.finish_s <= j.deadline_s + 1e-6
    )
    summary = summarize(result)
    assert (summary.deadline_met, summary.deadline_satisfactory_ratio) == (
        met,
        pytest.approx(met / len(deadline_jobs)),
    )


def test_conformance_utilization_is_allocated_over_capacity_times_makespan(conformance):
    jobs, result = conformance
    makespan = max(o.finish_s for o in result.outcomes if o.finish_s is not None) - min(
        j.submit_s for j in jobs
    )
    expected = hand_integral(result.allocation_timeline) / (32 * makespan)
    summary = summarize(result)
    assert (summary.makespan_s, summary.utilization) == (
        pytest.approx(makespan),
        pytest.approx(expected),
    )


# --- determinism --------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", policy_names())
def test_same_inputs_give_identical_outcomes(name):
    jobs = conformance_trace("load-1")
    first, second = (
        simulate(CONFORMANCE_CLUSTER, BUNDLED, create_policy(name), jobs) for _ in range(2)
    )
    assert (first.outcomes, first.allocation_timeline, first.decisions) == (
        second.outcomes,
        second.allocation_timeline,
        second.decisions,
    )


# --- progress model: cross-node factor ----------------------------------------------------------


@pytest.mark.parametrize(
    ("factor", "finish"), [(1.0, 10.0), (0.5, 20.0)], ids=["no-penalty", "0.5"]
)
def test_job_split_by_running_jobs_runs_at_factor_times_its_speed(factor, finish):
    # Two 4-GPU nodes. "a" and "b" take 3 GPUs each (one per node), leaving one GPU on each:
    # "c" gets both, split, and does 20 iterations at 2 x factor per s.
    jobs = [job("a", 0, 300, workers=3), job("b", 0, 300, workers=3), job("c", 0, 20, workers=2)]
    result = simulate(
        ClusterSpec.from_flags(2, 4),
        SMALL,
        create_policy("fifo"),
        jobs,
        SimConfig(cross_node_factor=factor),
    )
    assert outcomes_of(result)["c"].finish_s == pytest.approx(finish)


@pytest.mark.parametrize(
    ("nodes", "workers_per_node", "spec"),
    [
        (2, 1, job("a", 0, 20, workers=2)),
        (2, 8, job("a", 0, 160, workers=16, model="wide")),
    ],
    ids=["2-workers-on-two-1-gpu-nodes", "16-workers-on-two-8-gpu-nodes"],
)
def test_job_on_the_fewest_nodes_it_needs_is_not_charged_the_cross_node_factor(
    nodes, workers_per_node, spec
):
    # The job spans two nodes, but no fewer could hold it: full speed, 20 / 2 or 160 / 16 s.
    result = simulate(
        ClusterSpec.from_flags(nodes, workers_per_node),
        SMALL,
        create_policy("fifo"),
        [spec],
        SimConfig(cross_node_factor=0.5),
    )
    assert outcomes_of(result)["a"].finish_s == pytest.approx(10.0)


# --- progress model: restart pause --------------------------------------------------------------


def one_then_two_workers_from_10(view: ClusterView) -> Decision:
    before = view.now < 10.0
    return Decision(
        {j.job_id: 1 if before else 2 for j in view.jobs}, wake_at=10.0 if before else None
    )


@pytest.mark.parametrize(
    ("pause", "finish"),
    [(0.0, 25.0), (5.0, 30.0), (30.0, 55.0)],
    ids=["no-pause", "5s", "30s"],
)
def test_resized_job_is_delayed_by_exactly_the_restart_pause(pause, finish):
    # 40 iterations: 10 on one GPU over 0..10, then 30 on two GPUs (15 s) after the pause.
    result = simulate(
        ClusterSpec.from_flags(1, 4),
        SMALL,
        Scripted(one_then_two_workers_from_10),
        [job("a", 0, 40)],
        SimConfig(restart_pause_s=pause),
    )
    assert outcomes_of(result)["a"].finish_s == pytest.approx(finish)


def test_resized_job_holds_its_new_workers_through_the_pause():
    result = simulate(
        ClusterSpec.from_flags(1, 4),
        SMALL,
        Scripted(one_then_two_workers_from_10),
        [job("a", 0, 40)],
        SimConfig(restart_pause_s=5.0),
    )
    outcome = outcomes_of(result)["a"]
    # 1 GPU over 0..10, 2 GPUs over 10..30 (5 s paused, 15 s running); one resize.
    assert (outcome.worker_seconds, outcome.reallocations) == (pytest.approx(50.0), 1)


def test_a_job_is_charged_and_credited_only_while_it_holds_workers():
    # One 4-GPU node, no restart pause. "a" (40 iterations) runs on 2 GPUs over 0..10 (20 done),
    # waits over 10..20 while "b" (40 iterations) has all 4 GPUs, then does its last 20 on 4
    # GPUs: done at 25, 2 x 10 + 4 x 5 = 40 GPU-seconds. "b" waits over 0..10 and runs 10 s.
    def plan(view: ClusterView) -> Decision:
        counts, wake = ({"a": 2, "b": 0}, 10.0) if view.now < 10 else ({"a": 0, "b": 4}, 20.0)
        if view.now >= 20:
            counts, wake = {"a": 4, "b": 0}, None
        return Decision({j.job_id: counts[j.job_id] for j in view.jobs}, wake_at=wake)

    result = simulate(
        ClusterSpec.from_flags(1, 4),
        SMALL,
        Scripted(plan),
        [job("a", 0, 40), job("b", 0, 40)],
        SimConfig(restart_pause_s=0.0),
    )
    a, b = outcomes_of(result)["a"], outcomes_of(result)["b"]
    assert (a.start_s, a.finish_s, a.worker_seconds) == (0.0, 25.0, 40.0)
    assert (b.start_s, b.finish_s, b.worker_seconds) == (10.0, 20.0, 40.0)


def test_first_start_costs_no_restart_pause():
    result = simulate(
        ClusterSpec.from_flags(1, 4),
        SMALL,
        create_policy("fifo"),
        [job("a", 3, 40, workers=4)],
        SimConfig(restart_pause_s=30.0),
    )
    assert (outcomes_of(result)["a"].start_s, outcomes_of(result)["a"].finish_s) == (3.0, 13.0)


def test_decision_that_keeps_a_job_where_it_is_costs_nothing():
    def one_worker_waking_every_3s(view: ClusterView) -> Decision:
        return Decision({j.job_id: 1 for j in view.jobs}, view.now + 3 if view.jobs else None)

    result = simulate(
        ClusterSpec.from_flags(1, 4),
        SMALL,
        Scripted(one_worker_waking_every_3s),
        [job("a", 0, 10)],
        SimConfig(restart_pause_s=30.0),
    )
    outcome = outcomes_of(result)["a"]
    assert (outcome.finish_s, outcome.reallocations) == (10.0, 0)


def test_credited_work_is_done_at_once_and_charged_time_does_none():
    # "a": 10 iterations at 2/s on 2 GPUs. Credited 2 s of its allocation at its start, it has
    # 4 iterations done at 0 and ends at 3; "b" on one GPU, charged 2 s, ends at 12; "c" at 10.
    def credit_a_at_start(view: ClusterView) -> Decision:
        alive = {j.job_id for j in view.jobs}
        workers = {j: n for j, n in {"a": 2, "b": 1, "c": 1}.items() if j in alive}
        start = view.now == 0
        return ArtifactDecision(
            workers, credit_s={"a": 2.0} if start else {}, charge_s={"b": 2.0} if start else {}
        )

    result = simulate(
        ClusterSpec.from_flags(1, 4),
        SMALL,
        Scripted(credit_a_at_start),
        [job("a", 0, 10), job("b", 0, 10), job("c", 0, 10)],
    )
    finished = {o.job_id: o.finish_s for o in result.outcomes}
    assert finished == {"a": 3.0, "b": 12.0, "c": 10.0}


# --- strictness about decisions -----------------------------------------------------------------

BAD_DECISIONS = {
    "more-workers-than-exist": (lambda v: Decision({"a": 8, "b": 1}), "allocated 9 GPUs"),
    "unknown-job-id": (lambda v: Decision({"a": 1, "ghost": 1}), "ghost"),
    "count-without-speed": (lambda v: Decision({"b": 8}), "no measured speed"),
    "negative-count": (lambda v: Decision({"a": -1}), "-1"),
    "wake-now": (lambda v: Decision({"a": 1}, wake_at=v.now), "not in the future"),
    "wake-in-the-past": (lambda v: Decision({"a": 1}, wake_at=v.now - 1), "not in the future"),
    "nothing-ever-runs": (lambda v: Decision({}), "unfinished"),
    "negative-credit": (lambda v: ArtifactDecision({"a": 1}, credit_s={"a": -1.0}), "must be >= 0"),
    "infinite-credit": (lambda v: ArtifactDecision({"a": 1}, credit_s={"a": float("inf")}), ">= 0"),
    "credit-to-unknown-job": (
        lambda v: ArtifactDecision({"a": 1}, credit_s={"ghost": 1.0}),
        "ghost",
    ),
    "negative-charge": (lambda v: ArtifactDecision({"a": 1}, charge_s={"a": -1.0}), "must be >= 0"),
    "charge-to-unknown-job": (
        lambda v: ArtifactDecision({"a": 1}, charge_s={"ghost": 1.0}),
        "ghost",
    ),
}


@pytest.mark.parametrize(("decide", "message"), BAD_DECISIONS.values(), ids=BAD_DECISIONS)
def test_bad_decision_raises_simulation_error(decide, message):
    # Two 4-GPU nodes: 8 GPUs in all; "b" is model "s", measured up to 4 GPUs.
    jobs = [job("a", 0, 10), job("b", 0, 10, model="s")]
    with pytest.raises(SimulationError, match=message):
        simulate(ClusterSpec.from_flags(2, 4), SMALL, Scripted(decide), jobs)


def test_simulation_error_names_the_policy_and_the_time():
    jobs = [job("a", 5, 10)]
    with pytest.raises(SimulationError, match=r"t=5\.0: policy 'test-scripted'"):
        simulate(ClusterSpec.from_flags(1, 4), SMALL, Scripted(BAD_DECISIONS["wake-now"][0]), jobs)


# --- strictness about input ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nodes", "spec", "message"),
    [
        (1, job("a", 0, 10, workers=8), "job a requests 8 GPUs but the cluster has 4"),
        (2, job("a", 0, 10, workers=8, model="s"), "job a: .* no measured .*speed on 8 workers"),
        (1, job("a", 0, 10, model="nope"), "job a: unknown model 'nope'"),
        (1, JobSpec("a", 0, "m", 32, 10, None, 1), "job a: .* no measurement at batch size 32"),
    ],
    ids=["more-workers-than-the-cluster", "count-without-speed", "unknown-model", "unknown-batch"],
)
def test_bad_job_raises_input_error_before_running(nodes, spec, message):
    cluster = ClusterSpec.from_flags(nodes, 4)
    with pytest.raises(InputError, match=message):
        simulate(cluster, SMALL, Scripted(BAD_DECISIONS["nothing-ever-runs"][0]), [spec])


@pytest.mark.parametrize(
    "options",
    [
        {"restart_pause_s": -1.0},
        {"restart_pause_s": float("inf")},
        {"restart_pause_s": float("nan")},
        {"cross_node_factor": 0.0},
        {"cross_node_factor": 0.09},
        {"cross_node_factor": 1.5},
        {"restart_pause_s": 86_400.5},
        {"seed": -5},
        {"seed": 1.5},
        {"artifact": {"restart_model": "none"}},
    ],
    ids=["negative-pause", "infinite-pause", "nan-pause", "zero-factor", "factor-below-0.1",
         "factor-above-1", "pause-over-a-day", "negative-seed", "fractional-seed",
         "artifact-not-a-config"],
)  # fmt: skip
def test_sim_config_rejects_invalid_constants(options):
    with pytest.raises(InputError) as error:
        SimConfig(**options)
    assert error.value.field == next(iter(options))


def test_a_day_long_restart_pause_is_simulated():
    config = SimConfig(restart_pause_s=86_400.0)
    result = simulate(ClusterSpec.from_flags(1, 8), SMALL, create_policy("qos"),
                      [job("a", 0.0, 1_000, deadline=10**6)], config)  # fmt: skip
    assert result.outcomes[0].finish_s is not None


# --- running ------------------------------------------------------------------------------------


def test_empty_trace_gives_an_empty_result():
    result = simulate(ClusterSpec.from_flags(1, 4), SMALL, create_policy("fifo"), [])
    assert (result.outcomes, result.allocation_timeline) == ((), ())


def test_progress_callback_counts_settled_jobs():
    calls = []
    simulate(
        ClusterSpec.from_flags(1, 4),
        SMALL,
        create_policy("fifo"),
        [job("a", 0, 10), job("b", 0, 20), job("c", 5, 10)],
        on_progress=lambda done, total: calls.append((done, total)),
    )
    assert calls == [(1, 3), (2, 3), (3, 3)]


def test_clock_starts_at_the_first_submission():
    result = simulate(
        ClusterSpec.from_flags(1, 4), SMALL, create_policy("fifo"), [job("a", 100, 40, workers=4)]
    )
    assert result.allocation_timeline == ((100.0, 4), (110.0, 0))


@pytest.mark.parametrize("name", ["fifo", "edf", "srtf", "las"])
def test_a_policy_honouring_requests_refuses_a_request_larger_than_the_cluster(name):
    with pytest.raises(InputError, match=f"policy '{name}', which honours requests"):
        simulate(
            ClusterSpec.from_flags(1, 4), SMALL, create_policy(name), [job("a", 0, 10, workers=8)]
        )


@pytest.mark.parametrize("name", ["elasticflow", "qos"])
def test_a_policy_sizing_jobs_itself_runs_a_request_larger_than_the_cluster(name):
    # Model "m" runs 4 it/s on 4 GPUs: 40 iterations need 10 s on the whole 4-GPU node.
    spec = job("a", 0, 40, workers=8, deadline=100)
    result = simulate(
        ClusterSpec.from_flags(1, 4), SMALL, create_policy(name), [spec], SimConfig(0.0, 1.0)
    )
    (outcome,) = result.outcomes
    assert not outcome.declined
    assert outcome.finish_s == pytest.approx(10.0)


# --- the ElasticFlow artifact's Tiresias and Themis job accounting -------------------------------


def _timed(job_id: str, submit: float, iterations: int, duration: float) -> JobSpec:
    return JobSpec(job_id, submit, "m", 64, iterations, None, 1, duration_s=duration)


@pytest.mark.parametrize(
    ("ends_on", "finishes"),
    # One GPU each at 1 it/s: "short" has 100 iterations but a 50 s duration, "long" 100
    # iterations and 150 s.
    [
        ("iterations", {"short": 100.0, "long": 100.0}),
        ("duration", {"short": 50.0, "long": 150.0}),
        ("either", {"short": 50.0, "long": 100.0}),
    ],
)
def test_a_job_ends_on_what_runs_out(ends_on, finishes):
    jobs = [_timed("short", 0.0, 100, 50.0), _timed("long", 0.0, 100, 150.0)]
    result = simulate(
        ClusterSpec.from_flags(1, 2),
        SMALL,
        create_policy("fifo"),
        jobs,
        SimConfig(artifact=ArtifactConfig(restart_model="none", ends_on=ends_on)),
    )
    assert {o.job_id: o.finish_s for o in outcomes_of(result).values()} == finishes


def test_on_start_overhead_is_taken_at_the_next_decision_or_never():
    # Both start at 0 on one GPU each with the artifact's 4 s start overhead (2 + 2 (log2 1 + 1)).
    # "a" (50 s) ends before any other decision and never pays it. Its end asks for a decision,
    # held to the slot's end at 60, where "b" has run 60 s less the 4: 100 - 56 left, so 104.
    jobs = [_timed("a", 0.0, 1000, 50.0), _timed("b", 0.0, 1000, 100.0)]
    config = SimConfig(
        artifact=ArtifactConfig(restart_model="on-start", decision_slot_s=60.0, ends_on="duration")
    )
    result = simulate(ClusterSpec.from_flags(1, 2), SMALL, create_policy("fifo"), jobs, config)
    assert {o.job_id: o.finish_s for o in outcomes_of(result).values()} == {
        "a": 50.0,
        "b": 104.0,
    }


def test_on_start_restart_round_charges_every_running_job():
    # Themis re-decides every 60 s: decisions at 0, 60, ..., and the 61st (t = 3600) is a
    # restart round, where the running job pays a full restart, 2 + 27 + 2 = 31 s, on top of
    # its 4 s start overhead (taken at 60): 4000 s of run time end at 4035.
    jobs = [_timed("a", 0.0, 10**6, 4000.0)]
    config = SimConfig(
        artifact=ArtifactConfig(restart_model="on-start", decision_slot_s=60.0, ends_on="duration")
    )
    result = simulate(ClusterSpec.from_flags(1, 2), SMALL, create_policy("themis"), jobs, config)
    assert outcomes_of(result)["a"].finish_s == 4035.0


def test_rejects_an_unknown_end_rule():
    with pytest.raises(InputError, match="end rule"):
        SimConfig(artifact=ArtifactConfig(ends_on="budget"))


@pytest.mark.parametrize(("grid", "b_start"), [(False, 200.0), (True, 240.0)])
def test_decision_grid_holds_an_arrival_on_an_idle_cluster_to_the_next_grid_point(grid, b_start):
    # "a" arrives at 0 (the grid's origin) and ends at 10, which asks for a decision at the
    # slot's end, 60. "b" arrives at 200, long after that slot: without the grid it starts
    # then, with it at the next grid point, 240.
    jobs = [job("a", 0.0, 10), job("b", 200.0, 10)]
    config = SimConfig(
        artifact=ArtifactConfig(restart_model="none", decision_slot_s=60.0, decision_grid=grid)
    )
    result = simulate(ClusterSpec.from_flags(1, 2), SMALL, create_policy("fifo"), jobs, config)
    assert outcomes_of(result)["b"].start_s == b_start


@pytest.mark.parametrize(
    ("config", "clock"),
    [
        pytest.param(SimConfig(), DecisionClock(), id="default"),
        pytest.param(
            SimConfig(
                artifact=ArtifactConfig(
                    restart_model="none", decision_slot_s=60.0, decision_grid=True
                )
            ),
            DecisionClock(60.0, 5.0),
            id="grid-from-the-first-arrival",
        ),
        pytest.param(
            SimConfig(
                artifact=ArtifactConfig(
                    restart_model="none",
                    decision_slot_s=60.0,
                    decision_grid=True,
                    grid_origin_s=0.0,
                )
            ),
            DecisionClock(60.0, 0.0),
            id="grid-from-0",
        ),
        pytest.param(
            SimConfig(
                artifact=ArtifactConfig(restart_model="every-decision", decision_slot_s=60.0)
            ),
            DecisionClock(60.0, counted=True),
            id="restart-rounds",
        ),
        pytest.param(
            SimConfig(
                artifact=ArtifactConfig(
                    restart_model="none", decision_slot_s=60.0, hold_last_arrival=False
                )
            ),
            DecisionClock(60.0, off_clock=True),
            id="last-arrival-at-once",
        ),
    ],
)
def test_policies_see_the_clock_decisions_are_made_on(config, clock):
    seen = []

    def decide(view: ClusterView) -> Decision:
        seen.append(view.clock)
        return Decision({j.job_id: 1 for j in view.jobs})

    simulate(ClusterSpec.from_flags(1, 2), SMALL, Scripted(decide), [job("a", 5.0, 10)], config)
    assert seen and all(c == clock for c in seen)


def test_decision_grid_needs_a_slot():
    with pytest.raises(InputError, match="decision_grid"):
        SimConfig(artifact=ArtifactConfig(decision_grid=True))


@pytest.mark.parametrize(
    ("decide_at", "finish"),
    [
        ("events", {"a": 100.0, "b": 170.0, "c": 510.0}),
        ("arrivals", {"a": 100.0, "b": 550.0, "c": 570.0}),
    ],
)
def test_decide_at_arrivals_makes_rounds_only_at_arrivals_then_every_slot(decide_at, finish):
    # One GPU, fifo. a (0, 100 s) runs at once; b (10, 50 s) is held to the slot's end, 60,
    # and waits. By events: a's end at 100 asks for a decision at the slot's end, 120, where b
    # starts (ends 170); c (500, 10 s) starts at once. By arrivals: a's end makes no round, so
    # b waits for c's arrival at 500 and c, queued behind it, for the next round after the
    # last arrival, one slot on: 560.
    jobs = [job("a", 0.0, 100), job("b", 10.0, 50), job("c", 500.0, 10)]
    config = SimConfig(
        artifact=ArtifactConfig(restart_model="none", decision_slot_s=60.0, decide_at=decide_at)
    )
    result = simulate(ClusterSpec.from_flags(1, 1), SMALL, create_policy("fifo"), jobs, config)
    assert {o.job_id: o.finish_s for o in result.outcomes} == pytest.approx(finish)


@pytest.mark.parametrize(("decide_at", "a_finish"), [("events", 108.0), ("arrivals", 104.0)])
def test_decide_at_arrivals_charges_no_overhead_once_no_arrival_is_left(decide_at, a_finish):
    # Two GPUs, every-decision overhead without the cache: 2 + 2 (log2 1 + 1) = 4 s a round.
    # a (0, 100 s) pays 4 s at the round at 0; at b's round (70, the last arrival) it pays
    # another 4 s by events, but nothing by arrivals, where a round with no arrival left to
    # come is free: a ends at 108 or 104.
    jobs = [job("a", 0.0, 100), job("b", 70.0, 10)]
    config = SimConfig(
        restart_pause_s=0.0,
        artifact=ArtifactConfig(
            restart_model="every-decision",
            decision_slot_s=60.0,
            decide_at=decide_at,
            overhead_cache=False,
        ),
    )
    result = simulate(ClusterSpec.from_flags(1, 2), SMALL, create_policy("fifo"), jobs, config)
    assert outcomes_of(result)["a"].finish_s == pytest.approx(a_finish)


@pytest.mark.parametrize(("cache", "a_finish"), [(True, 106.0), (False, 108.0)])
def test_overhead_cache_off_charges_the_full_overhead_at_every_decision(cache, a_finish):
    # a (0, 100 s) on one of two GPUs pays 4 s at the decision at 0 (a new GPU set); at b's
    # decision (70) its set was seen before: 2 s with the cache, 4 s again without.
    jobs = [job("a", 0.0, 100), job("b", 70.0, 10)]
    config = SimConfig(
        restart_pause_s=0.0,
        artifact=ArtifactConfig(
            restart_model="every-decision", decision_slot_s=60.0, overhead_cache=cache
        ),
    )
    result = simulate(ClusterSpec.from_flags(1, 2), SMALL, create_policy("fifo"), jobs, config)
    assert outcomes_of(result)["a"].finish_s == pytest.approx(a_finish)


def test_rejects_an_unknown_decision_rule_and_arrivals_without_a_slot():
    with pytest.raises(InputError, match="decision rule"):
        SimConfig(artifact=ArtifactConfig(decide_at="ends"))
    with pytest.raises(InputError, match="decide_at"):
        SimConfig(artifact=ArtifactConfig(decide_at="arrivals"))


def test_decide_at_arrivals_a_job_waiting_across_the_last_counted_round_pays_its_overhead_later():
    # One GPU, fifo, 4 s a round. The round at 0 (c still to come) charges a, which runs, and
    # sets b's overhead too; c's round at 200 is the last arrival's, free, but b, running from
    # it, pays the 4 s it was set: 204 + 50. c waits for the next round, 260.
    jobs = [job("a", 0.0, 100), job("b", 0.0, 50), job("c", 200.0, 10)]
    config = SimConfig(
        restart_pause_s=0.0,
        artifact=ArtifactConfig(
            restart_model="every-decision",
            decision_slot_s=60.0,
            decide_at="arrivals",
            overhead_cache=False,
        ),
    )
    result = simulate(ClusterSpec.from_flags(1, 1), SMALL, create_policy("fifo"), jobs, config)
    finish = {o.job_id: o.finish_s for o in result.outcomes}
    assert finish == pytest.approx({"a": 104.0, "b": 254.0, "c": 270.0})


@pytest.mark.parametrize(("forgive", "a_finish"), [(False, 10_977.0), (True, 10_975.0)])
def test_decide_at_arrivals_with_forgiven_overhead(forgive, a_finish):
    # 256 GPUs: an 8-GPU job pays 7 + 2 (log2 8 + 1) = 15 s a round, and 7 + 47 + 8 = 62 s on
    # the 61st round (t = 3600), more than the 60 s to the next. One tiny arrival a minute up
    # to 3720 keeps the rounds counted to 3660: 60 x 15 + 60 + 15 = 975 s lost, the 2 s the
    # round at 3600 leaves over forgiven at the next (carried over, they make it 977); the
    # round at 3720 is the last arrival's, free.
    jobs = [job("a", 0.0, 80_000, workers=8)] + [job(f"t{i}", 60.0 * i, 1) for i in range(1, 63)]
    config = SimConfig(
        restart_pause_s=0.0,
        artifact=ArtifactConfig(
            restart_model="every-decision",
            decision_slot_s=60.0,
            decide_at="arrivals",
            overhead_cache=False,
            forgive_overhead=forgive,
        ),
    )
    result = simulate(ClusterSpec.from_flags(32, 8), SMALL, create_policy("fifo"), jobs, config)
    assert outcomes_of(result)["a"].finish_s == pytest.approx(a_finish)


@pytest.mark.parametrize(("held", "b_start"), [(True, 60.0), (False, 30.0)])
def test_hold_last_arrival_off_decides_the_traces_last_arrival_when_it_comes(held, b_start):
    # Decisions by events: a's arrival is decided at 0; b, the last arrival, comes 30 s later,
    # within that slot: held to its end (60), or, as the artifact's Tiresias loop does with
    # the last event of its queue, decided at once.
    jobs = [job("a", 0.0, 100), job("b", 30.0, 20)]
    config = SimConfig(
        artifact=ArtifactConfig(restart_model="none", decision_slot_s=60.0, hold_last_arrival=held)
    )
    result = simulate(ClusterSpec.from_flags(1, 2), SMALL, create_policy("fifo"), jobs, config)
    assert outcomes_of(result)["b"].start_s == b_start


@pytest.mark.parametrize(("forgive", "a_finish"), [(False, 10_077.0), (True, 10_075.0)])
def test_forgive_overhead_ends_a_restart_pause_at_the_next_decision(forgive, a_finish):
    # 256 GPUs, "on-start": the 8-GPU job a pays its 15 s start overhead (counted at 60) and, on
    # the 61st decision (t = 3600), a full restart, 7 + 47 + 8 = 62 s; the next decision comes
    # 60 s later (a tiny arrival a minute to 3720). Forgiven there, a loses 75 s in all, else
    # 77: 10,000 s of work end at 10,075 or 10,077.
    jobs = [job("a", 0.0, 80_000, workers=8)] + [job(f"t{i}", 60.0 * i, 1) for i in range(1, 63)]
    config = SimConfig(
        artifact=ArtifactConfig(
            restart_model="on-start", decision_slot_s=60.0, forgive_overhead=forgive
        )
    )
    result = simulate(ClusterSpec.from_flags(32, 8), SMALL, create_policy("fifo"), jobs, config)
    assert outcomes_of(result)["a"].finish_s == pytest.approx(a_finish)


@pytest.mark.parametrize(("origin", "a_start"), [(None, 70.0), (0.0, 120.0)])
def test_decision_grid_starts_at_the_first_arrival_or_at_the_given_origin(origin, a_start):
    # The only job arrives at 70: on a grid from the first arrival it is decided then; on the
    # 60 s grid from 0 (the artifact's Chronus clock) at 120.
    config = SimConfig(
        artifact=ArtifactConfig(
            restart_model="none", decision_slot_s=60.0, decision_grid=True, grid_origin_s=origin
        )
    )
    result = simulate(
        ClusterSpec.from_flags(1, 2), SMALL, create_policy("fifo"), [job("a", 70.0, 10)], config
    )
    assert outcomes_of(result)["a"].start_s == a_start


def test_a_policy_that_never_starts_a_job_is_an_error_not_a_hang():
    # Asks to be woken every minute and never gives a worker: without the stall bound the
    # simulation would decide forever.
    never = Scripted(lambda view: Decision({}, view.now + 60.0))
    with pytest.raises(SimulationError, match=r"'test-scripted' has left 1 job\(s\) waiting"):
        simulate(ClusterSpec.from_flags(1, 8), SMALL, never, [job("a", 0.0, 10)])


@pytest.mark.parametrize("name", policy_names())
def test_every_policy_finishes_a_trace_off_the_minute_under_the_artifact_slots(name):
    # The artifact fidelity decides in 60 s slots from the first arrival; a trace whose first
    # arrival is not on a multiple of 60 s puts every decision off the trace clock's minutes
    # (Pollux once waited for a minute that never came). Every job is decided: run or declined.
    from qosched.cluster.fidelity import configure

    config = GeneratorConfig(jobs=30, load=1.0, cluster_workers=32, seed=7)
    jobs = [
        JobSpec(j.job_id, j.submit_s + 5_057.87, j.model, j.batch_size, j.iterations,
                None if j.deadline_s is None else j.deadline_s + 5_057.87, j.requested_workers)
        for j in generate_trace(config, BUNDLED)
    ]  # fmt: skip
    policy, sim_config = configure(name, "artifact", SimConfig())
    result = simulate(CONFORMANCE_CLUSTER, BUNDLED, policy, jobs, sim_config)
    assert len(result.outcomes) == len(jobs)
    assert all(o.finish_s is not None or o.declined for o in result.outcomes)
