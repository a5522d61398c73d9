"""Tests for qosched.cluster.policies.pollux: the allocation rule by hand, and invariants.

Model ``m`` runs ``g`` iterations/s on ``g`` GPUs (3 is interpolated), ``flat`` runs 1/s on any
count. With two jobs on 4 GPUs the fair share is 2, so ``m``'s speedup on ``g`` is g/2 and
``flat``'s is 1; each is scaled by nodes / GPUs = 1/4.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from cluster_helpers import job

from qosched.cluster.fidelity import configure
from qosched.cluster.generate import GeneratorConfig, generate_trace
from qosched.cluster.policies import create_policy
from qosched.cluster.policies.pollux import (
    Options,
    Pollux,
    best_counts,
    candidate_counts,
    restart_factor,
)
from qosched.cluster.simulator import SimConfig, simulate
from qosched.cluster.spec import ClusterSpec
from qosched.cluster.state import ClusterView, JobState, Phase
from qosched.cluster.throughput import ThroughputModel

TABLES = ThroughputModel(
    {
        "m": {64: {1: 1.0, 2: 2.0, 4: 4.0, 8: 8.0}},
        "flat": {64: {1: 1.0, 2: 1.0, 4: 1.0}},
    }
)
ONE_NODE = ClusterSpec.from_flags(1, 4)


def state(job_id: str, model: str, submit: float, workers: int = 0) -> JobState:
    spec = job(job_id, submit, 10_000, model=model)
    result = JobState(spec, TABLES.curve(model, 64))
    if workers:
        result.workers, result.phase, result.started_s = workers, Phase.RUNNING, submit
    return result


# --- the pieces ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("age", "restarts", "expected"),
    [(90.0, 1, 0.5), (60.0, 0, 2 / 3), (10.0, 1, 0.0), (0.0, 0, 0.0)],
    ids=["once-restarted", "fresh", "restarted-more-than-its-age", "just-arrived"],
)
def test_restart_factor_is_age_less_restart_delays_over_age_plus_one_delay(age, restarts, expected):
    assert restart_factor(age, restarts) == pytest.approx(expected)


def test_candidate_counts_are_within_one_node_or_whole_nodes():
    curve = TABLES.curve("m", 64)  # available 1..8
    assert candidate_counts(curve, workers_per_node=4, most=8) == (1, 2, 3, 4, 8)
    assert candidate_counts(curve, workers_per_node=4, most=2) == (1, 2)
    assert candidate_counts(curve, workers_per_node=2, most=8) == (1, 2, 4, 6, 8)


def test_best_counts_picks_the_cheapest_split_of_the_capacity():
    # 4 workers. a: 0/2/4 workers cost 10/4/3; b: 0/1/2 cost 10/5/1.
    # By hand: a2+b2 = 5, a4+b0 = 13, a2+b1 = 9, a0+b2 = 11: a gets 2, b gets 2.
    a = Options(np.array([0, 2, 4]), np.array([10.0, 4.0, 3.0]))
    b = Options(np.array([0, 1, 2]), np.array([10.0, 5.0, 1.0]))
    assert best_counts([a, b], 4) == [2, 2]
    assert best_counts([a, b], 3) == [2, 1]  # a2+b1 = 9 beats a0+b2 = 11


def test_best_counts_breaks_a_tie_towards_fewer_workers():
    flat = Options(np.array([0, 1, 2]), np.array([5.0, 1.0, 1.0]))
    assert best_counts([flat], 2) == [1]
    assert best_counts([flat], 10) == [1]  # a budget past what the jobs can use changes nothing


@pytest.mark.parametrize("seed", range(12))
def test_best_counts_matches_brute_force_on_random_instances(seed):
    rng = np.random.default_rng(seed)
    options = []
    for _ in range(4):
        counts = np.array([0, *sorted(rng.choice(np.arange(1, 6), size=3, replace=False))])
        options.append(Options(counts, rng.uniform(0.1, 10.0, size=4)))
    capacity = int(rng.integers(2, 25))  # past the most the jobs can use (20) too
    feasible = [
        picks
        for picks in itertools.product(range(4), repeat=4)
        if sum(int(o.counts[i]) for o, i in zip(options, picks, strict=True)) <= capacity
    ]
    best = min(sum(o.costs[i] for o, i in zip(options, p, strict=True)) for p in feasible)
    counts = best_counts(options, capacity)
    assert sum(counts) <= capacity
    chosen = sum(o.costs[list(o.counts).index(c)] for o, c in zip(options, counts, strict=True))
    assert chosen == pytest.approx(best)


# --- the allocation rule by hand ----------------------------------------------------------------


def test_two_new_jobs_split_by_speedup():
    # Both submitted at 0, decided at the 60 s tick: restart factor 60/90 = 2/3 for a start.
    # m on g: g/2 x 1/4 x 2/3 = g/12; flat on any g: 1 x 1/4 x 2/3 = 1/6.
    # Costs 1/(scaled speedup + 0.001): m3 + flat1 ~ 4.0 + 6.0 = 10.0; m2 + flat2 (or flat1)
    # ~ 6.0 + 6.0; m4 + flat0 ~ 3.0 + 1000. So m gets 3 and flat 1 (a tie of flat's counts
    # goes to the fewer).
    view = ClusterView(60.0, ONE_NODE, (state("a", "m", 0.0), state("b", "flat", 0.0)))
    decision = Pollux(explore=False).allocate(view)
    assert dict(decision.workers) == {"a": 3, "b": 1}
    assert decision.wake_at == 120.0


@pytest.mark.parametrize(
    ("submit_a", "submit_b", "expected"),
    [(9_880.0, 9_980.0, {"a": 3, "b": 1}), (20.0, 20.0, {"a": 2, "b": 2})],
    ids=["young-jobs-keep-their-workers", "old-jobs-are-rebalanced"],
)
def test_restart_penalty_decides_whether_running_jobs_are_resized(submit_a, submit_b, expected):
    # Both m, a on 3 GPUs and b on 1, decided at the tick t=10,020; m on g scales to g/8
    # (fair share 2).
    # Keeping 3+1: 1/(3/8) + 1/(1/8) ~ 10.6; 2+2 without penalty would cost 8.
    # Young: ages 140 s and 40 s, factors 140/170 and 40/70: 2+2 costs
    #   1/(0.25 x 0.824) + 1/(0.25 x 0.571) ~ 4.8 + 7.0 = 11.8 > 10.6, so both keep.
    # Old: ages 10,000 s, factor 0.997: 2+2 costs ~8.0 < 10.6, so both move to 2.
    a = state("a", "m", submit_a, workers=3)
    b = state("b", "m", submit_b, workers=1)
    view = ClusterView(10_020.0, ONE_NODE, (a, b))
    assert dict(Pollux(explore=False).allocate(view).workers) == expected


def test_between_ticks_running_jobs_keep_their_workers_and_arrivals_wait():
    view = ClusterView(90.0, ONE_NODE, (state("a", "m", 0.0, workers=2), state("b", "m", 80.0)))
    decision = Pollux().allocate(view)
    assert (dict(decision.workers), decision.wake_at) == ({"a": 2}, 120.0)


def test_no_jobs_no_wake_up():
    decision = Pollux().allocate(ClusterView(60.0, ONE_NODE, ()))
    assert (dict(decision.workers), decision.wake_at) == ({}, None)


def test_interval_must_be_positive():
    with pytest.raises(ValueError, match="interval"):
        Pollux(interval_s=0.0)


# --- in the simulator ---------------------------------------------------------------------------


def run(jobs, cluster=ONE_NODE, policy=None):
    return simulate(
        cluster,
        TABLES,
        policy or Pollux(),
        jobs,
        SimConfig(restart_pause_s=0.0, cross_node_factor=1.0),
    )


def test_a_lone_job_doubles_its_workers_each_tick_as_it_explores():
    # One node of 8; nothing starts at t=0 (age 0: a start is worth nothing), then the cap
    # doubles from the most workers held: 1, 2, 4, 8 at 60, 120, 180, 240 s.
    result = run([job("a", 0.0, 100_000, model="m")], cluster=ClusterSpec.from_flags(1, 8))
    assert result.allocation_timeline[:4] == ((60.0, 1), (120.0, 2), (180.0, 4), (240.0, 8))


def test_a_job_arriving_between_ticks_starts_at_the_next_tick():
    # a holds 1 GPU from 60 s; b arrives at 70 s and starts at 120 s.
    outcomes = {
        o.job_id: o
        for o in run([job("a", 0.0, 500, model="flat"), job("b", 70.0, 50, model="flat")]).outcomes
    }
    assert (outcomes["a"].start_s, outcomes["b"].start_s) == (60.0, 120.0)
    assert outcomes["b"].finish_s == pytest.approx(170.0)


def test_a_tick_the_simulator_did_not_decide_at_is_taken_at_the_next_decision():
    # Asked to be woken at 120 s, decided at 137.5 s (a simulator on a clock of its own): the
    # tick has passed, so the allocation is made now, not held for one that never comes. At
    # 140 s, between that decision's tick and the next, nothing moves again.
    policy = Pollux()
    waiting = ClusterView(75.0, ONE_NODE, (state("a", "m", 70.0),))
    assert (dict(policy.allocate(waiting).workers), policy.allocate(waiting).wake_at) == ({}, 120.0)
    late = policy.allocate(ClusterView(137.5, ONE_NODE, (state("a", "m", 70.0),)))
    assert dict(late.workers) == {"a": 1} and late.wake_at == 180.0
    held = policy.allocate(ClusterView(140.0, ONE_NODE, (state("a", "m", 70.0, workers=1),)))
    assert dict(held.workers) == {"a": 1} and held.wake_at == 180.0


def test_a_trace_starting_off_the_minute_finishes_under_the_artifact_slots():
    # Found by a random trace: under --fidelity artifact the simulator decides every 60 s from
    # the first arrival (here 5,057.87 s), never on a multiple of 60 s; Pollux waited for one,
    # and the run never ended.
    jobs = [job("a", 5_057.87, 5_000, model="flat"), job("b", 5_100.5, 500, model="flat")]
    policy, config = configure("pollux", "artifact", SimConfig())
    result = simulate(ClusterSpec.from_flags(1, 4), TABLES, policy, jobs, config)
    assert sorted(o.job_id for o in result.outcomes if o.finish_s is not None) == ["a", "b"]
    first = min(o.start_s for o in result.outcomes)
    assert first == pytest.approx(5_057.87 + 60.0)  # the first slot decision after the tick


def test_registered_for_policy_all():
    assert isinstance(create_policy("pollux"), Pollux)


@pytest.mark.parametrize(("load", "seed"), [(0.5, 1), (2.0, 2)], ids=["light", "overload"])
def test_every_job_of_a_generated_trace_finishes_within_the_cluster(load, seed):
    tables = ThroughputModel.bundled()
    cluster = ClusterSpec.from_flags(2, 8)
    jobs = generate_trace(
        GeneratorConfig(jobs=40, load=load, cluster_workers=16, median_duration_s=1800, seed=seed),
        tables,
    )
    result = simulate(cluster, tables, Pollux(), jobs)
    assert all(o.finish_s is not None and not o.declined for o in result.outcomes)
    assert max(total for _, total in result.allocation_timeline) <= cluster.total_workers
    # Allocations change only on ticks (a completion in between only frees workers).
    grown = [
        t
        for (t, total), (_, before) in zip(
            result.allocation_timeline[1:], result.allocation_timeline, strict=False
        )
        if total > before
    ]
    assert all(abs(t / 60.0 - round(t / 60.0)) < 1e-9 for t in grown), grown


def test_same_trace_same_outcomes():
    tables = ThroughputModel.bundled()
    jobs = generate_trace(GeneratorConfig(jobs=30, load=1.5, cluster_workers=16, seed=3), tables)
    runs = [
        simulate(ClusterSpec.from_flags(2, 8), tables, Pollux(), jobs).outcomes for _ in range(2)
    ]
    assert runs[0] == runs[1]
