"""The ElasticFlow artifact's planner (``qosched.cluster.artifact_plan``) on hand-computed cases,
and ``elasticflow(planner="artifact")`` in the artifact's simulator (``--fidelity artifact``)."""

from __future__ import annotations

import random

import pytest
from cluster_helpers import job

from qosched.cluster.artifact_plan import (
    ArtifactPlanner,
    PlannedJob,
    align,
    gpu_time,
    merged,
    with_allocation,
)
from qosched.cluster.fidelity import configure
from qosched.cluster.policies import create_policy
from qosched.cluster.simulator import SimConfig, simulate
from qosched.cluster.spec import ClusterSpec
from qosched.cluster.throughput import ThroughputModel

# Model m runs g iterations/s on g GPUs.
TABLES = ThroughputModel({"m": {64: {1: 1.0, 2: 2.0, 4: 4.0}}})
CURVE = TABLES.curve("m", 64)


def planned(job_id: str, left: float, deadline: float) -> PlannedJob:
    return PlannedJob.of(job_id, CURVE, left, deadline)


@pytest.mark.parametrize(
    ("start", "time", "aligned"), [(100, 160, 160), (100, 161, 220), (100, 100, 100), (0, 1, 60)]
)
def test_align_rounds_up_to_whole_slots_from_the_start(start, time, aligned):
    assert align(start, time, 60) == aligned


def test_merged_drops_repeats_and_gpu_time_sums_segments():
    assert merged({0: 2, 60: 2, 120: 4, 180: 4}) == {0: 2, 120: 4}
    assert gpu_time({0: 1, 600: 2}, 840) == 600 * 1 + 240 * 2


def test_with_allocation_gives_a_jobs_gpus_back_until_its_end():
    # Free 2 GPUs from 0, 6 from 120; the job holds 1 from 0 and 3 from 60 until 180.
    assert with_allocation({0: 2, 120: 6}, {0: 1, 60: 3}, 180) == {0: 3, 60: 5, 120: 9, 180: 6}


def value_at(mapping: dict[float, int], time: float) -> int:
    """A step function's value at ``time``: its last entry at or before it."""
    return [v for t, v in sorted(mapping.items()) if t <= time][-1]


@pytest.mark.parametrize("seed", range(20))
def test_with_allocation_is_free_plus_held_before_the_end_on_random_profiles(seed):
    rng = random.Random(seed)
    free = {0: rng.randrange(9), **{60 * rng.randrange(1, 30): rng.randrange(9) for _ in range(6)}}
    held = {0: rng.randrange(5), **{60 * rng.randrange(1, 30): rng.randrange(5) for _ in range(4)}}
    end = 60 * rng.randrange(1, 35)
    result = with_allocation(dict(sorted(free.items())), dict(sorted(held.items())), end)
    assert list(result) == sorted(result)
    for t in range(0, 60 * 36, 30):
        expected = value_at(free, t) + (value_at(held, t) if t < end else 0)
        assert value_at(result, t) == expected, t


def test_a_later_deadline_job_runs_on_a_smaller_level_until_more_is_free():
    """2 GPUs. A (600 iterations, deadline 600) comes first: level 1 covers it from 0, so it holds
    1 GPU until 600. B (1,000 iterations, deadline 900, aligned deadline 900): level 1 covers
    300 + 600 = 900 < 1,000 backward from 900; level 2 covers 2 x 300 (600-900) + 1 x 600 (0-600,
    1 free) = 1,200, so B runs on what is free of level 2: 1 GPU until 600 (600 iterations), then
    2 until its last 400 are done, 200 s later: real end 800, aligned end 600 + 240 = 840. Its
    current count alone (1 GPU) would plan it to end at 1,000, past its deadline."""
    planner = ArtifactPlanner(0.0, 2, 60.0)
    a, b = planned("a", 600, 600), planned("b", 1000, 900)
    assert planner.plan_all([a, b])
    assert (a.gpus, a.allocation, a.real_end, a.end) == (1, {0.0: 1}, 600, 600)
    assert (b.gpus, b.allocation, b.real_end, b.end) == (1, {0.0: 1, 600.0: 2}, 800, 840)
    assert planner.hand_out([a, b]) == [a, b]  # nothing free now: no change


def test_a_job_no_level_satisfies_runs_on_the_last_level_past_its_deadline():
    """2 GPUs, 1,000 iterations by 300: level 2 covers only 600. The job runs on 2 GPUs until
    the aligned deadline 300 (600 iterations), then on what is free (2) for its last 400: real
    end 300 + 200 = 500, aligned end 540; the plan fails it."""
    planner = ArtifactPlanner(0.0, 2, 60.0)
    late = planned("late", 1000, 300)
    assert not planner.plan_all([late])
    assert (late.gpus, late.allocation, late.real_end, late.end) == (2, {0.0: 2}, 500, 540)


def test_spare_gpus_go_one_level_at_a_time_and_replan_the_job():
    """4 GPUs, one job of 300 iterations by 1,000: its minimum share is 1 GPU (real end 300).
    The 3 spare GPUs raise it to 2 (real end 150, aligned 180; GPU-time 360 against 300) and then
    to 4: real end 75, aligned end 120."""
    planner = ArtifactPlanner(0.0, 4, 60.0)
    solo = planned("solo", 300, 1000)
    planner.plan_all([solo])
    assert (solo.gpus, solo.real_end, solo.end) == (1, 300, 300)
    planner.hand_out([solo])
    assert (solo.gpus, solo.real_end, solo.end) == (4, 75, 120)
    assert planner.free == {0.0: 0, 120.0: 4}


ONE_NODE = ClusterSpec.from_flags(1, 4)


def test_artifact_fidelity_ends_a_job_at_its_end_event_judged_on_its_planned_end():
    """The job above under ``--fidelity artifact``: 4 GPUs at t=0, planned to end at 75; it pays
    2 + 2 (log2 4 + 1) = 8 s at that decision, so it does 67 x 4 = 268 of its 300 iterations by
    75 and no more; its end event is the end of its slot, 120, plus the 8 s: 128. It ends there,
    its deadline met on the planned 75. The sound behaviour finishes it at 75 (a first start is
    free)."""
    trace = [job("solo", 0.0, 300, deadline=1000.0)]
    policy, config = configure("elasticflow", "artifact", SimConfig())
    (outcome,) = simulate(ONE_NODE, TABLES, policy, trace, config).outcomes
    assert (outcome.finish_s, outcome.judged_s, outcome.met_deadline) == (128.0, 75.0, True)
    policy, config = configure("elasticflow", "sound", SimConfig())
    (outcome,) = simulate(ONE_NODE, TABLES, policy, trace, config).outcomes
    assert (outcome.finish_s, outcome.met_deadline) == (pytest.approx(75.0), True)


def test_artifact_planner_declines_the_arrivals_of_one_slot_together():
    """A runs from t=0; B (feasible) and C (100,000 iterations by 100, never feasible) arrive
    within its slot and are judged together at 60: the artifact declines both. The sound policy
    admits B alone."""
    trace = [
        job("a", 0.0, 300, deadline=1000.0),
        job("b", 10.0, 100, deadline=2000.0),
        job("c", 20.0, 100_000, deadline=100.0),
    ]
    policy, config = configure("elasticflow", "artifact", SimConfig())
    declined = {
        o.job_id for o in simulate(ONE_NODE, TABLES, policy, trace, config).outcomes if o.declined
    }
    assert declined == {"b", "c"}
    policy, config = configure("elasticflow", "sound", SimConfig())
    declined = {
        o.job_id for o in simulate(ONE_NODE, TABLES, policy, trace, config).outcomes if o.declined
    }
    assert declined == {"c"}


def test_unknown_planner_is_refused():
    with pytest.raises(ValueError, match="planner"):
        create_policy("elasticflow", planner="mine")
    with pytest.raises(ValueError, match="slot_s"):
        create_policy("elasticflow", planner="artifact", slot_s=0.0)


def test_artifact_planner_gives_a_job_without_deadline_what_the_plan_leaves():
    """The deadline job's minimum share is 1 GPU, raised to 4 by the spare hand-out; the job
    without a deadline, arrived in the same slot, gets GPUs once the deadline job is done."""
    trace = [job("due", 0.0, 300, deadline=1000.0), job("free", 10.0, 100)]
    policy, config = configure("elasticflow", "artifact", SimConfig())
    outcomes = {o.job_id: o for o in simulate(ONE_NODE, TABLES, policy, trace, config).outcomes}
    assert outcomes["due"].met_deadline
    assert outcomes["free"].finish_s is not None and not outcomes["free"].declined
