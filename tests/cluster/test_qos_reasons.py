"""Why qos changed each job's count, as its decisions say it (``Decision.reasons``): the step
of the decision that gave the count, and the worker refused for gaining less than
``min_spare_gain``. Hand-computed on one 4-GPU node, no restart pauses.

The flat table runs 1, 1.5 and 2 iterations/s on 1, 2 and 4 GPUs: a second GPU adds
(1.5 / 1 - 1) / 1 = 0.50 of the speed on one, two more add (2 / 1.5 - 1) / 2 = 0.17 each of the
speed on two, and three more than one add (2 / 1 - 1) / 3 = 0.33 each.
"""

from __future__ import annotations

import pytest
from cluster_helpers import job

from qosched.cluster.policies import create_policy
from qosched.cluster.policies.qos import QualityOfService
from qosched.cluster.spec import ClusterSpec
from qosched.cluster.state import ClusterView, JobState
from qosched.cluster.throughput import ThroughputModel

ONE_NODE = ClusterSpec.from_flags(1, 4)
FLAT = ThroughputModel({"m": {64: {1: 1.0, 2: 1.5, 4: 2.0}}})


def flat(job_id: str, iterations: int, deadline: float | None, held: int = 0) -> JobState:
    state = JobState(job(job_id, 0.0, iterations, deadline=deadline), FLAT.curve("m", 64))
    state.workers = held
    if held:
        state.started_s = 0.0
    return state


def admitted(policy: QualityOfService, *jobs: JobState) -> ClusterView:
    """Admit ``jobs`` one by one at t=0, as a backend does; the view of all of them."""
    for index, state in enumerate(jobs):
        assert policy.admit(state, ClusterView(0.0, ONE_NODE, jobs[:index], 0.0))
    return ClusterView(0.0, ONE_NODE, jobs, 0.0)


@pytest.mark.parametrize(
    ("min_spare_gain", "count", "reason"),
    [
        # 1 -> 2 gains 0.50 >= 0.4: handed out; 2 -> 4 gains 0.17 each, and so do the two it
        # holds beyond 2: refused.
        (
            0.4,
            2,
            "spare workers: each added one adds 0.50 of its speed (min_spare_gain 0.4); "
            "more workers would add only 0.17 of its speed each, below min_spare_gain 0.4",
        ),
        # 1 -> 2 gains 0.50 < 0.6: refused; the three it holds beyond its plan's 1 gain 0.33.
        (
            0.6,
            1,
            "its guaranteed plan needs 1 now; more workers would add only 0.33 of its speed "
            "each, below min_spare_gain 0.6",
        ),
    ],
)
def test_a_guaranteed_job_given_back_workers_says_the_gain_below_min_spare_gain(
    min_spare_gain, count, reason
):
    # 400 iterations by 1000 s: one GPU (400 s even at the pessimistic speed) is its plan.
    running = flat("a", 400, 1000.0, held=4)
    policy = QualityOfService(min_spare_gain=min_spare_gain)
    decision = policy.allocate(admitted(policy, running))
    assert policy.is_guaranteed("a")
    assert dict(decision.workers) == {"a": count}
    assert decision.reasons == {"a": reason}


def test_a_job_left_without_workers_says_where_they_went():
    # "g" (4000 iterations by 2100 s) needs all 4 GPUs now (2 it/s: 2000 s); "be", running
    # best effort on 2, is left none.
    guaranteed = flat("g", 4000, 2100.0)
    best_effort = flat("be", 4000, None, held=2)
    policy = QualityOfService()
    view = admitted(policy, best_effort, guaranteed)
    decision = policy.allocate(view)
    assert dict(decision.workers) == {"g": 4}
    assert decision.reasons == {
        "g": "its guaranteed plan needs 4 now",
        "be": "no worker is left for it: 4 of 4 go to guaranteed jobs, the rest to jobs ahead "
        "of it",
    }


def test_an_unchanged_job_gets_no_reason_and_a_policy_that_says_none_gives_none():
    running = flat("a", 400, None, held=4)
    policy = QualityOfService()
    assert policy.allocate(admitted(policy, running)).reasons == {}
    fifo = create_policy("fifo")
    waiting = flat("b", 400, None)
    assert dict(fifo.allocate(ClusterView(0.0, ONE_NODE, (waiting,), 0.0)).workers) == {"b": 1}
    assert fifo.allocate(ClusterView(0.0, ONE_NODE, (waiting,), 0.0)).reasons == {}


def test_a_plan_moved_by_a_re_read_speed_says_the_speed_it_now_expects():
    # The linear table: g iterations/s on g GPUs. "a" (1,000 iterations by 700 s) is planned on
    # 2 GPUs (612 s at the pessimistic 1.63 it/s), but runs 1.3 it/s there. Re-read at 10 s
    # (after 10% + 5 s of running), its speed is the table's shape scaled by 1.3 / 2: 2.6 it/s
    # on 4 GPUs, and only 4 finish its 987 iterations left within the 690 s left.
    linear = ThroughputModel({"m": {64: {1: 1.0, 2: 2.0, 4: 4.0}}})
    running = JobState(job("a", 0.0, 1000, deadline=700.0), linear.curve("m", 64))
    policy = QualityOfService(refresh_s=5.0, min_spare_gain=0.9)
    view = admitted(policy, running)
    assert dict(policy.allocate(view).workers) == {"a": 2}
    running.workers, running.started_s = 2, 0.0
    running.active_s, running.iterations_done = 10.0, 13.0
    decision = policy.allocate(ClusterView(10.0, ONE_NODE, (running,), 0.0))
    assert dict(decision.workers) == {"a": 4}
    assert decision.reasons == {
        "a": "its guaranteed plan needs 4 now; its speed was re-read from its progress: 2.6 "
        "iterations/s expected on 4"
    }
