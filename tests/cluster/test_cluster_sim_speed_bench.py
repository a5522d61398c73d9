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


def _artifact_args(speed, tmp_path, base):
    trace = tmp_path / "philly_103959.csv"
    return speed.argparse.Namespace(
        trace=trace, nodes=32, repeats=2, base=base, peers="ef-accessctrl", fidelity="artifact"
    )


def test_artifact_runs_the_base_tree_alternately_and_prints_its_rows(
    speed, tmp_path, capsys, monkeypatch
):
    base = tmp_path / "main-src"
    calls = []

    def run_command(trace, nodes, policy, fidelity="sound", src=None):
        calls.append((policy, fidelity, src))
        cpu = 2.0 if src == base else 1.0
        return speed.Timed(cpu + 0.5, cpu, cpu, 1597, 0.91)

    monkeypatch.setattr(speed, "run_command", run_command)
    speed.artifact(_artifact_args(speed, tmp_path, base))
    here = speed.Path(speed.__file__).resolve().parent.parent / "src"
    assert [src for _, _, src in calls] == [base, here, base, here]
    assert {(policy, fidelity) for policy, fidelity, _ in calls} == {("elasticflow", "artifact")}
    rows = [line for line in capsys.readouterr().out.splitlines() if "--fidelity" in line]
    # One row per recorded artifact time, for each tree; the ratio against 7.6 s of CPU.
    assert len(rows) == 2 * 3
    assert rows[0].startswith("| base elasticflow --fidelity artifact (ef-accessctrl) |")
    assert "| 2.00 |" in rows[0] and "| 3.8x |" in rows[0]
    assert rows[3].startswith("| elasticflow --fidelity artifact (ef-accessctrl) |")
    assert "| 1.00 |" in rows[3] and "| 7.6x |" in rows[3]


def test_artifact_refuses_trees_whose_outcomes_differ(speed, tmp_path, monkeypatch):
    base = tmp_path / "main-src"

    def run_command(trace, nodes, policy, fidelity="sound", src=None):
        return speed.Timed(1.0, 1.0, 1.0, 1597, 0.90 if src == base else 0.91)

    monkeypatch.setattr(speed, "run_command", run_command)
    with pytest.raises(SystemExit, match="outcomes differ between trees"):
        speed.artifact(_artifact_args(speed, tmp_path, base))
