"""Pod placement policies, registered by name: FGD and the baselines of "Beware of
Fragmentation" (Weng et al., USENIX ATC'23, §6.1), scored as its simulator's score plug-ins
(``hkust-adsl/kubernetes-scheduler-simulator``, ``pkg/simulator/plugin``) score them.

The simulator asks a policy to :meth:`~PodPolicy.score` every node a pod fits on (enough free
CPU, memory and GPU of a type the pod may use); the pod goes to a node of the highest score,
one drawn at random among equals, as the Kubernetes scheduler picks among equal nodes. Scores
are whole numbers in 0..100 as the plug-ins return them, so the ties they make are kept.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Set
from typing import ClassVar

from qosched.cluster.pods.fragmentation import FragmentationMeter, NodeState, TaskMix, TaskShape
from qosched.core.registry import PluginGroup, Registry

MILLI = 1000
#: The normalising capacities of the baselines' scores: the largest node of the trace's cluster
#: (128 cores, 8 GPUs), as the simulator's ``MaxSpecCpu`` and ``MaxSpecGpu``.
MAX_SPEC_CPU = 128_000
MAX_SPEC_GPU = 8_000
MAX_SCORE = 100


class PodPolicy(ABC):
    """Base class of pod placement policies. Built once per run with the workload's typical
    tasks (only FGD uses them)."""

    name: ClassVar[str]
    #: Scores are rescaled to 0..100 over the nodes a pod fits on before the highest is taken
    #: (the scheduler framework's ``NormalizeScore``, in whole numbers).
    normalizes: ClassVar[bool] = False
    #: The policy reads which kinds of pod each node holds (``tags`` of :meth:`score`).
    uses_tags: ClassVar[bool] = False
    #: A pod that shares a GPU goes to a GPU drawn at random among those it fits on, whatever
    #: :meth:`score` returns as the GPU.
    random_gpu: ClassVar[bool] = False
    #: The pod goes to a node drawn at random among the best, whatever the simulator's tie
    #: break (the simulator's ``RandomScore`` draws its node before scoring).
    random_node: ClassVar[bool] = False

    def __init__(self, workload: TaskMix) -> None:
        self.workload = workload

    @abstractmethod
    def score(self, node: NodeState, tags: Set[str], task: TaskShape) -> tuple[int, int | None]:
        """Called for each node ``task`` fits on; the same node state, tags and task always
        get the same answer (the simulator remembers it).

        Returns the node's score (higher is better) and, for a task that shares a GPU, the
        index in ``node.gpu_left`` of the GPU it takes (None otherwise: whole GPUs are all
        alike).
        """


def _conforms(cls: type) -> bool:
    return issubclass(cls, PodPolicy) and not getattr(cls.score, "__isabstractmethod__", False)


_REGISTRY: Registry[PodPolicy] = Registry(
    "pod placement policy",
    PluginGroup("qosched.pod_policies", _conforms, "a subclass of PodPolicy that implements score"),
)
register = _REGISTRY.register


def pod_policy_names() -> tuple[str, ...]:
    return _REGISTRY.names()


def pod_policy_class(name: str) -> type[PodPolicy]:
    """The class registered as ``name``; an unknown name is an InputError listing the known."""
    return _REGISTRY.get(name)


def create_pod_policy(name: str, workload: TaskMix) -> PodPolicy:
    """A new policy by registered name; an unknown name is an InputError listing the known."""
    return _REGISTRY.create(name, workload=workload)


def best_fit_gpu(node: NodeState, task: TaskShape) -> int | None:
    """The GPU with the least free share that still fits a GPU-sharing task (the simulator's
    ``best`` GPU selection), None for other tasks."""
    if not task.shares_gpu:
        return None
    fitting = [i for i, left in enumerate(node.gpu_left) if left >= task.gpu_milli]
    return fitting[-1]  # gpu_left is largest first


def after_placing(node: NodeState, task: TaskShape, gpu: int | None) -> NodeState:
    """The node once ``task`` is placed, on GPU ``gpu`` when it shares one, else on fully free
    GPUs."""
    left = list(node.gpu_left)
    if task.shares_gpu:
        assert gpu is not None
        left[gpu] -= task.gpu_milli
    else:
        taken = 0
        for i, free in enumerate(left):
            if taken == task.num_gpu:
                break
            if free >= task.gpu_milli:
                left[i] -= task.gpu_milli
                taken += 1
    left.sort(reverse=True)
    return NodeState(node.model, node.cpu_left - task.cpu_milli, tuple(left))


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


@register("fgd")
class FragmentationGradientDescent(PodPolicy):
    """FGD: the node (and GPU) whose fragmentation grows least, or shrinks most, with the pod
    placed: score = 100 x sigmoid((F_n(M) before - F_n(M) after) / 1000), truncated."""

    def __init__(self, workload: TaskMix) -> None:
        super().__init__(workload)
        self.meter = FragmentationMeter(workload)

    def score(self, node: NodeState, tags: Set[str], task: TaskShape) -> tuple[int, int | None]:
        before = self.meter(node)
        if not task.shares_gpu:
            after = self.meter(after_placing(node, task, None))
            return int(_sigmoid((before - after) / MILLI) * MAX_SCORE), None
        best, choice, seen = -1, None, set()
        for gpu, left in enumerate(node.gpu_left):
            if left < task.gpu_milli or left in seen:
                continue  # GPUs with the same free share leave the node in the same state
            seen.add(left)
            after = self.meter(after_placing(node, task, gpu))
            value = int(_sigmoid((before - after) / MILLI) * MAX_SCORE)
            if value > best:
                best, choice = value, gpu
        return best, choice


@register("best-fit")
class BestFit(PodPolicy):
    """The node with the least CPU and GPU left over once the pod is placed, each weighed by
    half against the largest node's capacity."""

    normalizes = True

    def score(self, node: NodeState, tags: Set[str], task: TaskShape) -> tuple[int, int | None]:
        left_over = (
            0.5 * (node.cpu_left - task.cpu_milli) / MAX_SPEC_CPU
            + 0.5 * (node.gpu_left_milli - task.gpu_request_milli) / MAX_SPEC_GPU
        )
        return int((1.0 - left_over) * MAX_SCORE), best_fit_gpu(node, task)


@register("dot-product")
class DotProduct(PodPolicy):
    """The node whose free (CPU, GPU) vector has the smallest dot product with the pod's
    request, both scaled by the largest node's capacity (Tetris' alignment, least aligned
    free space first, as the simulator's ``merge``/``max`` variant scores it)."""

    def score(self, node: NodeState, tags: Set[str], task: TaskShape) -> tuple[int, int | None]:
        product = (node.cpu_left / MAX_SPEC_CPU) * (task.cpu_milli / MAX_SPEC_CPU) + (
            node.gpu_left_milli / MAX_SPEC_GPU
        ) * (task.gpu_request_milli / MAX_SPEC_GPU)
        return int(MAX_SCORE * (1.0 - product / 2)), best_fit_gpu(node, task)


@register("gpu-packing")
class GpuPacking(PodPolicy):
    """GPUs in use first: a GPU-sharing pod goes where it fills a partly used GPU best; then to
    a partly used node with free GPUs (fewest whole GPUs taken first); an idle node last."""

    def score(self, node: NodeState, tags: Set[str], task: TaskShape) -> tuple[int, int | None]:
        if task.num_gpu == 0:
            return 0, None
        gpu = best_fit_gpu(node, task)
        free_gpus = sum(1 for left in node.gpu_left if left == MILLI)
        if free_gpus == len(node.gpu_left):
            return max(MAX_SCORE // 3 - free_gpus, free_gpus), gpu
        # The GPUs the pod would take, least free first.
        used = sorted(left for left in node.gpu_left if left >= task.gpu_milli)[: task.num_gpu]
        whole = sum(1 for left in used if left == MILLI)
        if whole:
            return max(MAX_SCORE // 2 - whole, MAX_SCORE // 3), gpu
        free_share = sum(left * 100 // MILLI for left in used)
        return max(MAX_SCORE - free_share // 10, MAX_SCORE // 2), gpu


def gpu_tag(task: TaskShape) -> str | None:
    """The kind of GPU request GPU clustering groups pods by: none, a shared GPU, or N whole."""
    if task.num_gpu == 0:
        return None
    return "share" if task.shares_gpu else f"{task.num_gpu}-gpu"


@register("gpu-clustering")
class GpuClustering(PodPolicy):
    """Pods of one kind of GPU request together: a node that holds only that kind first, then
    one holding it among others, then an idle node, then one of other kinds; within each, the
    node with the least GPU free."""

    uses_tags = True

    def score(self, node: NodeState, tags: Set[str], task: TaskShape) -> tuple[int, int | None]:
        tag = gpu_tag(task)
        if tag is None:
            return 0, None
        fill = MAX_SCORE // 4 * (MAX_SPEC_GPU - node.gpu_left_milli) // MAX_SPEC_GPU
        if tag in tags:
            base = MAX_SCORE * 3 // 4 if len(tags) == 1 else MAX_SCORE * 2 // 4
        else:
            base = MAX_SCORE // 4 if not tags else 0
        return fill + base, best_fit_gpu(node, task)


@register("random-fit")
class RandomFit(PodPolicy):
    """Any node the pod fits on, drawn at random (seeded), and any GPU on it."""

    random_gpu = True
    random_node = True

    def score(self, node: NodeState, tags: Set[str], task: TaskShape) -> tuple[int, int | None]:
        return 0, None
