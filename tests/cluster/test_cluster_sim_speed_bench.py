"""bench/cluster_sim_speed.py split: timing a policy's calls leaves the simulation unchanged."""

import pytest

from bench_scripts import bench_script
from qosched.cluster.generate import GeneratorConfig, generate_trace
from qosched.cluster.policies import create_policy
from qosched.cluster.simulator import ClusterSimulator
from qosched.cluster.spec import ClusterSpec


@pytest.fixture(scope="module")
def speed():
    with bench_script("cluster_sim_speed") as module:
        yield module


@pytest.mark.parametrize("policy", ["qos", "elasticflow", "edf"])
def test_a_timed_policy_decides_as_the_policy_itself(speed, policy):
    cluster = ClusterSpec.from_flags(4, 8)
    trace = generate_trace(GeneratorConfig(jobs=60, load=2.0, cluster_workers=32, seed=3), speed.TP)
    plain = ClusterSimulator(cluster, speed.TP, create_policy(policy), trace).run()
    timed_policy = speed._TimedPolicy(create_policy(policy))
    timed = ClusterSimulator(cluster, speed.TP, timed_policy, trace).run()
    assert timed.outcomes == plain.outcomes
    assert timed.decisions == plain.decisions == timed_policy.decisions
    assert timed.policy == policy
    # no decision sees more jobs than the trace holds
    assert 0 < timed_policy.active_jobs <= 60 * timed_policy.decisions
    assert timed_policy.cpu_s > 0.0


def test_qos_timed_by_step_decides_as_qos_and_times_every_step(speed):
    """qos-steps: the timed qos is driven natively, as qos is, with the same outcomes; each step
    of a decision and admission is timed."""
    cluster = ClusterSpec.from_flags(4, 8)
    trace = generate_trace(GeneratorConfig(jobs=60, load=2.0, cluster_workers=32, seed=3), speed.TP)
    plain = ClusterSimulator(cluster, speed.TP, create_policy("qos"), trace).run()
    spent = dict.fromkeys(speed.QOS_STEPS, 0.0)
    timed = ClusterSimulator(cluster, speed.TP, speed._timed_qos(spent), trace).run()
    assert timed.outcomes == plain.outcomes
    assert timed.decisions == plain.decisions
    for step in ("admit", "_observe_all", "_renew_guarantees", "_decision"):
        assert spent[step] > 0.0, step
