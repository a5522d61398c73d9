"""The admission rule both real backends apply, on the real policies.

Model ``m`` runs ``g`` iterations/s on ``g`` workers of a 4-worker node: 400 iterations take
100 s on all four, so a deadline 1,000 s away is easy and one 10 s away is impossible.
"""

from __future__ import annotations

import pytest
from cluster_helpers import job

from qosched.cluster.admission import (
    DEADLINE_STEP_S,
    MAX_PROBES,
    Admission,
    admit_job,
    earliest_deadline_s,
    probe_admission,
)
from qosched.cluster.policies import create_policy, policy_names
from qosched.cluster.spec import ClusterSpec
from qosched.cluster.state import ClusterView, JobState
from qosched.cluster.throughput import ThroughputModel

TABLES = ThroughputModel({"m": {64: {1: 1.0, 2: 2.0, 4: 4.0}}})
NODE = ClusterSpec.from_flags(1, 4)


def arriving(deadline: float | None, job_id: str = "j") -> JobState:
    spec = job(job_id, 0.0, 400, workers=4, deadline=deadline)
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


# -- asking hypothetically ------------------------------------------------------------------------


@pytest.mark.parametrize("name", policy_names())
def test_every_policy_can_be_asked_hypothetically_without_changing(name):
    policy = create_policy(name)
    view = ClusterView(0.0, NODE, [], 0.0)
    expected = admit_job(create_policy(name), arriving(1000.0), view, best_effort=False)
    assert probe_admission(policy, arriving(1000.0), view, best_effort=False) is expected
    assert policy.is_guaranteed("j") is False  # the copy guaranteed it, not the policy


def test_a_probe_is_judged_against_the_jobs_in_the_view():
    # 400 iterations take 100 s on all four workers: two such jobs cannot both meet 110 s.
    policy = create_policy("qos")
    alone = ClusterView(0.0, NODE, [], 0.0)
    assert (
        probe_admission(policy, arriving(110.0), alone, best_effort=False) is Admission.GUARANTEED
    )
    assert admit_job(policy, arriving(110.0), alone, best_effort=False) is Admission.GUARANTEED
    crowded = ClusterView(0.0, NODE, [arriving(110.0)], 0.0)
    second = probe_admission(policy, arriving(110.0, "k"), crowded, best_effort=False)
    assert second is Admission.DECLINED
    assert policy.is_guaranteed("j") and not policy.is_guaranteed("k")


@pytest.mark.parametrize("threshold", [0.5, 7.0, 500.003, 1234.5, 30 * 86400.0])
@pytest.mark.parametrize("fails_within", [0.0, 0.4], ids=["from-0", "known-lower"])
def test_the_earliest_deadline_is_within_the_stated_precision(threshold, fails_within):
    asked: list[float] = []

    def holds(seconds: float) -> bool:
        asked.append(seconds)
        return seconds >= threshold

    found = earliest_deadline_s(holds, fails_within_s=fails_within * threshold)
    assert found is not None and found in asked
    assert found % DEADLINE_STEP_S == 0
    assert threshold <= found <= threshold + max(DEADLINE_STEP_S, 0.01 * found)
    assert len(asked) <= MAX_PROBES
    assert min(asked) > fails_within * threshold - DEADLINE_STEP_S  # no window known to fail


def test_a_deadline_nothing_meets_is_none_after_bounded_tries():
    asked: list[float] = []
    found = earliest_deadline_s(lambda s: asked.append(s) or False, horizon_s=10 * 86400)
    assert found is None
    assert 1 <= len(asked) <= MAX_PROBES


def test_the_search_stops_when_its_time_is_spent():
    ticks = iter(range(100))  # a clock that moves one second per reading
    found = earliest_deadline_s(lambda s: False, budget_s=3.0, clock=lambda: float(next(ticks)))
    assert found is None
    assert next(ticks) < 10
