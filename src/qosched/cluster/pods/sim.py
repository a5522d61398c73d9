"""Pods placed one by one on a cluster of GPU nodes, as the simulator of "Beware of
Fragmentation" replays a trace: each pod arrives, is placed by the policy on a node it fits on
or fails (it is not retried), and no pod leaves. The run records, after each arrival, the GPU
share requested so far and the share allocated, so the unallocated GPUs can be read at any
level of arrived workload.

Each node's score for a kind of pod is remembered until the node changes: a pod is scored
only on the nodes placed on since the last pod of its kind, which makes a run over the trace's
~10,000 pods and 1,213 nodes take seconds.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from qosched.cluster.pods.fragmentation import FragmentationMeter, NodeState, TaskMix, TaskShape
from qosched.cluster.pods.nodes import PodCluster
from qosched.cluster.pods.policies import PodPolicy, after_placing, gpu_tag
from qosched.cluster.pods.trace import MILLI, Pod

#: How nodes of equal policy score are told apart (see :func:`place_pods`).
TIE_BREAKS = ("node-order", "random")


@dataclass(frozen=True, slots=True)
class PlacementRun:
    """One policy's run over a pod sequence. GPU amounts are in GPUs (thousandths summed).

    ``unallocated_gpus``: the cluster's GPUs not allocated to any pod once every pod has
    arrived; ``unallocated_gpus_at_first_failure``: the same when the first pod that asked
    for a GPU could not be placed (None if every such pod was placed).
    """

    policy: str
    seed: int
    cluster_gpus: int
    pods: int
    placed: int
    failed: int
    failed_gpu_pods: int
    first_failure: int | None
    arrived_gpus: float
    allocated_gpus: float
    unallocated_gpus: float
    unallocated_gpus_at_first_failure: float | None
    fragmented_gpus: float
    wall_s: float
    #: After the i-th arrival: the GPUs requested by pods arrived so far, and those allocated.
    arrived_curve: tuple[float, ...] = field(repr=False, default=())
    allocated_curve: tuple[float, ...] = field(repr=False, default=())
    #: The node each pod was placed on, by name, None where it failed.
    placements: tuple[str | None, ...] = field(repr=False, default=())

    def unallocated_at(self, level: float) -> float:
        """The GPUs unallocated when the workload arrived last reached at most ``level`` x the
        cluster's GPUs (before any pod: all of them)."""
        limit = level * self.cluster_gpus + 1e-9
        index = int(np.searchsorted(np.asarray(self.arrived_curve), limit, side="right")) - 1
        allocated = self.allocated_curve[index] if index >= 0 else 0.0
        return self.cluster_gpus - allocated

    def to_json(self) -> dict[str, object]:
        """The run's measures for ``sim cluster --json`` (docs/contracts.md)."""
        return {
            "policy": self.policy,
            "seed": self.seed,
            "cluster_gpus": self.cluster_gpus,
            "pods": self.pods,
            "placed": self.placed,
            "failed": self.failed,
            "failed_gpu_pods": self.failed_gpu_pods,
            "first_failure": self.first_failure,
            "arrived_gpus": round(self.arrived_gpus, 3),
            "allocated_gpus": round(self.allocated_gpus, 3),
            "unallocated_gpus": round(self.unallocated_gpus, 3),
            "unallocated_gpus_at_first_failure": None
            if self.unallocated_gpus_at_first_failure is None
            else round(self.unallocated_gpus_at_first_failure, 3),
            "fragmented_gpus": round(self.fragmented_gpus, 3),
            "wall_s": round(self.wall_s, 3),
        }


class _Scores:
    """One kind of pod's score on every node (-inf where it does not fit), and the step of the
    run they reflect."""

    __slots__ = ("gpus", "stamp", "values")

    def __init__(self, nodes: int) -> None:
        self.values = np.full(nodes, -np.inf)
        self.gpus: list[int | None] = [None] * nodes
        self.stamp = -1


def place_pods(
    cluster: PodCluster,
    pods: Sequence[Pod],
    policy: PodPolicy,
    *,
    seed: int = 0,
    workload: TaskMix | None = None,
    tie_break: str = "node-order",
    on_progress: Callable[[int, int], None] | None = None,
) -> PlacementRun:
    """Place ``pods`` in order. Among the nodes of the policy's best score, ``tie_break``
    picks the first in a ``seed``-ed random order of the nodes (``node-order``: the paper's
    simulator numbers its nodes at random and its scheduler takes the lowest-numbered of equal
    nodes, for reproducible runs) or one drawn at random each time (``random``: the stock
    Kubernetes scheduler). ``workload`` is what the final fragmentation is measured against
    (the policy's own when None)."""
    if tie_break not in TIE_BREAKS:
        raise ValueError(f"unknown tie break {tie_break!r}; use {', '.join(TIE_BREAKS)}")
    started = time.perf_counter()
    rng = random.Random(seed)
    count = len(cluster.nodes)
    rank = None
    if tie_break == "node-order":
        rank = np.empty(count, dtype=np.int64)
        rank[rng.sample(range(count), count)] = np.arange(count)
    models = [node.model for node in cluster.nodes]
    cpu_left = [node.cpu_milli for node in cluster.nodes]
    memory_left = [node.memory_mib for node in cluster.nodes]
    gpu_left = [(MILLI,) * node.gpus for node in cluster.nodes]
    tags: list[Counter[str]] = [Counter() for _ in cluster.nodes]
    changed_at = np.zeros(count, dtype=np.int64)
    tables: dict[tuple[TaskShape, int], _Scores] = {}
    known: dict[tuple[NodeState, frozenset[str] | None, TaskShape], tuple[int, int | None]] = {}
    capacity = cluster.gpus * MILLI
    arrived = allocated = 0
    arrived_curve: list[float] = []
    placements: list[str | None] = []
    allocated_curve: list[float] = []
    placed = failed = failed_gpu = 0
    first_failure: int | None = None
    at_first_failure: float | None = None

    def state(n: int) -> NodeState:
        return NodeState(models[n], cpu_left[n], gpu_left[n])

    for step, pod in enumerate(pods):
        task = TaskShape.of(pod)
        table = tables.get((task, pod.memory_mib))
        if table is None:
            table = tables[(task, pod.memory_mib)] = _Scores(count)
        for n in np.flatnonzero(changed_at > table.stamp).tolist():
            node = state(n)
            if (
                memory_left[n] < pod.memory_mib
                or node.cpu_left < task.cpu_milli
                or not node.may_run(task)
                or (task.num_gpu and not node.gpus_fit(task))
            ):
                table.values[n] = -np.inf
                table.gpus[n] = None
                continue
            kinds = frozenset(tags[n]) if policy.uses_tags else None
            key = (node, kinds, task)
            answer = known.get(key)
            if answer is None:
                answer = known[key] = policy.score(node, kinds or frozenset(), task)
            table.values[n], table.gpus[n] = answer
        table.stamp = step
        arrived += task.gpu_request_milli
        order = None if policy.random_node else rank
        choice = choose_node(table.values, policy.normalizes, order, rng)
        placements.append(None if choice is None else cluster.nodes[choice].name)
        if choice is None:
            failed += 1
            if task.num_gpu:
                failed_gpu += 1
                if first_failure is None:
                    first_failure = step
                    at_first_failure = (capacity - allocated) / MILLI
        else:
            gpu = table.gpus[choice]
            node = state(choice)
            if task.shares_gpu and (policy.random_gpu or gpu is None):
                fitting = [i for i, left in enumerate(node.gpu_left) if left >= task.gpu_milli]
                gpu = fitting[rng.randrange(len(fitting))]
            placed_on = after_placing(node, task, gpu)
            cpu_left[choice] = placed_on.cpu_left
            gpu_left[choice] = placed_on.gpu_left
            memory_left[choice] -= pod.memory_mib
            kind = gpu_tag(task)
            if kind is not None:
                tags[choice][kind] += 1
            changed_at[choice] = step + 1
            allocated += task.gpu_request_milli
            placed += 1
        arrived_curve.append(arrived / MILLI)
        allocated_curve.append(allocated / MILLI)
        if on_progress is not None:
            on_progress(step + 1, len(pods))

    meter = FragmentationMeter(workload or policy.workload)
    fragmented = sum(meter(state(n)) for n in range(count)) / MILLI
    return PlacementRun(
        policy=policy.name,
        seed=seed,
        cluster_gpus=cluster.gpus,
        pods=len(pods),
        placed=placed,
        failed=failed,
        failed_gpu_pods=failed_gpu,
        first_failure=first_failure,
        arrived_gpus=arrived / MILLI,
        allocated_gpus=allocated / MILLI,
        unallocated_gpus=(capacity - allocated) / MILLI,
        unallocated_gpus_at_first_failure=at_first_failure,
        fragmented_gpus=fragmented,
        wall_s=time.perf_counter() - started,
        arrived_curve=tuple(arrived_curve),
        allocated_curve=tuple(allocated_curve),
        placements=tuple(placements),
    )


def _rescale(scores: np.ndarray) -> np.ndarray:
    """The scheduler framework's whole-number rescaling to 0..100, which merges close scores."""
    low, high = int(scores.min()), int(scores.max())
    return (scores - low) * 100 // (high - low) if high > low else np.zeros_like(scores)


def choose_node(
    values: np.ndarray, normalizes: bool, rank: np.ndarray | None, rng: random.Random
) -> int | None:
    """A node of the highest score: the first in ``rank`` among equals, or one drawn at random
    when there is no rank; None if the pod fits nowhere."""
    fits = np.flatnonzero(values > -np.inf)
    if fits.size == 0:
        return None
    scores = values[fits].astype(np.int64)
    if normalizes:
        scores = _rescale(scores)
    best = fits[scores == scores.max()]
    if rank is not None:
        return int(best[np.argmin(rank[best])])
    return int(best[rng.randrange(best.size)])


def inflate(pods: Sequence[Pod], cluster_gpus: int, ratio: float, seed: int) -> list[Pod]:
    """The workload-inflation experiment's arrivals (the paper's §6.1, the simulator's
    ``TunePodsByNodeTotalResource`` with ``shufflePod``): the trace's pods in a ``seed``-ed
    random order, then pods drawn at random from the trace (with replacement) until one more
    would bring the GPUs requested past ``ratio`` x the cluster's GPUs."""
    if ratio <= 0:
        raise ValueError(f"inflation ratio must be positive, got {ratio!r}")
    rng = random.Random(seed)
    order = sorted(pods, key=lambda pod: pod.pod_id)
    rng.shuffle(order)
    target = ratio * cluster_gpus * MILLI
    total = sum(pod.gpu_request_milli for pod in order)
    drawn = 0
    while True:
        pick = pods[rng.randrange(len(pods))]
        if total + pick.gpu_request_milli > target:
            break
        order.append(_clone(pick, f"{pick.pod_id}-tuned-{drawn}"))
        total += pick.gpu_request_milli
        drawn += 1
    return order


def _clone(pod: Pod, pod_id: str) -> Pod:
    return Pod(
        pod_id,
        pod.cpu_milli,
        pod.memory_mib,
        pod.num_gpu,
        pod.gpu_milli,
        pod.gpu_spec,
        pod.qos,
        pod.phase,
        pod.creation_s,
        pod.deletion_s,
        pod.workload,
    )
