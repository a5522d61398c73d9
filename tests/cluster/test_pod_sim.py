"""The pod placement simulation: placements, failures and unallocated GPUs computed by hand on
small clusters; ties broken by the seeded node order; the workload-inflation arrivals."""

from __future__ import annotations

import pytest

from qosched.cluster.pods.fragmentation import TaskMix, TaskShape
from qosched.cluster.pods.nodes import GpuNode, PodCluster
from qosched.cluster.pods.policies import create_pod_policy
from qosched.cluster.pods.sim import inflate, place_pods
from qosched.cluster.pods.trace import Pod

WORKLOAD = TaskMix(((TaskShape(1000, 1, 600), 1.0),))


def pod(name: str, gpus: int, milli: int, cpu: int = 1000, memory: int = 100) -> Pod:
    return Pod(name, cpu, memory, gpus, milli)


def test_best_fit_run_by_hand() -> None:
    # n1: 2 GPUs; n2: 1 GPU; 8 cores and 1000 MiB each: 3 GPUs in all.
    cluster = PodCluster((GpuNode("n1", 8000, 1000, 2, "G"), GpuNode("n2", 8000, 1000, 1, "G")))
    pods = [pod("p1", 1, 600), pod("p2", 1, 600), pod("p3", 2, 1000), pod("p4", 0, 0)]
    run = place_pods(cluster, pods, create_pod_policy("best-fit", WORKLOAD))
    # p1: best fit is n2 (0.5 x 7000/128000 + 0.5 x 400/8000 left over, against n1's
    # 0.5 x 7000/128000 + 0.5 x 1400/8000). p2: n2's 400 is too small: n1. p3: n1 has one
    # idle GPU only: fails. p4 asks no GPU: placed.
    assert (run.placed, run.failed, run.failed_gpu_pods, run.first_failure) == (3, 1, 1, 2)
    assert run.arrived_curve == pytest.approx((0.6, 1.2, 3.2, 3.2))
    assert run.allocated_curve == pytest.approx((0.6, 1.2, 1.2, 1.2))
    assert run.unallocated_gpus == pytest.approx(1.8)
    assert run.unallocated_gpus_at_first_failure == pytest.approx(1.8)
    # Levels of arrived workload (x 3 GPUs): before any pod, all 3 are unallocated.
    assert run.unallocated_at(0.1) == pytest.approx(3.0)
    assert run.unallocated_at(0.2) == pytest.approx(2.4)
    assert run.unallocated_at(0.4) == pytest.approx(1.8)
    assert run.unallocated_at(2.0) == pytest.approx(1.8)
    # Fragmentation at the end for the workload "1 core, 600 of a GPU": n1 (1000, 400) can
    # take it, its 400 cannot; n2 (400) cannot take it at all: 400 + 400 thousandths.
    assert run.fragmented_gpus == pytest.approx(0.8)
    assert run.placements == ("n2", "n1", None, run.placements[3])


def test_a_pod_never_goes_where_memory_or_gpu_type_lacks() -> None:
    cluster = PodCluster(
        (GpuNode("small-memory", 8000, 50, 1, "T4"), GpuNode("v100", 8000, 1000, 1, "V100"))
    )
    bound = Pod("bound", 1000, 100, 1, 500, ("T4",))
    run = place_pods(cluster, [bound], create_pod_policy("random-fit", WORKLOAD))
    assert (run.placed, run.failed) == (0, 1)


def test_ties_go_to_the_first_node_of_an_order_drawn_from_the_seed() -> None:
    # GPU packing scores a CPU-only pod 0 on every node: all nodes tie.
    cluster = PodCluster(tuple(GpuNode(f"n{i}", 8000, 1000, 1, "G") for i in range(20)))
    pods = [pod(f"c{i}", 0, 0) for i in range(4)]
    packing = create_pod_policy("gpu-packing", WORKLOAD)
    firsts = set()
    for seed in range(10):
        ordered = place_pods(cluster, pods, packing, seed=seed)
        assert len(set(ordered.placements)) == 1  # the same first node each time
        firsts.add(ordered.placements[0])
    assert len(firsts) > 1  # the order is drawn from the seed
    drawn = [place_pods(cluster, pods, packing, seed=s, tie_break="random") for s in range(10)]
    assert any(len(set(run.placements)) > 1 for run in drawn)
    with pytest.raises(ValueError, match="unknown tie break"):
        place_pods(cluster, pods, packing, tie_break="first")


def test_random_fit_draws_its_node_whatever_the_tie_break() -> None:
    cluster = PodCluster(tuple(GpuNode(f"n{i}", 8000, 1000, 1, "G") for i in range(20)))
    pods = [pod(f"c{i}", 0, 0) for i in range(4)]
    runs = [place_pods(cluster, pods, create_pod_policy("random-fit", WORKLOAD), seed=s)
            for s in range(5)]  # fmt: skip
    assert all(len(set(run.placements)) > 1 for run in runs)


def test_the_same_seed_gives_the_same_run() -> None:
    cluster = PodCluster(tuple(GpuNode(f"n{i}", 16000, 1000, 2, "G") for i in range(6)))
    pods = [pod(f"p{i}", 1, (i * 137) % 900 + 100) for i in range(30)]
    for name in ("fgd", "random-fit", "best-fit"):
        first = place_pods(cluster, pods, create_pod_policy(name, WORKLOAD), seed=7)
        second = place_pods(cluster, pods, create_pod_policy(name, WORKLOAD), seed=7)
        assert first.placements == second.placements


def test_inflation_shuffles_the_trace_then_draws_until_the_ratio() -> None:
    pods = [pod(f"p{i}", 1, 500) for i in range(10)]  # 5 GPUs asked
    arrivals = inflate(pods, cluster_gpus=4, ratio=1.5, seed=2)  # up to 6 GPUs
    assert sorted(p.pod_id for p in arrivals[:10]) == sorted(p.pod_id for p in pods)
    assert [p.pod_id for p in arrivals[:10]] != [p.pod_id for p in pods]  # shuffled
    assert sum(p.gpu_request_milli for p in arrivals) == 6000  # 2 more half-GPU pods
    assert all("-tuned-" in p.pod_id for p in arrivals[10:])
    assert inflate(pods, 4, 1.5, seed=2) == arrivals
