"""Pollux (Qiao et al., OSDI'21): fairness-weighted goodput speedups, re-optimised every 60 s.

What the paper and its artifact (``petuum/adaptdl`` ``osdi21-artifact``, adapted for deadline
traces in ``pkusys/ElasticFlow`` ``pollux/pollux_simulator``) do, and how it is done here:

- **Speedup.** A job's goodput is system throughput times statistical efficiency; its speedup on
  ``g`` workers is its goodput there over its goodput on the fair share,
  ``ceil(cluster workers / active jobs)`` workers (``pollux.py`` ``Problem.__init__``). The
  throughput here is the job's speed-table rate. Statistical efficiency depends only on the
  batch size; qosched's traces fix each job's batch size (progress is counted in iterations of
  that batch), so the efficiency is a constant of the job that cancels in the ratio, and no
  gradient noise scale is needed or assumed. What this gives up is the co-adaptive half of
  Pollux, re-tuning each job's batch size with its allocation: the simulator cannot run a job at
  another batch size than its trace's (docs/results/cluster-sim.md).
- **Objective.** Maximise the power mean with p = -1 of the speedups, each scaled by
  ``nodes / cluster workers`` (a node's share as 1) plus 1e-3, as the artifact's ``_evaluate``
  does: a job with no workers costs 1/1e-3, so every job that can run gets a worker before any
  job gets a second one.
- **Restart penalty.** A job whose count changes (a start included) has its speedup multiplied by
  ``max(age - restarts * 30 s, 0) / (age + 30 s)``: a young or often restarted job is not worth a
  restart.
- **Optimiser.** The artifact runs a genetic algorithm (NSGA-II, 100 x 100) over per-node
  placements. At the level of worker counts the objective is a sum of one term per job under one
  capacity, so a dynamic programme over (job, workers used) finds its exact optimum, in
  deterministic time; it replaces the genetic algorithm, which only approximates that optimum.
  Nodes are left to qosched's placement (largest job first).
- **Interference avoidance.** The artifact puts at most one multi-node job on a node. Here a job
  gets either at most one node's workers or whole nodes, so two multi-node jobs never need to
  share one.
- **Exploration.** The artifact lets a job grow to at most twice the most replicas it has run on
  (one before it has run): its throughput model is learnt as it goes.
- **Interval.** Allocations change only at multiples of 60 s of the trace clock; arrivals and
  completions in between wait for the next one, as in the artifact's simulator loop. Where the
  simulator decides on a clock of its own that never lands on those multiples (the 60 s slots
  from the first arrival of ``--fidelity artifact``), the first decision after a tick stands
  for it.

Pollux ignores requested workers and deadlines: on deadline traces it is measured like the
others (a job meets its deadline or not), and admits every job.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from qosched.cluster.policies.base import Policy, register
from qosched.cluster.state import ClusterView, Decision, JobState
from qosched.cluster.throughput import SpeedCurve

#: The artifact's scheduling interval (``simulator.py --interval``) and restart delay (``delay``
#: in ``Problem._evaluate``), in seconds.
INTERVAL_S = 60.0
RESTART_DELAY_S = 30.0
#: Exponent of the power mean of speedups: more negative is fairer (``p`` in ``_evaluate``).
POWER = -1.0
#: Added to each scaled speedup so a job with none has a finite cost.
EPSILON = 1e-3
# A wake-up at a multiple of the interval lands within float rounding of it.
_TICK_TOLERANCE = 1e-6


def restart_factor(age_s: float, restarts: int, delay_s: float = RESTART_DELAY_S) -> float:
    """What a change of allocation leaves of a job's speedup (``_evaluate``'s ``factor``)."""
    return max(age_s - restarts * delay_s, 0.0) / (age_s + delay_s)


def candidate_counts(curve: SpeedCurve, workers_per_node: int, most: int) -> tuple[int, ...]:
    """Counts a job may get: measured or interpolated, at most ``most``, within one node or on
    whole nodes (so no two multi-node jobs share a node)."""
    return tuple(
        g
        for g in curve.usable_counts()
        if g <= most and (g <= workers_per_node or g % workers_per_node == 0)
    )


def fair_rate(curve: SpeedCurve, fair_workers: int) -> float:
    """The job's speed on its fair share: the fastest count up to it (its slowest count when it
    has none that small)."""
    within = [curve.rate(g) for g in curve.usable_counts() if g <= fair_workers]
    return max(within) if within else curve.rate(curve.usable_counts()[0])


@dataclass(frozen=True, slots=True)
class Options:
    """One job's choices: worker counts (0 first) and the cost of each, 1 / scaled speedup."""

    counts: np.ndarray
    costs: np.ndarray


def relative_speeds(
    curve: SpeedCurve, *, most: int, fair_workers: int, workers_per_node: int
) -> tuple[np.ndarray, np.ndarray]:
    """A job's candidate counts (0 first) and its speed at each over its speed on the fair
    share: the part of its options that changes only with ``most`` and ``fair_workers``."""
    counts = candidate_counts(curve, workers_per_node, most)
    base = fair_rate(curve, fair_workers)
    return np.array((0, *counts), dtype=np.int64), np.array([curve.rate(g) / base for g in counts])


def options_of(
    counts: np.ndarray, relative: np.ndarray, *, current: int, scale: float, factor: float
) -> Options:
    """Costs of each count for a job holding ``current`` workers, p = -1 (see the module), from
    the job's `relative_speeds`."""
    penalties = np.where(counts[1:] == current, 1.0, factor)
    costs = np.concatenate(
        ([(0.0 + EPSILON) ** POWER], (relative * scale * penalties + EPSILON) ** POWER)
    )
    return Options(counts, costs)


def best_counts(options: Sequence[Options], capacity: int) -> list[int]:
    """The counts minimising the sum of costs with at most ``capacity`` workers in all: a
    dynamic programme over (job, workers used), exact. Ties go to fewer workers."""
    # Budgets past what all the jobs together can use add nothing: the programme stops at the
    # smaller of the two (the same choices: a budget beyond the jobs' use leaves each job the
    # same options as one at it).
    width = min(capacity, sum(int(option.counts.max()) for option in options)) + 1
    best = np.zeros(width)  # least cost of the jobs so far within each budget
    choices = []
    for option in options:
        counts, costs = option.counts, option.costs
        totals = np.full((len(counts), width), np.inf)
        for k, count in enumerate(counts.tolist()):
            if count < width:
                np.add(best[: width - count], costs[k], out=totals[k, count:])
        choices.append(totals.argmin(axis=0))  # first minimum: the smallest count
        best = totals.min(axis=0)
    counts = []
    budget = width - 1
    for option, choice in zip(reversed(options), reversed(choices), strict=True):
        count = int(option.counts[choice[budget]])
        counts.append(count)
        budget -= count
    return counts[::-1]


@register("pollux")
class Pollux(Policy):
    """Pollux's allocation of workers by fairness-weighted speedups, as described in the module."""

    honours_requests = False
    largest_first = True

    def __init__(self, interval_s: float = INTERVAL_S, explore: bool = True) -> None:
        if not (math.isfinite(interval_s) and interval_s > 0):
            raise ValueError(f"interval must be a positive number of seconds, got {interval_s}")
        self.interval_s = interval_s
        self.explore = explore
        self._most_held: dict[str, int] = {}
        self._restarts: dict[str, int] = {}  # absent: never allocated, as the artifact's None
        # Per job: ((most, fair share, workers per node), its `relative_speeds` there).
        self._relative: dict[str, tuple[tuple[int, int, int], np.ndarray, np.ndarray]] = {}
        self._wanted_s: float | None = None  # the tick the last decision asked to be woken at

    def _next_tick(self, now: float) -> float:
        return (math.floor(now / self.interval_s + _TICK_TOLERANCE) + 1) * self.interval_s

    def _on_tick(self, now: float) -> bool:
        ticks = now / self.interval_s
        return abs(ticks - round(ticks)) <= _TICK_TOLERANCE

    def _tick_missed(self, now: float) -> bool:
        """Whether the tick asked for has passed without a decision at it: a simulator that
        decides on a clock of its own (``--fidelity artifact``'s 60 s slots from the first
        arrival) never lands on the trace clock's multiples of 60 s, and a Pollux that waited
        for one would wait forever. It optimises at the first decision after the tick instead."""
        wanted = self._wanted_s
        return wanted is not None and now > wanted + _TICK_TOLERANCE * self.interval_s

    def allocate(self, view: ClusterView) -> Decision:
        jobs = view.jobs
        if not jobs:
            self._wanted_s = None
            return Decision()
        for job in jobs:
            if job.workers > self._most_held.get(job.job_id, 0):
                self._most_held[job.job_id] = job.workers
        wake_at = self._next_tick(view.now)
        due = self._on_tick(view.now) or self._tick_missed(view.now)
        self._wanted_s = wake_at
        if not due:
            # Between ticks nothing moves: jobs keep their workers, arrivals wait.
            return Decision({job.job_id: job.workers for job in jobs if job.workers}, wake_at)
        counts = self._optimise(jobs, view)
        for job, count in zip(jobs, counts, strict=True):
            if count and count != job.workers:
                previous = self._restarts.get(job.job_id)
                self._restarts[job.job_id] = 0 if previous is None else previous + 1
        active = {job.job_id for job in jobs}
        for memory in (self._most_held, self._restarts, self._relative):
            for job_id in [k for k in memory if k not in active]:
                del memory[job_id]
        workers = {job.job_id: count for job, count in zip(jobs, counts, strict=True) if count}
        return Decision(workers, wake_at)

    def _optimise(self, jobs: Sequence[JobState], view: ClusterView) -> list[int]:
        cluster = view.cluster
        fair = math.ceil(cluster.total_workers / len(jobs))
        scale = cluster.num_nodes / cluster.total_workers
        options = []
        for job in jobs:
            most = job.curve.max_workers
            if self.explore:
                most = min(most, max(2 * self._most_held.get(job.job_id, 0), 1))
            # NOTE: Pollux optimises every 60 s for as long as jobs run (tens of thousands of
            # times on a trace of months), and a job's counts and relative speeds change only
            # with ``most`` and the fair share: kept per job until either does.
            key = (most, fair, cluster.workers_per_node)
            kept = self._relative.get(job.job_id)
            if kept is None or kept[0] != key:
                kept = self._relative[job.job_id] = (
                    key,
                    *relative_speeds(
                        job.curve,
                        most=most,
                        fair_workers=fair,
                        workers_per_node=cluster.workers_per_node,
                    ),
                )
            age = view.now - job.spec.submit_s
            factor = restart_factor(age, self._restarts.get(job.job_id, 0))
            options.append(options_of(*kept[1:], current=job.workers, scale=scale, factor=factor))
        return best_counts(options, cluster.total_workers)
