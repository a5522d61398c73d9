"""The fragmentation measure of "Beware of Fragmentation" (Weng et al., USENIX ATC'23, §4).

A node's GPU resource is a *fragment* for a task when the task cannot use it: from task m's
point of view, node n's fragmentation F_n(m) is

- all of the node's unallocated GPU resource, when m asks for no GPU, may not run on the node's
  GPU type, or cannot be placed on the node at all (too little CPU, or too few GPUs with enough
  free share);
- otherwise, the free share of each GPU whose free share is smaller than the share m asks for
  of each GPU (the GPUs m could never use).

The node's fragmentation given the workload is the expectation over the workload's tasks,
F_n(M) = sum_m p_m F_n(m); the cluster's is the sum over its nodes. Measured in thousandths of a
GPU. The workload M is its *typical* tasks, as the paper's simulator
(``hkust-adsl/kubernetes-scheduler-simulator``, ``GetTypicalPods``) takes them: the distinct
(CPU, GPU count, GPU share, GPU types) requests of the trace, most frequent first, until they
cover 95% of its pods (CPU-only pods included), their frequencies scaled to sum to 1.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from qosched.cluster.pods.trace import Pod

#: The share of the trace's pods the typical tasks cover (the simulator's default for FGD runs).
TYPICAL_COVERAGE = 0.95


@dataclass(frozen=True, slots=True)
class TaskShape:
    """What the measure and the placement policies see of a task: its CPU (milli-cores), its
    GPUs, the share of each (thousandths), and the GPU types it may use (empty: any)."""

    cpu_milli: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: tuple[str, ...] = ()

    @classmethod
    def of(cls, pod: Pod) -> TaskShape:
        return cls(pod.cpu_milli, pod.num_gpu, pod.gpu_milli, pod.gpu_spec)

    @property
    def gpu_request_milli(self) -> int:
        return self.num_gpu * self.gpu_milli

    @property
    def shares_gpu(self) -> bool:
        return self.num_gpu == 1 and self.gpu_milli < 1000


@dataclass(frozen=True, slots=True)
class NodeState:
    """A node as the measure sees it: GPU type, free CPU (milli-cores) and the free share of
    each GPU (thousandths), largest first (which GPU is which does not matter to any measure)."""

    model: str
    cpu_left: int
    gpu_left: tuple[int, ...]

    @property
    def gpu_left_milli(self) -> int:
        return sum(self.gpu_left)

    def may_run(self, task: TaskShape) -> bool:
        """Whether the node's GPU type is one ``task`` may use (any type for a CPU-only task)."""
        return task.num_gpu == 0 or not task.gpu_spec or self.model in task.gpu_spec

    def gpus_fit(self, task: TaskShape) -> bool:
        """Whether ``task.num_gpu`` GPUs each have ``task.gpu_milli`` free."""
        need = task.num_gpu
        for left in self.gpu_left:  # largest first: stop at the first too small
            if need == 0 or left < task.gpu_milli:
                break
            need -= 1
        return need == 0


@dataclass(frozen=True, slots=True)
class TaskMix:
    """The tasks the cluster expects, with the probability of each (summing to 1)."""

    tasks: tuple[tuple[TaskShape, float], ...]

    def __post_init__(self) -> None:
        if not self.tasks:
            raise ValueError("a workload needs at least one task")
        total = sum(p for _, p in self.tasks)
        if any(p <= 0 for _, p in self.tasks) or abs(total - 1.0) > 1e-9:
            raise ValueError(f"task probabilities must be positive and sum to 1, got {total!r}")

    @classmethod
    def typical(cls, pods: Iterable[Pod], coverage: float = TYPICAL_COVERAGE) -> TaskMix:
        """The trace's most frequent requests covering ``coverage`` of its pods."""
        if not 0.0 < coverage <= 1.0:
            raise ValueError(f"coverage must lie in (0, 1], got {coverage!r}")
        counts = Counter(TaskShape.of(pod) for pod in pods)
        if not counts:
            raise ValueError("no pod to take a workload from")
        total = sum(counts.values())
        # Most frequent first; among equals the larger request first, as the simulator's
        # reversed sort on (count, CPU, GPU share, GPU count, GPU types) orders them.
        ranked = sorted(
            counts.items(),
            key=lambda item: (
                item[1],
                item[0].cpu_milli,
                item[0].gpu_milli,
                item[0].num_gpu,
                item[0].gpu_spec,
            ),
            reverse=True,
        )
        kept: list[tuple[TaskShape, int]] = []
        covered = 0
        for shape, count in ranked:
            if covered >= coverage * total:
                break
            kept.append((shape, count))
            covered += count
        return cls(tuple((shape, count / covered) for shape, count in kept))


def task_fragmentation(node: NodeState, task: TaskShape) -> int:
    """F_n(m): the node's free GPU share (thousandths) that ``task`` cannot use."""
    free = node.gpu_left_milli
    if task.num_gpu == 0 or not node.may_run(task):
        return free
    if node.cpu_left < task.cpu_milli or not node.gpus_fit(task):
        return free
    return sum(left for left in node.gpu_left if left < task.gpu_milli)


def node_fragmentation(node: NodeState, workload: TaskMix) -> float:
    """F_n(M) = sum_m p_m F_n(m), in thousandths of a GPU."""
    if not node.gpu_left_milli:
        return 0.0
    return sum(p * task_fragmentation(node, task) for task, p in workload.tasks)


class FragmentationMeter:
    """``node_fragmentation`` for one workload, remembered by node state: a cluster holds many
    nodes in the same state, and FGD asks for each state's measure again and again."""

    def __init__(self, workload: TaskMix) -> None:
        self.workload = workload
        self._known: dict[NodeState, float] = {}

    def __call__(self, node: NodeState) -> float:
        value = self._known.get(node)
        if value is None:
            value = self._known[node] = node_fragmentation(node, self.workload)
        return value
