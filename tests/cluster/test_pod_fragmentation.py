"""The fragmentation measure against hand computations from the paper's definition (Weng et
al., ATC'23, §4): F_n(m) is the node's free GPU share task m cannot use, F_n(M) its expectation
over the workload."""

from __future__ import annotations

import pytest

from qosched.cluster.pods.fragmentation import (
    FragmentationMeter,
    NodeState,
    TaskMix,
    TaskShape,
    node_fragmentation,
    task_fragmentation,
)
from qosched.cluster.pods.trace import Pod

#: A T4 node with 4 cores free, one GPU idle and one with 300 thousandths free.
NODE = NodeState("T4", 4000, (1000, 300))


@pytest.mark.parametrize(
    ("task", "expected"),
    [
        # Fits (GPU 0 has 500 free, 4 cores >= 2): only GPU 1's 300 is too small for it.
        (TaskShape(2000, 1, 500), 300),
        # GPU 1's 300 is exactly enough: nothing is a fragment.
        (TaskShape(1000, 1, 300), 0),
        (TaskShape(1000, 1, 301), 300),
        (TaskShape(1000, 1, 200), 0),
        # Too little CPU: every free share is a fragment for it.
        (TaskShape(8000, 1, 500), 1300),
        # Two whole GPUs: only one is idle.
        (TaskShape(1000, 2, 1000), 1300),
        # One whole GPU fits: GPU 1's 300 cannot serve it.
        (TaskShape(1000, 1, 1000), 300),
        # A CPU-only task uses no GPU: all of it is a fragment.
        (TaskShape(1000, 0, 0), 1300),
        # A task bound to another GPU type.
        (TaskShape(1000, 1, 100, ("V100M16", "V100M32")), 1300),
        (TaskShape(1000, 1, 100, ("T4",)), 0),
    ],
    ids=[
        "fits-small-gpu-left-over",
        "exact-fit",
        "one-over",
        "fits-both",
        "lacks-cpu",
        "lacks-gpus",
        "whole-gpu",
        "cpu-only",
        "other-gpu-type",
        "its-gpu-type",
    ],
)
def test_task_fragmentation(task: TaskShape, expected: int) -> None:
    assert task_fragmentation(NODE, task) == expected


def test_node_fragmentation_is_the_expectation_over_the_workload() -> None:
    workload = TaskMix(
        (
            (TaskShape(2000, 1, 500), 0.5),  # 300 by hand
            (TaskShape(8000, 1, 1000), 0.3),  # lacks CPU: 1300
            (TaskShape(1000, 0, 0), 0.2),  # CPU-only: 1300
        )
    )
    # 0.5 * 300 + 0.3 * 1300 + 0.2 * 1300 = 150 + 390 + 260
    assert node_fragmentation(NODE, workload) == pytest.approx(800.0)
    assert FragmentationMeter(workload)(NODE) == pytest.approx(800.0)


def test_a_node_with_no_free_gpu_has_no_fragment() -> None:
    workload = TaskMix(((TaskShape(1000, 0, 0), 1.0),))
    assert node_fragmentation(NodeState("T4", 0, (0, 0)), workload) == 0.0


def _pod(name: str, cpu: int, gpus: int, milli: int) -> Pod:
    return Pod(name, cpu, 1024, gpus, milli)


def test_typical_tasks_cover_the_share_of_pods_asked_most_frequent_first() -> None:
    pods = (
        [_pod(f"a{i}", 4000, 1, 500) for i in range(5)]
        + [_pod(f"b{i}", 8000, 1, 1000) for i in range(3)]
        + [_pod("c", 2000, 0, 0), _pod("d", 6000, 2, 1000)]
    )
    # 80% of 10 pods: a (5) and b (3) reach 8; their frequencies scaled to sum to 1.
    assert TaskMix.typical(pods, coverage=0.8).tasks == (
        (TaskShape(4000, 1, 500), 5 / 8),
        (TaskShape(8000, 1, 1000), 3 / 8),
    )
    # 95%: 9.5 pods; c and d are as frequent, the larger request (d's 6 cores) comes first.
    shapes = [shape for shape, _ in TaskMix.typical(pods, coverage=0.95).tasks]
    assert shapes == [
        TaskShape(4000, 1, 500),
        TaskShape(8000, 1, 1000),
        TaskShape(6000, 2, 1000),
        TaskShape(2000, 0, 0),
    ]


def test_a_workload_refuses_probabilities_not_summing_to_one() -> None:
    with pytest.raises(ValueError, match="sum to 1"):
        TaskMix(((TaskShape(1000, 0, 0), 0.5),))
