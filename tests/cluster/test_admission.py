"""The admission rule both real backends apply, on the real policies.

Model ``m`` runs ``g`` iterations/s on ``g`` workers of a 4-worker node: 400 iterations take
100 s on all four, so a deadline 1,000 s away is easy and one 10 s away is impossible.
"""

from __future__ import annotations

import pytest
from cluster_helpers import job

from qosched.cluster.admission import Admission, admit_job
from qosched.cluster.policies import create_policy, policy_names
from qosched.cluster.spec import ClusterSpec
from qosched.cluster.state import ClusterView, JobState
from qosched.cluster.throughput import ThroughputModel

TABLES = ThroughputModel({"m": {64: {1: 1.0, 2: 2.0, 4: 4.0}}})
NODE = ClusterSpec.from_flags(1, 4)


def arriving(deadline: float | None) -> JobState:
    spec = job("j", 0.0, 400, workers=4, deadline=deadline)
    return JobState(spec, TABLES.curve("m", 64))


def decide(policy_name: str, deadline: float | None, best_effort: bool = False) -> Admission:
    view = ClusterView(0.0, NODE, [], 0.0)
    return admit_job(create_policy(policy_name), arriving(deadline), view, best_effort=best_effort)


@pytest.mark.parametrize(
    ("deadline", "best_effort", "expected"),
    [
        (1000.0, False, Admission.GUARANTEED),
        (1000.0, True, Admission.GUARANTEED),
        (10.0, False, Admission.DECLINED),
        (10.0, True, Admission.BEST_EFFORT),
        (None, False, Admission.BEST_EFFORT),
    ],
    ids=["feasible", "feasible-best-effort", "impossible", "impossible-best-effort", "no-deadline"],
)
def test_qos_promises_deadlines(deadline, best_effort, expected):
    assert decide("qos", deadline, best_effort) is expected


@pytest.mark.parametrize(
    ("planner", "deadline", "expected"),
    [
        ("qosched", 1000.0, Admission.GUARANTEED),
        ("qosched", 10.0, Admission.DECLINED),
        ("artifact", 1000.0, Admission.GUARANTEED),
        ("artifact", 10.0, Admission.DECLINED),
        ("qosched", None, Admission.BEST_EFFORT),
    ],
)
def test_elasticflow_guarantees_the_deadline_jobs_it_admits(planner, deadline, expected):
    # Its admission control is the guarantee: a deadline job is admitted only when its plan
    # meets the deadline (100 s of work on the whole node against 1,000 s, or 10 s).
    policy = create_policy("elasticflow", planner=planner)
    view = ClusterView(0.0, NODE, [], 0.0)
    assert admit_job(policy, arriving(deadline), view, best_effort=False) is expected
    assert policy.is_guaranteed("j") is (expected is Admission.GUARANTEED)


@pytest.mark.parametrize("deadline", [1000.0, 10.0, None], ids=["easy", "impossible", "none"])
def test_a_policy_that_promises_nothing_runs_every_job_best_effort(deadline):
    assert decide("fifo", deadline) is Admission.BEST_EFFORT


@pytest.mark.parametrize("name", policy_names())
def test_every_policy_answers_what_a_backend_asks(name):
    policy = create_policy(name)
    state = arriving(1000.0)
    admission = admit_job(policy, state, ClusterView(0.0, NODE, [], 0.0), best_effort=False)
    assert admission in set(Admission)
    if not policy.promises_deadlines:
        assert policy.is_guaranteed("j") is False
        assert admission is not Admission.GUARANTEED
    predictor = policy.predictor_of("j")
    assert predictor is None or predictor.predict(2).rate > 0
