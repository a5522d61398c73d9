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
    run = _Placing(cluster, policy, random.Random(seed), tie_break)
    for step, pod in enumerate(pods):
        run.arrive(step, pod)
        if on_progress is not None:
            on_progress(step + 1, len(pods))
    return run.result(len(pods), seed, workload or policy.workload, started)


class _Placing:
    """What one placement run keeps between pods: every node's room and the GPU kinds on it,
    each kind of pod's scores (rescored only on the nodes changed since), and the counts."""

    def __init__(
        self, cluster: PodCluster, policy: PodPolicy, rng: random.Random, tie_break: str
    ) -> None:
        self.cluster, self.policy, self.rng = cluster, policy, rng
        count = len(cluster.nodes)
        self.rank = None
        if tie_break == "node-order":
            self.rank = np.empty(count, dtype=np.int64)
            self.rank[rng.sample(range(count), count)] = np.arange(count)
        self.models = [node.model for node in cluster.nodes]
        self.cpu_left = [node.cpu_milli for node in cluster.nodes]
        self.memory_left = [node.memory_mib for node in cluster.nodes]
        self.gpu_left = [(MILLI,) * node.gpus for node in cluster.nodes]
        self.tags: list[Counter[str]] = [Counter() for _ in cluster.nodes]
        self.changed_at = np.zeros(count, dtype=np.int64)
        self.tables: dict[tuple[TaskShape, int], _Scores] = {}
        self.known: dict[
            tuple[NodeState, frozenset[str] | None, TaskShape], tuple[int, int | None]
        ] = {}
        self.capacity = cluster.gpus * MILLI
        self.arrived = self.allocated = 0
        self.arrived_curve: list[float] = []
        self.allocated_curve: list[float] = []
        self.placements: list[str | None] = []
        self.placed = self.failed = self.failed_gpu = 0
        self.first_failure: int | None = None
        self.at_first_failure: float | None = None

    def state(self, n: int) -> NodeState:
        return NodeState(self.models[n], self.cpu_left[n], self.gpu_left[n])

    def arrive(self, step: int, pod: Pod) -> None:
        """The ``step``-th pod placed, or failed; the curves gain their point."""
        task = TaskShape.of(pod)
        table = self.scores(step, pod, task)
        self.arrived += task.gpu_request_milli
        order = None if self.policy.random_node else self.rank
        choice = choose_node(table.values, self.policy.normalizes, order, self.rng)
        self.placements.append(None if choice is None else self.cluster.nodes[choice].name)
        if choice is None:
            self.fail(step, task)
        else:
            self.place(step, pod, task, choice, table.gpus[choice])
        self.arrived_curve.append(self.arrived / MILLI)
        self.allocated_curve.append(self.allocated / MILLI)

    def scores(self, step: int, pod: Pod, task: TaskShape) -> _Scores:
        """The pod's kind's scores, brought up to date on the nodes changed since last asked."""
        table = self.tables.get((task, pod.memory_mib))
        if table is None:
            table = self.tables[(task, pod.memory_mib)] = _Scores(len(self.models))
        for n in np.flatnonzero(self.changed_at > table.stamp).tolist():
            table.values[n], table.gpus[n] = self.score(n, pod, task)
        table.stamp = step
        return table

    def score(self, n: int, pod: Pod, task: TaskShape) -> tuple[float, int | None]:
        """Node ``n``'s score for the pod and the GPU it would take (-inf where it does not
        fit); the policy is asked once per node state, GPU kinds on it and kind of pod."""
        node = self.state(n)
        if (
            self.memory_left[n] < pod.memory_mib
            or node.cpu_left < task.cpu_milli
            or not node.may_run(task)
            or (task.num_gpu and not node.gpus_fit(task))
        ):
            return -np.inf, None
        kinds = frozenset(self.tags[n]) if self.policy.uses_tags else None
        key = (node, kinds, task)
        answer = self.known.get(key)
        if answer is None:
            answer = self.known[key] = self.policy.score(node, kinds or frozenset(), task)
        return answer

    def fail(self, step: int, task: TaskShape) -> None:
        self.failed += 1
        if task.num_gpu:
            self.failed_gpu += 1
            if self.first_failure is None:
                self.first_failure = step
                self.at_first_failure = (self.capacity - self.allocated) / MILLI

    def place(self, step: int, pod: Pod, task: TaskShape, choice: int, gpu: int | None) -> None:
        node = self.state(choice)
        if task.shares_gpu and (self.policy.random_gpu or gpu is None):
            fitting = [i for i, left in enumerate(node.gpu_left) if left >= task.gpu_milli]
            gpu = fitting[self.rng.randrange(len(fitting))]
        placed_on = after_placing(node, task, gpu)
        self.cpu_left[choice] = placed_on.cpu_left
        self.gpu_left[choice] = placed_on.gpu_left
        self.memory_left[choice] -= pod.memory_mib
        kind = gpu_tag(task)
        if kind is not None:
            self.tags[choice][kind] += 1
        self.changed_at[choice] = step + 1
        self.allocated += task.gpu_request_milli
        self.placed += 1

    def result(self, pods: int, seed: int, workload: TaskMix, started: float) -> PlacementRun:
        meter = FragmentationMeter(workload)
        fragmented = sum(meter(self.state(n)) for n in range(len(self.models))) / MILLI
        return PlacementRun(
            policy=self.policy.name,
            seed=seed,
            cluster_gpus=self.cluster.gpus,
            pods=pods,
            placed=self.placed,
            failed=self.failed,
            failed_gpu_pods=self.failed_gpu,
            first_failure=self.first_failure,
            arrived_gpus=self.arrived / MILLI,
            allocated_gpus=self.allocated / MILLI,
            unallocated_gpus=(self.capacity - self.allocated) / MILLI,
            unallocated_gpus_at_first_failure=self.at_first_failure,
            fragmented_gpus=fragmented,
            wall_s=time.perf_counter() - started,
            arrived_curve=tuple(self.arrived_curve),
            allocated_curve=tuple(self.allocated_curve),
            placements=tuple(self.placements),
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
