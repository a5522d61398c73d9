"""bench/train_and_serve.py: the mixed trace's days, its training deadlines, and the nodes."""

from __future__ import annotations

import pytest

from bench_scripts import bench_script
from qosched.cluster.pods.nodes import GpuNode, PodCluster
from qosched.cluster.pods.trace import Pod
from qosched.cluster.pods.workloads import RateSeries, ServiceSpec, TrainingSpec
from qosched.core.goals import Goal

DAY = 86400.0


@pytest.fixture(scope="module")
def bench():
    with bench_script("train_and_serve") as module:
        yield module


def test_the_days_kept_start_at_zero(bench) -> None:
    pods = [Pod("early", 1, 1, 1, 1000, creation_s=0.5 * DAY, deletion_s=2 * DAY),
            Pod("in", 1, 1, 1, 1000, creation_s=1.5 * DAY, deletion_s=4 * DAY),
            Pod("late", 1, 1, 1, 1000, creation_s=2.0 * DAY)]  # fmt: skip
    (kept,) = bench.days_of(pods, 1, 1)
    assert (kept.pod_id, kept.creation_s, kept.deletion_s) == ("in", 0.5 * DAY, 3 * DAY)


def test_training_deadlines_are_drawn_per_pod_within_the_tightness(bench) -> None:
    service = ServiceSpec("resnet50", RateSeries.constant(5), Goal("p99_slowdown", 1.5), 1)
    pods = [
        Pod(
            f"t{i}",
            1,
            1,
            1,
            1000,
            creation_s=100.0 * i,
            workload=TrainingSpec("resnet50", 1000.0, None, 0),
        )
        for i in range(20)
    ]
    pods.append(Pod("s", 1, 1, 1, 500, creation_s=3.0, workload=service))  # fmt: skip
    out = bench.with_deadlines(pods, (1.0, 2.0), seed=5)
    for pod in out[:-1]:
        assert pod.creation_s + 1000 <= pod.workload.deadline_s <= pod.creation_s + 2000
    assert len({p.workload.deadline_s - p.creation_s for p in out[:-1]}) == 20
    assert out[-1] == pods[-1]  # a service has no deadline
    again = {p.pod_id: p for p in bench.with_deadlines(pods[::-1], (1.0, 2.0), seed=5)}
    assert all(again[p.pod_id] == p for p in out)


def test_the_nodes_are_drawn_among_the_gpu_nodes(bench) -> None:
    nodes = tuple(GpuNode(f"n{i}", 1000, 1000, i % 3, "G" if i % 3 else "") for i in range(9))
    chosen = bench.sample_nodes(PodCluster(nodes), 4, seed=1)
    assert len(chosen.nodes) == 4 and all(n.gpus for n in chosen.nodes)
    assert [n.name for n in chosen.nodes] == sorted((n.name for n in chosen.nodes),
                                                    key=lambda name: int(name[1:]))  # fmt: skip
    with pytest.raises(SystemExit, match="has 6 GPU nodes"):
        bench.sample_nodes(PodCluster(nodes), 7, seed=1)
