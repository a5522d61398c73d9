"""Each pod placement policy's choice on one 3-node example, computed by hand from the scores
of the paper's simulator (``hkust-adsl/kubernetes-scheduler-simulator``'s score plug-ins)."""

from __future__ import annotations

import pytest

from qosched.cluster.pods.fragmentation import NodeState, TaskMix, TaskShape
from qosched.cluster.pods.policies import create_pod_policy, pod_policy_names
from qosched.core.errors import InputError

#: The pod: 4 cores and half a GPU.
POD = TaskShape(4000, 1, 500)
#: A: an idle 4-GPU node; B: a 4-GPU node with one GPU 600 free, holding a shared-GPU pod and
#: a one-GPU pod; C: a 2-GPU node with 6 cores and one GPU 800 free, holding a shared-GPU pod.
NODES = {
    "A": (NodeState("G", 32000, (1000, 1000, 1000, 1000)), frozenset()),
    "B": (NodeState("G", 20000, (1000, 1000, 1000, 600)), frozenset({"share", "1-gpu"})),
    "C": (NodeState("G", 6000, (1000, 800)), frozenset({"share"})),
}
#: FGD's workload: half the tasks ask 2 cores and half a GPU, half 1 core and a whole GPU.
WORKLOAD = TaskMix(((TaskShape(2000, 1, 500), 0.5), (TaskShape(1000, 1, 1000), 0.5)))


def scores(name: str) -> dict[str, int]:
    policy = create_pod_policy(name, WORKLOAD)
    return {key: policy.score(node, tags, POD)[0] for key, (node, tags) in NODES.items()}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # 100 x (1 - (0.5 (cpu left - 4000) / 128000 + 0.5 (GPU left - 500) / 8000)):
        # A 1 - (0.109375 + 0.21875) = 67.2; B 1 - (0.0625 + 0.19375) = 74.4;
        # C 1 - (0.0078125 + 0.08125) = 91.1.
        ("best-fit", {"A": 67, "B": 74, "C": 91}),
        # 100 x (1 - (cpu/128000 x 4000/128000 + GPU/8000 x 500/8000) / 2):
        # A 0.25 x 0.03125 + 0.5 x 0.0625 = 0.0390625 -> 98.0; B 0.15625 x 0.03125 + 0.45 x
        # 0.0625 = 0.0330 -> 98.3; C 0.046875 x 0.03125 + 0.225 x 0.0625 = 0.0155 -> 99.2.
        ("dot-product", {"A": 98, "B": 98, "C": 99}),
        # A idle: max(33 - 4 free GPUs, 4) = 29; B: the 600 GPU fits, 100 - 60 // 10 = 94;
        # C: the 800 GPU fits, 100 - 80 // 10 = 92.
        ("gpu-packing", {"A": 29, "B": 94, "C": 92}),
        # 25 x (8000 - GPU left) // 8000 plus: A idle 25 (+12); B holds "share" among two
        # kinds 50 (+13); C holds only "share" 75 (+19).
        ("gpu-clustering", {"A": 37, "B": 63, "C": 94}),
        # F = 0.5 F(2 cores, 500) + 0.5 F(1 core, 1000), 100 x sigmoid((before - after)/1000):
        # A 0 -> 0.5 x 500 = 250: sigmoid(-0.25) = 0.438; B 0.5 x 600 = 300 -> (600 GPU
        # taken, 100 left) 0.5 x 100 + 0.5 x 100 = 100: sigmoid(0.2) = 0.550; C 0.5 x 800 =
        # 400 -> (800 GPU taken, 300 left, 2 cores) 0.5 x 300 + 0.5 x 300 = 300:
        # sigmoid(0.1) = 0.525.
        ("fgd", {"A": 43, "B": 54, "C": 52}),
        ("random-fit", {"A": 0, "B": 0, "C": 0}),
    ],
)
def test_scores_on_three_nodes(name: str, expected: dict[str, int]) -> None:
    assert scores(name) == expected


@pytest.mark.parametrize(
    ("name", "choice"),
    [
        ("best-fit", "C"),
        ("dot-product", "C"),
        ("gpu-packing", "B"),
        ("gpu-clustering", "C"),
        ("fgd", "B"),
    ],
)
def test_choice_on_three_nodes(name: str, choice: str) -> None:
    got = scores(name)
    assert max(got, key=got.__getitem__) == choice
    assert sorted(got.values())[-1] > sorted(got.values())[-2]  # no tie to break


def test_fgd_takes_the_gpu_that_shrinks_fragmentation() -> None:
    policy = create_pod_policy("fgd", WORKLOAD)
    node, tags = NODES["B"]
    # The 600 GPU (index 3 of the largest-first list), not an idle one (score 43).
    assert policy.score(node, tags, POD) == (54, 3)


@pytest.mark.parametrize(
    ("name", "gpu"),
    [("best-fit", 1), ("dot-product", 1), ("gpu-packing", 1), ("gpu-clustering", 1)],
)
def test_baselines_take_the_best_fitting_gpu(name: str, gpu: int) -> None:
    node, tags = NODES["C"]
    assert create_pod_policy(name, WORKLOAD).score(node, tags, POD)[1] == gpu


def test_the_registry_holds_fgd_and_its_baselines() -> None:
    assert set(pod_policy_names()) >= {
        "fgd",
        "best-fit",
        "dot-product",
        "gpu-packing",
        "gpu-clustering",
        "random-fit",
    }


def test_an_unknown_policy_lists_the_known_ones() -> None:
    with pytest.raises(InputError, match="known policies: fgd, best-fit"):
        create_pod_policy("tetris", WORKLOAD)


@pytest.mark.parametrize("name", sorted(pod_policy_names()))
def test_every_policy_scores_a_cpu_only_pod_and_a_whole_gpu_pod(name: str) -> None:
    policy = create_pod_policy(name, WORKLOAD)
    node, tags = NODES["A"]
    for task in (TaskShape(1000, 0, 0), TaskShape(1000, 2, 1000)):
        score, gpu = policy.score(node, tags, task)
        assert 0 <= score <= 100
        assert gpu is None  # whole GPUs are all alike
