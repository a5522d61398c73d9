"""ClusterSimulator on a cluster of several GPU types: where gangs land, at what speed, and what
the policies plan on. Every time below is worked out by hand from the tables."""

from __future__ import annotations

import csv
from dataclasses import replace

import pytest
from cluster_helpers import job

from qosched.cluster.generate import GeneratorConfig, generate_trace
from qosched.cluster.gpu_types import TypeSpeeds
from qosched.cluster.metrics import JOB_CSV_HEADER, write_job_csv
from qosched.cluster.placement import Placements
from qosched.cluster.policies import create_policy, policy_names
from qosched.cluster.policies.base import Decision, Policy
from qosched.cluster.simulator import ClusterSimulator, simulate
from qosched.cluster.spec import ClusterSpec
from qosched.cluster.state import ClusterView
from qosched.cluster.throughput import ThroughputModel
from qosched.core.errors import InputError

A100 = ThroughputModel({"m": {64: {1: 2.0, 2: 4.0}}, "n": {64: {1: 4.0}}})
T4 = ThroughputModel({"m": {64: {1: 0.5, 2: 1.0}}})  # no model n: n's T4 speed is by the rule
SPEEDS = TypeSpeeds(A100, "A100", {"T4": T4})
# n on a T4 by the rule: 4.0 / (0.5 * 312/65 + 0.5 * 2039/320) = 4.0 / 5.5859375.
N_ON_T4 = 4.0 / 5.5859375


def mixed(gpus_per_node: int = 1, t4_first: bool = True) -> ClusterSpec:
    """One A100 node and one T4 node; the T4 node first unless told otherwise, so that a job on
    the A100 is there because it is faster, not because it is the first node."""
    groups = (("T4", 1), ("A100", 1)) if t4_first else (("A100", 1), ("T4", 1))
    return ClusterSpec(1, 2, gpus_per_node, gpu_types=groups)


def run(cluster, trace, policy="fifo"):
    result = simulate(cluster, A100, create_policy(policy), trace, type_speeds=SPEEDS)
    return {o.job_id: o for o in result.outcomes}


def test_a_lone_job_lands_on_the_faster_type_and_runs_at_its_speed():
    out = run(mixed(), [job("a", 0.0, 100)])
    assert out["a"].gpu_types == ("A100",)
    assert out["a"].finish_s == pytest.approx(50.0)  # 100 iterations at 2.0/s


def test_the_second_job_takes_the_slower_type_when_the_faster_is_full():
    out = run(mixed(), [job("a", 0.0, 100), job("b", 0.0, 100)])
    assert (out["a"].gpu_types, out["b"].gpu_types) == (("A100",), ("T4",))
    assert out["a"].finish_s == pytest.approx(50.0)
    assert out["b"].finish_s == pytest.approx(200.0)  # the T4 table: 0.5/s


def test_a_job_without_a_table_on_a_type_runs_at_the_rule_s_speed_there():
    out = run(mixed(), [job("a", 0.0, 100), job("b", 0.0, 100, model="n")])
    assert out["b"].gpu_types == ("T4",)
    assert out["b"].finish_s == pytest.approx(100 / N_ON_T4)  # 139.6484375 s


def test_a_job_stays_on_the_slower_type_when_the_faster_frees_up():
    trace = [job("a", 0.0, 100), job("b", 10.0, 100), job("c", 60.0, 100)]
    out = run(mixed(), trace)
    assert out["b"].gpu_types == ("T4",)
    assert out["b"].finish_s == pytest.approx(210.0)  # 10 + 100 / 0.5
    assert out["c"].gpu_types == ("A100",)  # a ended at 50
    assert out["c"].finish_s == pytest.approx(110.0)


def test_a_gang_is_never_split_across_types_and_waits_for_one_type_with_room():
    # Two GPUs per node. a, b on the A100 node; c, d on the T4 node. At 30 one GPU of each
    # type is free (a ended at 5, c at 20): e's two-GPU gang waits until b ends at 50 and
    # frees the A100 node, then runs there at 4.0/s.
    trace = [
        job("a", 0.0, 10),
        job("b", 0.0, 100),
        job("c", 0.0, 10),
        job("d", 0.0, 100),
        job("e", 30.0, 100, workers=2),
    ]
    result = simulate(
        mixed(gpus_per_node=2, t4_first=False),
        A100,
        create_policy("fifo"),
        trace,
        type_speeds=SPEEDS,
    )
    out = {o.job_id: o for o in result.outcomes}
    assert result.displaced == 1  # e at 30, given 2 GPUs by fifo, placed nowhere
    assert [out[j].gpu_types for j in "abcd"] == [("A100",), ("A100",), ("T4",), ("T4",)]
    assert [out[j].finish_s for j in "abcd"] == pytest.approx([5.0, 50.0, 20.0, 200.0])
    assert out["e"].gpu_types == ("A100",)
    assert out["e"].start_s == pytest.approx(50.0)
    assert out["e"].finish_s == pytest.approx(75.0)


class Recording(Policy):
    """Gives every job one worker and remembers the speed curves the view shows it."""

    name = "test-recording"

    def __init__(self) -> None:
        self.seen: dict[str, tuple[float, ...]] = {}

    def allocate(self, view: ClusterView) -> Decision:
        for state in view.jobs:
            self.seen[state.job_id] = state.curve.speeds
        return Decision({state.job_id: 1 for state in view.jobs[:2]})


def test_policies_plan_on_the_slowest_type_s_speed_at_counts_one_type_holds():
    policy = Recording()
    cluster = ClusterSpec(1, 2, 1, gpu_types=(("A100", 1), ("T4", 1)))
    simulate(
        cluster, A100, policy, [job("a", 0.0, 10), job("b", 0.0, 10, model="n")], type_speeds=SPEEDS
    )
    # One GPU per type: 2 GPUs is no count a gang can have, though the cluster has 2.
    assert policy.seen == {"a": (0.0, 0.5), "b": pytest.approx((0.0, N_ON_T4))}


def test_qos_meets_a_deadline_it_promised_on_the_slower_type():
    # A deadline of 250 s for 100 iterations: met on a T4 (200 s), so qos guarantees it; it
    # runs on the A100 and ends at 50.
    out = run(mixed(), [job("a", 0.0, 100, deadline=250.0)], policy="qos")
    assert out["a"].gpu_types == ("A100",)
    assert out["a"].finish_s == pytest.approx(50.0)
    assert out["a"].met_deadline


def test_a_request_no_type_can_hold_is_refused_for_a_policy_that_honours_requests():
    with pytest.raises(InputError, match="job e requests 2 GPUs: more than one GPU type"):
        run(mixed(gpus_per_node=1), [job("e", 0.0, 10, workers=2)])


def test_mixed_cluster_needs_reference_tables_of_a_known_type():
    with pytest.raises(InputError, match="tables of a known GPU type"):
        ClusterSimulator(mixed(), A100, create_policy("fifo"), [job("a", 0.0, 10)])


def test_per_job_csv_names_the_types_only_on_a_mixed_cluster(tmp_path):
    trace = [job("a", 0.0, 100), job("b", 0.0, 100)]
    typed = simulate(mixed(), A100, create_policy("fifo"), trace, type_speeds=SPEEDS)
    write_job_csv(typed, tmp_path / "typed.csv")
    rows = list(csv.reader((tmp_path / "typed.csv").open()))
    assert rows[0] == [*JOB_CSV_HEADER, "gpu_type"]
    assert [row[-1] for row in rows[1:]] == ["A100", "T4"]
    plain = simulate(ClusterSpec(1, 2, 1), A100, create_policy("fifo"), trace)
    write_job_csv(plain, tmp_path / "plain.csv")
    rows = list(csv.reader((tmp_path / "plain.csv").open()))
    assert rows[0] == list(JOB_CSV_HEADER)
    assert all(o.gpu_types == () for o in plain.outcomes)


# --- every registered policy on a mixed cluster ---------------------------------------------------

MIXED_4x8 = ClusterSpec(4, 1, 8, gpu_types=(("T4", 2), ("A100", 2)))
BUNDLED_A100 = ThroughputModel.bundled("A100")


def mixed_trace() -> list:
    config = GeneratorConfig(
        jobs=60, load=1.0, cluster_workers=32, best_effort_fraction=0.2, seed=3
    )
    return generate_trace(config, BUNDLED_A100)


@pytest.mark.parametrize("name", policy_names())
def test_every_policy_runs_one_type_gangs_to_the_end_deterministically(name, monkeypatch):
    groups = [set(nodes) for _, nodes in MIXED_4x8.groups]
    placed: list[tuple[str, tuple]] = []
    record = Placements.set

    def checked_set(self, job_id, placement):
        placed.append((job_id, placement))
        record(self, job_id, placement)

    monkeypatch.setattr(Placements, "set", checked_set)
    trace = mixed_trace()
    first = simulate(MIXED_4x8, BUNDLED_A100, create_policy(name), trace)
    for job_id, placement in placed:
        nodes = {node for node, _ in placement}
        assert not placement or any(nodes <= group for group in groups), (job_id, placement)
    assert any(placement and placement[0][0] >= 2 for _, placement in placed)  # A100s used
    for o in first.outcomes:
        assert o.declined or o.finish_s is not None
        assert o.declined or o.gpu_types  # every job that ran says where
    second = simulate(MIXED_4x8, BUNDLED_A100, create_policy(name), trace)
    assert second.outcomes == first.outcomes


@pytest.mark.parametrize("name", policy_names())
def test_a_cluster_of_one_named_type_runs_as_an_unnamed_one(name):
    trace = mixed_trace()
    typed = simulate(
        ClusterSpec(4, 1, 8, gpu_types=(("A100", 4),)), BUNDLED_A100, create_policy(name), trace
    )
    plain = simulate(ClusterSpec(4, 1, 8), BUNDLED_A100, create_policy(name), trace)
    assert [replace(o, gpu_types=()) for o in typed.outcomes] == list(plain.outcomes)
    assert all(o.gpu_types in {(), ("A100",)} for o in typed.outcomes)
