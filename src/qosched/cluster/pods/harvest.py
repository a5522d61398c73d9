"""Harvesting with promises (issue 53, item 5): services' goals first, training in what they
leave.

The replay of ``cluster/pods/replay.py`` with ``colocation="harvest"``, by four rules:

1. **Services first.** A service that fits nowhere takes GPUs back from training. On each node
   the training pods there are taken cheapest first (a promised deadline last; then the fewest
   GPU-seconds lost: the work done since the pod's last checkpoint plus the restart, times the
   GPUs it holds) until the service would fit, and those not needed after all are kept (the
   costliest first); the service goes to the node that loses least (promises broken, then
   GPU-seconds, then the run's node order). An evicted pod redoes the work since its last
   checkpoint and pays ``restart_s`` more (the stop-checkpoint-restart pause; 30 s as
   ``cluster/simulator.py``'s default), is tried elsewhere at once (a *move*) and else waits
   as any pod does. A training pod checkpoints every ``checkpoint_s`` of work since it
   (re)started.
2. **Training fills what the goals leave.** Which pods may share a GPU is decided as by
   ``goals`` (every party's predicted slowdown within what its goal allows), but
   pessimistically: each service is read at its **peak** rate, the highest its rate series
   states from the time it is placed or its rate changes on (within ``lookahead_s`` when
   set), so a goal admitted holds whatever its load does in that time.
3. **Promises.** A training pod with a deadline is *guaranteed* when, at its first placement,
   its work at the pessimistic speed (``1 / slowdown`` beside its GPU's parties at their peak
   rates) ends by its deadline; else it runs best effort. A guaranteed pod's deadline is a goal
   from then on: a newcomer may join its GPU only where the pessimistic slowdown still lets
   its remaining work end by the deadline, and it is evicted only where no set of best-effort
   pods would do. A service can still evict it: the run counts guaranteed and met apart.
4. **A rising rate.** When a service's rate changes and its GPU no longer keeps every service's
   goal there at the rates now, the training pods on that GPU are evicted, cheapest first,
   until it does. With ``lookahead_s`` None the peak admitted covers every rate to come, so
   this happens only with a finite look-ahead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from qosched.cluster.pods.costs import allowed
from qosched.cluster.pods.costs import party as load_of
from qosched.cluster.pods.fragmentation import NodeState, TaskShape
from qosched.cluster.pods.replay import HarvestTally, Party, ReplayRun, _Pod, _PodReplay
from qosched.cluster.pods.trace import MILLI
from qosched.cluster.pods.workloads import RateSeries, ServiceSpec, TrainingSpec

#: The pause of a stop-checkpoint-restart cycle (``cluster/simulator.py``'s default).
DEFAULT_RESTART_S = 30.0
#: How much work a training pod does between checkpoints.
DEFAULT_CHECKPOINT_S = 600.0


@dataclass(frozen=True, slots=True)
class Harvest:
    """The harvesting replay's settings (module doc): the restart an evicted pod pays, its
    checkpoint interval, and how far ahead a service's peak rate is read (None: to the end)."""

    restart_s: float = DEFAULT_RESTART_S
    checkpoint_s: float = DEFAULT_CHECKPOINT_S
    lookahead_s: float | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.restart_s) and self.restart_s >= 0):
            raise ValueError(f"restart_s must be finite and >= 0, got {self.restart_s!r}")
        if not (math.isfinite(self.checkpoint_s) and self.checkpoint_s > 0):
            raise ValueError(f"checkpoint_s must be finite and > 0, got {self.checkpoint_s!r}")
        ahead = self.lookahead_s
        if ahead is not None and not (math.isfinite(ahead) and ahead >= 0):
            raise ValueError(f"lookahead_s must be None or finite and >= 0, got {ahead!r}")


def peak_rate(rate: RateSeries, now: float, lookahead_s: float | None) -> float:
    """The highest rate ``rate`` states from ``now`` on (up to ``now + lookahead_s``)."""
    end = math.inf if lookahead_s is None else now + lookahead_s
    return max([rate.at(now)] + [rps for at, rps in rate.steps if now < at <= end])


class HarvestReplay(_PodReplay):
    """The replay by the module's rules."""

    def __init__(self, *args: Any, harvest: Harvest) -> None:
        super().__init__(*args)
        self.harvest = harvest
        self.at_peak: dict[int, Party] = {}  # services, at their peak rate
        self.saved: dict[int, float] = {}  # training: work left at its last checkpoint
        self.promised: set[int] = set()
        self.decided: set[int] = set()
        self.raised: list[int] = []  # services whose rate changed at this time
        self.evicted_at: dict[int, float] = {}
        self.tally = HarvestTally()

    # -- what the colocation rule sees -----------------------------------------------------

    def prepare(self, p: _Pod) -> None:
        super().prepare(p)
        w = p.pod.workload
        if isinstance(w, ServiceSpec):
            rate = peak_rate(w.rate, self.now, self.harvest.lookahead_s)
            cost = self.costs(w.model, w.batch)
            load = load_of(p.pod.pod_id, cost, w.priority, w.goal, rate / p.pod.num_gpu)
            self.at_peak[p.index] = Party(p.kind, load, allowed(w.goal, load, rate))

    def party(self, p: _Pod) -> Party:
        if p.index in self.at_peak:
            return self.at_peak[p.index]
        if p.index in self.promised and p.state == "running":
            return Party(p.kind, p.profile, self.slack(p))
        return super().party(p)

    def work_now(self, p: _Pod) -> float:
        return max(p.work_left - (self.now - p.progress_at) * p.speed, 0.0)

    def slack(self, p: _Pod) -> float:
        """The slowdown a promised pod may take from now and still end by its deadline."""
        left = self.work_now(p)
        deadline = p.pod.workload.deadline_s  # type: ignore[union-attr]
        return math.inf if left <= 0 else max(deadline - self.now, 0.0) / left

    def pessimistic(self, p: _Pod) -> float:
        """``p``'s slowdown beside its GPUs' parties read as the colocation rule reads them."""
        worst = 1.0
        for g in p.gpus:
            members = [self.pods[i] for i in self.on_gpu[p.node][g]]
            known = [(m, self.party(m).profile) for m in members]
            known = [(m, load) for m, load in known if load is not None]
            if len(known) > 1:
                slowdowns = self.sharing.slowdowns([load for _, load in known])  # type: ignore[misc]
                worst = max(worst, slowdowns[[m for m, _ in known].index(p)])
        return worst

    # -- placing, taking back --------------------------------------------------------------

    def place(self, p: _Pod) -> bool:
        w = p.pod.workload
        placed = super().place(p) or (isinstance(w, ServiceSpec) and self.reclaim(p))
        if placed and self.evicted_at.get(p.index) == self.now:
            self.tally = replace(self.tally, moves=self.tally.moves + 1)  # placed again at once
        if placed and isinstance(w, TrainingSpec) and p.index not in self.decided:
            self.decided.add(p.index)
            self.saved[p.index] = p.work_left
            ends = self.now + p.work_left * self.pessimistic(p)
            if w.deadline_s is not None and ends <= w.deadline_s + 1e-9:
                self.promised.add(p.index)
        return placed

    def loss(self, q: _Pod) -> float:
        """GPU-seconds lost were training pod ``q`` evicted now."""
        done = max(self.saved[q.index] - self.work_now(q), 0.0)
        redo = math.fmod(done, self.harvest.checkpoint_s)
        return (redo + self.harvest.restart_s) * q.pod.gpu_request_milli / MILLI

    def cost_key(self, q: _Pod) -> tuple[bool, float, int]:
        return (q.index in self.promised, self.loss(q), q.index)

    def reclaim(self, p: _Pod) -> bool:
        """Place service ``p`` where evicting training makes room, at the least cost."""
        best = None
        for n in range(len(self.cluster.nodes)):
            chosen = self.evictable_for(p, n)
            if chosen is None:
                continue
            promised = sum(q.index in self.promised for q in chosen)
            cost = (promised, sum(self.loss(q) for q in chosen), int(self.rank[n]))
            if best is None or cost < best[0]:
                best = (cost, n, chosen)
        if best is None:
            return False
        _, n, chosen = best
        for q in chosen:
            self.evict(q)
        self.put(p, n)
        for q in chosen:
            if not self.place(q):
                self.waiting.append(q.index)
        return True

    def evictable_for(self, p: _Pod, n: int) -> list[_Pod] | None:
        """The training pods of node ``n`` whose eviction lets ``p`` in, cheapest first; None
        where evicting all of them does not."""
        on_node = {i for gpu in self.on_gpu[n] for i in gpu}
        training = [self.pods[i] for i in on_node]
        training = [q for q in training if isinstance(q.pod.workload, TrainingSpec)]
        training.sort(key=self.cost_key)
        removed: list[_Pod] = []
        for q in training:
            removed.append(q)
            if self.fits(p, n, removed):
                break
        else:
            return None
        for q in sorted(removed, key=self.cost_key, reverse=True):
            rest = [r for r in removed if r is not q]
            if self.fits(p, n, rest):
                removed = rest
        return removed

    def fits(self, p: _Pod, n: int, removed: list[_Pod]) -> bool:
        """Whether ``p`` would fit on node ``n`` were the pods ``removed`` gone."""
        pod, task = p.pod, TaskShape.of(p.pod)
        cpu = self.cpu[n] + sum(q.pod.cpu_milli for q in removed)
        memory = self.memory[n] + sum(q.pod.memory_mib for q in removed)
        if memory < pod.memory_mib or cpu < task.cpu_milli:
            return False
        free = list(self.free[n])
        for q in removed:
            for g in q.gpus:
                free[g] += q.pod.gpu_milli
        seen = self.admitted_free(n, p, free, frozenset(q.index for q in removed))
        node = NodeState(self.cluster.nodes[n].model, cpu, tuple(sorted(seen, reverse=True)))
        return node.may_run(task) and (not task.num_gpu or node.gpus_fit(task))

    def put(self, p: _Pod, n: int) -> None:
        """Place ``p`` on node ``n``, on the GPUs the policy picks there."""
        free = self.admitted_free(n, p)
        kinds = frozenset(self.tags[n]) if self.policy.uses_tags else frozenset()
        _, index = self.policy.score(self.state(n, free), kinds, TaskShape.of(p.pod))
        self.take(p, n, self.pick_gpus(p, free, index))

    def evict(self, q: _Pod) -> None:
        """Stop training pod ``q``: it redoes the work since its checkpoint, pays the restart,
        and waits (the caller queues it)."""
        left = self.work_now(q)
        redo = math.fmod(max(self.saved[q.index] - left, 0.0), self.harvest.checkpoint_s)
        self.tally = replace(
            self.tally,
            evictions=self.tally.evictions + 1,
            lost_gpu_s=self.tally.lost_gpu_s + self.loss(q),
        )
        self.leave(q)
        self.evicted_at[q.index] = self.now
        q.work_left = left + redo + self.harvest.restart_s
        q.progress_at = self.now
        self.saved[q.index] = q.work_left
        q.state = "waiting"

    # -- a rising rate ---------------------------------------------------------------------

    def mark(self, p: _Pod) -> None:
        super().mark(p)
        self.raised.append(p.index)

    def take_events_at(self, at: float) -> tuple[list[int], bool]:
        arrived, left = super().take_events_at(at)
        evicted: list[int] = []
        for index in self.raised:
            evicted += self.keep_goals(self.pods[index])
        self.raised.clear()
        self.waiting.extend(evicted)
        return arrived, left or bool(evicted)

    def keep_goals(self, s: _Pod) -> list[int]:
        """Evict training from service ``s``'s GPUs, cheapest first, until every service there
        meets its goal at the rates now; the pods evicted."""
        evicted: list[int] = []
        if s.state != "running":
            return evicted
        for g in s.gpus:
            while True:
                members = [self.pods[i] for i in self.on_gpu[s.node][g]]
                training = [m for m in members if isinstance(m.pod.workload, TrainingSpec)]
                if not training or self.goals_hold(members):
                    break
                q = min(training, key=self.cost_key)
                self.evict(q)
                evicted.append(q.index)
        return evicted

    def goals_hold(self, members: list[_Pod]) -> bool:
        known = [m for m in members if m.profile is not None]
        if len(known) < 2:
            return True
        slowdowns = self.sharing.slowdowns([m.profile for m in known])  # type: ignore[misc]
        return all(
            s <= m.allowed * (1 + 1e-9)
            for s, m in zip(slowdowns, known, strict=True)
            if isinstance(m.pod.workload, ServiceSpec)
        )

    def result(self, start: float, end: float, wall_s: float) -> ReplayRun:
        run = super().result(start, end, wall_s)
        promised = {self.pods[i].pod.pod_id for i in self.promised}
        training = tuple(replace(t, guaranteed=t.pod_id in promised) for t in run.training)
        return replace(run, training=training, harvest=self.tally)
