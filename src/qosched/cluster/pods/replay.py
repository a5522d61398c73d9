"""Pods over time: services and training sharing the GPUs of a node list, one report for both.

Where :func:`~qosched.cluster.pods.sim.place_pods` replays arrivals only (the paper's
experiment: no pod leaves), :func:`replay` runs the trace's clock. A pod arrives at
``creation_s`` and is placed by a pod placement policy on a node it fits on; one that fits
nowhere waits, and is tried again whenever a pod leaves, the waiting in arrival order or, with
``queue="priority"``, highest workload priority first (a newcomer is tried at once: what
waits failed on what is left, which has only shrunk since). A service (and a
pod without a workload) leaves at ``deletion_s`` (waiting or not); a training job leaves when
its ``work_s`` is done (its ``deletion_s`` is not read), at ``1 / slowdown`` of its speed alone
while it shares a GPU. A rate-over-time series changes a service's load at its steps.

The parties of a GPU slow each other down as a :class:`~qosched.cluster.pods.costs.Sharing`
model says (``fggr`` and the co-location surrogate, or time-slicing); a pod without a workload
is not a party (nothing is known of what it runs). A party with several GPUs takes each whole,
so it shares none; a service's rate is spread evenly over its GPUs.

A service **meets its goal at an instant** when it is placed and its slowdown is within what
its goal allows (``core.goals.slowdown_allowed``: a p99 latency goal read against the request
time alone, a throughput goal against the service's rate); a service waiting for a GPU meets
no goal. Time is cut into windows of ``window_s`` from 0; a service's windows are those its
life (creation to deletion, or to the end of the run) overlaps, and a window **meets the goal**
when the service meets it at every instant of the window it lives. A ``colocation`` rule may
refuse a GPU to a pod (services apart from training, or a GPU whose parties' goals the
prediction says the newcomer breaks): the policy then sees that GPU as full.
"""

from __future__ import annotations

import heapq
import math
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from qosched.cluster.pods.costs import Costs, Load, Sharing, allowed, party
from qosched.cluster.pods.fragmentation import FragmentationMeter, NodeState, TaskMix, TaskShape
from qosched.cluster.pods.nodes import PodCluster
from qosched.cluster.pods.policies import PodPolicy, gpu_tag
from qosched.cluster.pods.sim import choose_node
from qosched.cluster.pods.trace import MILLI, Pod
from qosched.cluster.pods.workloads import ServiceSpec, TrainingSpec

#: The default window a service's goal is judged over, in seconds.
DEFAULT_WINDOW_S = 60.0
#: A service meets its goal over a run when it meets it in at least this share of its windows.
SERVICE_TARGET = 0.99
# Events at one time: what frees a GPU first, then rate changes, then arrivals.
_LEAVE, _FINISH, _RATE, _ARRIVE = 0, 0, 1, 2


@dataclass(frozen=True, slots=True)
class Party:
    """What a colocation rule sees of one pod on a GPU: its kind (``service``, ``training``,
    or ``""``: no workload), its profile (None without a workload) and the slowdown its goal
    allows."""

    kind: str
    profile: Load | None
    allowed: float


#: Whether the parties of one GPU (the newcomer last) may share it.
Colocation = Callable[[Sequence[Party], Sharing], bool]


def anywhere(parties: Sequence[Party], sharing: Sharing) -> bool:
    """Any pods may share a GPU (FGD packing without an interference model)."""
    return True


def apart(parties: Sequence[Party], sharing: Sharing) -> bool:
    """Services share GPUs with services only (dedicated GPUs for serving and for the rest)."""
    return len({p.kind == "service" for p in parties}) == 1


def within_goals(parties: Sequence[Party], sharing: Sharing) -> bool:
    """Every party's predicted slowdown within what its goal allows."""
    known = [p for p in parties if p.profile is not None]
    if len(known) < 2:
        return True
    slowdowns = sharing.slowdowns([p.profile for p in known])  # type: ignore[misc]
    return all(s <= p.allowed for s, p in zip(slowdowns, known, strict=True))


#: ``harvest`` reads the goals at the services' peak rates, guarded deadlines among them, and
#: runs the harvesting replay (``cluster/pods/harvest.py``).
COLOCATIONS: dict[str, Colocation] = {
    "any": anywhere,
    "apart": apart,
    "goals": within_goals,
    "harvest": within_goals,
}
#: The order waiting pods are tried in: ``arrival``, or ``priority`` (a workload's priority,
#: highest first; a pod without a workload at 0; arrival order among equals).
QUEUES = ("arrival", "priority")


@dataclass(frozen=True, slots=True)
class ServiceOutcome:
    """One service's windows, and the largest slowdown it had while placed (1.0: never
    slowed) against the largest its goal allows (at its last rate)."""

    pod_id: str
    windows: int
    windows_met: int
    worst_slowdown: float = 1.0
    allowed_slowdown: float = math.inf


@dataclass(frozen=True, slots=True)
class TrainingOutcome:
    pod_id: str
    created_s: float
    finished_s: float | None
    deadline_s: float | None
    #: Harvesting: its deadline was promised when first placed (``cluster/pods/harvest.py``).
    guaranteed: bool = False

    @property
    def met(self) -> bool:
        return (
            self.deadline_s is not None
            and self.finished_s is not None
            and self.finished_s <= self.deadline_s + 1e-9
        )


@dataclass(frozen=True, slots=True)
class ClusterSample:
    """The cluster right after the events of one time: GPUs allocated, fragmented (the
    paper's measure) and busy, and the services placed and meeting their goal."""

    time_s: float
    allocated_gpus: float
    fragmented_gpus: float
    busy_gpus: float
    services_live: int
    services_meeting: int
    training_running: int


@dataclass(frozen=True, slots=True)
class HarvestTally:
    """What taking GPUs back from training cost a harvesting run: training pods evicted (for a
    service that found no room, or whose rate rose past what its GPU allows), of them those
    placed again at once elsewhere (moved), and the GPU-seconds lost (work since the last
    checkpoint redone, and the restart paid, times the GPUs the pod holds)."""

    evictions: int = 0
    moves: int = 0
    lost_gpu_s: float = 0.0


@dataclass(frozen=True, slots=True)
class ReplayRun:
    """One policy's run over the trace's clock (module doc)."""

    policy: str
    sharing: str
    colocation: str
    queue: str
    window_s: float
    cluster_gpus: int
    start_s: float
    end_s: float
    services: tuple[ServiceOutcome, ...]
    training: tuple[TrainingOutcome, ...]
    #: Time integrals over [start_s, end_s] of allocated, fragmented and busy GPUs.
    allocated_gpu_s: float
    fragmented_gpu_s: float
    busy_gpu_s: float
    peak_allocated_gpus: float
    wall_s: float
    samples: tuple[ClusterSample, ...] = field(repr=False, default=())
    harvest: HarvestTally | None = None

    @property
    def span_s(self) -> float:
        return self.end_s - self.start_s

    def services_json(self) -> dict[str, object] | None:
        if not self.services:
            return None
        windows = sum(s.windows for s in self.services)
        met = sum(s.windows_met for s in self.services)
        ratios = [s.windows_met / s.windows for s in self.services if s.windows]
        meeting = sum(1 for r in ratios if r >= SERVICE_TARGET - 1e-12)
        return {
            "services": len(self.services),
            "windows": windows,
            "windows_met": met,
            "windows_met_ratio": _ratio(met, windows),
            "services_meeting_99": meeting,
            "services_meeting_99_ratio": _ratio(meeting, len(ratios)),
            "worst_windows_met_ratio": round(min(ratios), 6) if ratios else None,
        }

    def training_json(self) -> dict[str, object] | None:
        if not self.training:
            return None
        finished = [t for t in self.training if t.finished_s is not None]
        deadline = [t for t in self.training if t.deadline_s is not None]
        met = sum(1 for t in deadline if t.met)
        jct = [t.finished_s - t.created_s for t in finished]  # type: ignore[operator]
        out: dict[str, object] = {
            "jobs": len(self.training),
            "finished": len(finished),
            "deadline_jobs": len(deadline),
            "deadline_met": met,
            "deadline_satisfactory_ratio": _ratio(met, len(deadline)),
            "avg_jct_s": round(sum(jct) / len(jct), 3) if jct else None,
        }
        if self.harvest is not None:
            promised = [t for t in deadline if t.guaranteed]
            out.update(
                guaranteed=len(promised),
                guaranteed_met=sum(1 for t in promised if t.met),
                best_effort_met=met - sum(1 for t in promised if t.met),
                evictions=self.harvest.evictions,
                moves=self.harvest.moves,
                lost_gpu_s=round(self.harvest.lost_gpu_s, 3),
            )
        return out

    def cluster_json(self) -> dict[str, object]:
        span = self.span_s

        def mean(total: float) -> float | None:
            return round(total / span, 3) if span > 0 else None

        busy = mean(self.busy_gpu_s)
        return {
            "start_s": round(self.start_s, 3),
            "end_s": round(self.end_s, 3),
            "mean_allocated_gpus": mean(self.allocated_gpu_s),
            "peak_allocated_gpus": round(self.peak_allocated_gpus, 3),
            "mean_fragmented_gpus": mean(self.fragmented_gpu_s),
            "gpu_utilization": None
            if busy is None or not self.cluster_gpus
            else round(busy / self.cluster_gpus, 6),
        }

    def to_json(self) -> dict[str, object]:
        """The run's keys for ``sim cluster --json`` on a pod trace with workloads."""
        return {
            "sharing": self.sharing,
            "colocation": self.colocation,
            "queue": self.queue,
            "window_s": self.window_s,
            "services": self.services_json(),
            "training": self.training_json(),
            "cluster": self.cluster_json(),
        }


def _ratio(part: int, whole: int) -> float | None:
    return round(part / whole, 6) if whole else None


class _Pod:
    """One pod's state during the run."""

    __slots__ = (
        "allowed",
        "bad",
        "busy",
        "finished",
        "gpus",
        "index",
        "node",
        "ok",
        "ok_since",
        "pod",
        "profile",
        "progress_at",
        "rate",
        "speed",
        "state",
        "version",
        "work_left",
        "worst",
    )

    def __init__(self, index: int, pod: Pod) -> None:
        self.index, self.pod = index, pod
        self.state = "new"  # new, waiting, running, gone
        self.node = -1
        self.gpus: list[int] = []
        self.profile: Load | None = None
        self.allowed = math.inf
        self.rate = 0.0
        self.busy = pod.gpu_milli / MILLI  # per GPU; a pod without a workload: its share
        self.speed = 1.0
        self.work_left = pod.workload.work_s if isinstance(pod.workload, TrainingSpec) else 0.0
        self.progress_at = pod.creation_s
        self.version = 0
        self.finished: float | None = None
        self.ok = False  # services: meeting the goal now
        self.ok_since = pod.creation_s
        self.bad: list[tuple[float, float]] = []
        self.worst = 1.0

    @property
    def kind(self) -> str:
        return "" if self.pod.workload is None else self.pod.workload.kind


class _PodReplay:
    def __init__(
        self,
        cluster: PodCluster,
        pods: Sequence[Pod],
        policy: PodPolicy,
        costs: Costs,
        sharing: Sharing,
        colocation: str,
        window_s: float,
        seed: int,
        workload: TaskMix,
        queue: str,
    ) -> None:
        self.cluster, self.policy, self.costs, self.sharing = cluster, policy, costs, sharing
        self.colocation_name, self.admits = colocation, COLOCATIONS[colocation]
        self.window_s = window_s
        self.by_priority = queue == "priority"
        self.rng = random.Random(seed)
        count = len(cluster.nodes)
        self.rank = np.empty(count, dtype=np.int64)
        self.rank[self.rng.sample(range(count), count)] = np.arange(count)
        order = sorted(range(len(pods)), key=lambda i: pods[i].creation_s)
        self.pods = [_Pod(n, pods[i]) for n, i in enumerate(order)]
        self.cpu = [node.cpu_milli for node in cluster.nodes]
        self.memory = [node.memory_mib for node in cluster.nodes]
        self.free = [[MILLI] * node.gpus for node in cluster.nodes]
        self.on_gpu: list[list[list[int]]] = [[[] for _ in range(n.gpus)] for n in cluster.nodes]
        self.tags: list[Counter[str]] = [Counter() for _ in cluster.nodes]
        self.meter = FragmentationMeter(workload)
        self.node_fragment = [self.meter(self.state(n)) for n in range(count)]
        self.gpu_busy = [[0.0] * node.gpus for node in cluster.nodes]
        self.fragmented = sum(self.node_fragment)
        self.busy = 0.0
        self.allocated = 0
        self.known: dict[tuple, tuple[int, int | None]] = {}
        self.events: list[tuple[float, int, int, int, int]] = []
        self.seq = 0
        self.waiting: list[int] = []
        self.dirty: set[tuple[int, int]] = set()
        self.now = self.pods[0].pod.creation_s
        self.integrals = [0.0, 0.0, 0.0]
        self.peak = 0.0
        self.samples: list[ClusterSample] = []
        self.live_services = self.meeting = self.training_running = 0

    # -- state -----------------------------------------------------------------------------

    def state(self, n: int, free: Sequence[int] | None = None) -> NodeState:
        left = tuple(sorted(self.free[n] if free is None else free, reverse=True))
        return NodeState(self.cluster.nodes[n].model, self.cpu[n], left)

    def push(self, at: float, kind: int, index: int, version: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.events, (at, kind, self.seq, index, version))

    def advance(self, to: float) -> None:
        dt = to - self.now
        if dt > 0:
            self.integrals[0] += dt * self.allocated / MILLI
            self.integrals[1] += dt * self.fragmented / MILLI
            self.integrals[2] += dt * self.busy
        self.now = to

    # -- the run ---------------------------------------------------------------------------

    def run(self) -> ReplayRun:
        started = time.perf_counter()
        self.schedule_events()
        start = self.now
        while self.events:
            at = self.events[0][0]
            self.advance(at)
            arrived, left = self.take_events_at(at)
            # What waits may fit now, before what just arrived.
            self.place_waiting(self.waiting + arrived if left else arrived, keep=not left)
            self.settle()
            self.sample()
        return self.result(start, self.now, time.perf_counter() - started)

    def schedule_events(self) -> None:
        """Every pod's arrival, a service's deletion and the changes of its request rate."""
        for p in self.pods:
            self.push(p.pod.creation_s, _ARRIVE, p.index)
            if p.pod.deletion_s is not None and not isinstance(p.pod.workload, TrainingSpec):
                self.push(p.pod.deletion_s, _LEAVE, p.index)
            if isinstance(p.pod.workload, ServiceSpec):
                for at in p.pod.workload.rate.changes():
                    self.push(at, _RATE, p.index)

    def take_events_at(self, at: float) -> tuple[list[int], bool]:
        """Apply every event due at ``at``: the pods that arrived, and whether a running pod
        left (its room may let a waiting one in)."""
        arrived, left = [], False
        while self.events and self.events[0][0] == at:
            _, kind, _, index, version = heapq.heappop(self.events)
            p = self.pods[index]
            if kind == _ARRIVE:
                if self.arrive(p, at):
                    arrived.append(index)
            elif kind == _RATE:
                if p.state == "running":
                    self.mark(p)
            elif kind == _LEAVE and self.leaves_now(p, version):
                if isinstance(p.pod.workload, TrainingSpec):
                    p.finished = at
                left |= p.state == "running"
                self.leave(p)
        return arrived, left

    def arrive(self, p: _Pod, at: float) -> bool:
        """The pod asks for a node; False when it was deleted the moment it was created."""
        gone = p.pod.deletion_s is not None and p.pod.deletion_s <= at
        if gone and not isinstance(p.pod.workload, TrainingSpec):
            p.state = "gone"  # deleted when created: it never asks for a node
            return False
        p.state = "waiting"
        self.live_services += isinstance(p.pod.workload, ServiceSpec)
        return True

    def leaves_now(self, p: _Pod, version: int) -> bool:
        """A leave event still stands: the pod is there, and a training pod's end was not moved
        since (its version)."""
        return p.state in ("waiting", "running") and (
            version == p.version or not isinstance(p.pod.workload, TrainingSpec)
        )

    def place_waiting(self, candidates: list[int], *, keep: bool) -> None:
        """Try ``candidates`` in queue order; those that fit nowhere wait (``keep``: beside the
        pods already waiting, else instead of them, all of whom are among the candidates)."""
        if not keep:
            self.waiting = []
        if self.by_priority:
            candidates.sort(key=lambda i: (-self.priority(i), i))
        # Placing only takes resources: a pod like one that just failed fails too.
        failed: set[tuple] = set()
        for index in candidates:
            p = self.pods[index]
            if p.state != "waiting":
                continue  # deleted while it waited
            like = (TaskShape.of(p.pod), p.pod.memory_mib, p.pod.workload)
            if like in failed or not self.place(p):
                failed.add(like)
                self.waiting.append(index)

    def result(self, start: float, end: float, wall_s: float) -> ReplayRun:
        """The run's outcome, the services still open at ``end`` closed first."""
        for p in self.pods:
            if p.state in ("waiting", "running") and isinstance(p.pod.workload, ServiceSpec):
                self.close(p)
        services = tuple(
            self.outcome(p, end) for p in self.pods if isinstance(p.pod.workload, ServiceSpec)
        )
        training = tuple(
            TrainingOutcome(p.pod.pod_id, p.pod.creation_s, p.finished, p.pod.workload.deadline_s)
            for p in self.pods
            if isinstance(p.pod.workload, TrainingSpec)
        )
        return ReplayRun(
            policy=self.policy.name,
            sharing=self.sharing.name,
            colocation=self.colocation_name,
            queue="priority" if self.by_priority else "arrival",
            window_s=self.window_s,
            cluster_gpus=self.cluster.gpus,
            start_s=start,
            end_s=end,
            services=services,
            training=training,
            allocated_gpu_s=self.integrals[0],
            fragmented_gpu_s=self.integrals[1],
            busy_gpu_s=self.integrals[2],
            peak_allocated_gpus=self.peak,
            wall_s=wall_s,
            samples=tuple(self.samples),
        )

    # -- placing and leaving ---------------------------------------------------------------

    def priority(self, index: int) -> int:
        w = self.pods[index].pod.workload
        return 0 if w is None else w.priority

    def party(self, p: _Pod) -> Party:
        return Party(p.kind, p.profile, p.allowed)

    def prepare(self, p: _Pod) -> None:
        """The pod's profile at the current rate (a workload's pod only)."""
        w = p.pod.workload
        if w is None:
            return
        cost = self.costs(w.model, w.batch)
        if isinstance(w, ServiceSpec):
            p.rate = w.rate.at(self.now)
            per_gpu = p.rate / p.pod.num_gpu
            p.profile = party(p.pod.pod_id, cost, w.priority, w.goal, per_gpu)
            p.allowed = allowed(w.goal, p.profile, p.rate)
            p.busy = p.profile.duty
        else:
            p.profile = party(p.pod.pod_id, cost, w.priority, w.goal)
            p.allowed = math.inf
            p.busy = 1.0

    def admitted_free(
        self,
        n: int,
        p: _Pod,
        free: list[int] | None = None,
        without: frozenset[int] = frozenset(),
    ) -> list[int]:
        """Node ``n``'s free share per GPU (``free``, or as it is) as ``p`` may use it: a GPU the
        colocation rule refuses is seen as full. The pods ``without`` are left out of the GPUs'
        parties (what the node would be were they gone)."""
        free = self.free[n] if free is None else free
        if not p.pod.shares_gpu or self.admits is anywhere:
            return free
        me = self.party(p)
        seen = []
        for g, left in enumerate(free):
            on = self.on_gpu[n][g]
            parties = [self.party(self.pods[i]) for i in on if i not in without]
            ok = left >= p.pod.gpu_milli and (
                not parties or self.admits([*parties, me], self.sharing)
            )
            seen.append(left if ok else 0)
        return seen

    def place(self, p: _Pod) -> bool:
        """Place ``p`` on the policy's best node; False if it fits nowhere."""
        pod, task = p.pod, TaskShape.of(p.pod)
        self.prepare(p)
        values = np.full(len(self.cluster.nodes), -np.inf)
        gpus: dict[int, tuple[list[int], int | None]] = {}
        for n in range(len(self.cluster.nodes)):
            if self.memory[n] < pod.memory_mib or self.cpu[n] < task.cpu_milli:
                continue
            free = self.admitted_free(n, p)
            node = self.state(n, free)
            if not node.may_run(task) or (task.num_gpu and not node.gpus_fit(task)):
                continue
            kinds = frozenset(self.tags[n]) if self.policy.uses_tags else frozenset()
            key = (node, kinds, task)
            answer = self.known.get(key)
            if answer is None:
                answer = self.known[key] = self.policy.score(node, kinds, task)
            values[n] = answer[0]
            gpus[n] = (free, answer[1])
        rank = None if self.policy.random_node else self.rank
        choice = choose_node(values, self.policy.normalizes, rank, self.rng)
        if choice is None:
            return False
        free, index = gpus[choice]
        self.take(p, choice, self.pick_gpus(p, free, index))
        return True

    def pick_gpus(self, p: _Pod, free: list[int], index: int | None) -> list[int]:
        """The GPUs ``p`` takes: for a shared GPU, the policy's (its index is in the node's
        largest-free-first order) or one drawn at random; else the first wholly free ones."""
        if p.pod.shares_gpu:
            if self.policy.random_gpu or index is None:
                fitting = [g for g, left in enumerate(free) if left >= p.pod.gpu_milli]
                return [fitting[self.rng.randrange(len(fitting))]]
            order = sorted(range(len(free)), key=lambda g: -free[g])
            return [order[index]]
        whole = [g for g, left in enumerate(free) if left >= p.pod.gpu_milli]
        return whole[: p.pod.num_gpu]

    def take(self, p: _Pod, n: int, gpus: list[int]) -> None:
        pod = p.pod
        self.cpu[n] -= pod.cpu_milli
        self.memory[n] -= pod.memory_mib
        for g in gpus:
            self.free[n][g] -= pod.gpu_milli
            self.on_gpu[n][g].append(p.index)
            self.dirty.add((n, g))
        tag = gpu_tag(TaskShape.of(pod))
        if tag is not None:
            self.tags[n][tag] += 1
        p.state, p.node, p.gpus = "running", n, gpus
        self.training_running += isinstance(pod.workload, TrainingSpec)
        p.progress_at = self.now
        self.allocated += pod.gpu_request_milli
        self.peak = max(self.peak, self.allocated / MILLI)
        self.refragment(n)

    def leave(self, p: _Pod) -> None:
        if p.state == "running":
            n, pod = p.node, p.pod
            self.cpu[n] += pod.cpu_milli
            self.memory[n] += pod.memory_mib
            for g in p.gpus:
                self.free[n][g] += pod.gpu_milli
                self.on_gpu[n][g].remove(p.index)
                self.dirty.add((n, g))
            tag = gpu_tag(TaskShape.of(pod))
            if tag is not None:
                self.tags[n][tag] -= 1
                if not self.tags[n][tag]:
                    del self.tags[n][tag]
            self.allocated -= pod.gpu_request_milli
            self.refragment(n)
            self.training_running -= isinstance(pod.workload, TrainingSpec)
        if isinstance(p.pod.workload, ServiceSpec):
            self.close(p)
            self.live_services -= 1
        p.state = "gone"
        p.version += 1

    def refragment(self, n: int) -> None:
        value = self.meter(self.state(n))
        self.fragmented += value - self.node_fragment[n]
        self.node_fragment[n] = value

    def mark(self, p: _Pod) -> None:
        """``p``'s rate changed: its profile, and its GPUs' slowdowns, are redone."""
        self.prepare(p)
        for g in p.gpus:
            self.dirty.add((p.node, g))

    # -- slowdowns -------------------------------------------------------------------------

    def settle(self) -> None:
        """Redo the slowdowns of every GPU whose parties changed at this time."""
        touched: dict[int, float] = {}
        for n, g in sorted(self.dirty):
            members = [self.pods[i] for i in self.on_gpu[n][g]]
            parties = [m for m in members if m.profile is not None]
            slowdowns = self.sharing.slowdowns([m.profile for m in parties]) if parties else []
            for m, s in zip(parties, slowdowns, strict=True):
                touched[m.index] = max(touched.get(m.index, 1.0), s)
            for m in members:
                touched.setdefault(m.index, 1.0)
            busy = min(1.0, sum(m.busy for m in members))
            self.busy += busy - self.gpu_busy[n][g]
            self.gpu_busy[n][g] = busy
        self.dirty.clear()
        for index, slowdown in touched.items():
            p = self.pods[index]
            if p.state != "running":
                continue
            w = p.pod.workload
            if isinstance(w, TrainingSpec):
                p.work_left -= (self.now - p.progress_at) * p.speed
                p.progress_at = self.now
                p.speed = 1.0 / slowdown
                p.version += 1
                self.push(self.now + max(p.work_left, 0.0) / p.speed, _FINISH, index, p.version)
            elif isinstance(w, ServiceSpec):
                p.worst = max(p.worst, slowdown)
                self.judge(p, ok=slowdown <= p.allowed * (1 + 1e-9))

    def judge(self, p: _Pod, *, ok: bool) -> None:
        """A service's goal is met (or not) from now on: a stretch not met is recorded."""
        if ok != p.ok:
            self.close(p)
            p.ok = ok
            self.meeting += ok

    def close(self, p: _Pod) -> None:
        """End the service's current stretch now (recorded if the goal was not met in it); it
        goes on as not meeting the goal."""
        if not p.ok and self.now > p.ok_since:
            p.bad.append((p.ok_since, self.now))
        self.meeting -= p.ok
        p.ok, p.ok_since = False, self.now

    def outcome(self, p: _Pod, end: float) -> ServiceOutcome:
        life_end = end if p.pod.deletion_s is None else min(p.pod.deletion_s, end)
        w = self.window_s
        first = math.floor(p.pod.creation_s / w)
        last = math.ceil(life_end / w) - 1
        if life_end <= p.pod.creation_s:
            return ServiceOutcome(p.pod.pod_id, 0, 0, p.worst, p.allowed)
        spans = sorted(
            (max(math.floor(a / w), first), min(math.ceil(b / w) - 1, last))
            for a, b in p.bad
            if b > a
        )
        bad, reach = 0, first - 1
        for lo, hi in spans:
            lo = max(lo, reach + 1)
            if hi >= lo:
                bad += hi - lo + 1
                reach = hi
        windows = last - first + 1
        return ServiceOutcome(p.pod.pod_id, windows, windows - bad, p.worst, p.allowed)

    def sample(self) -> None:
        self.samples.append(
            ClusterSample(
                self.now,
                self.allocated / MILLI,
                self.fragmented / MILLI,
                self.busy,
                self.live_services,
                self.meeting,
                self.training_running,
            )
        )
