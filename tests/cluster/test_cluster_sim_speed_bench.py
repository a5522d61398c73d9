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
