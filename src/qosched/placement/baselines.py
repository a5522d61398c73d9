"""Baselines scored with the same cost model as COS (:func:`qosched.placement.ir.evaluate`).

- ``all_cpu`` / ``all_gpu``: every unit of every tenant on one processor; returned even when it
  misses latency goals or runs a unit the processor cannot (``PlacementPlan.meets_goals``,
  throughput 0).
- ``model_level``: each tenant wholly on one processor, the combination with the lowest
  bottleneck among those meeting every goal: all ``2**T`` combinations when ``T <= 16``, otherwise
  greedily (tenants by decreasing best single-processor load, each to the processor that keeps the
  running bottleneck lowest). Raises :class:`InfeasibleError` when no combination meets the goals.
- ``layer_level``: switches only at a tenant's ``layer_boundaries`` (whole-model when ``None``),
  at most ``max_switches`` per tenant, searched with COS's phase two (exact Pareto sets, MILP).
"""

from __future__ import annotations

import itertools
import math
import time

from qosched.placement.ir import (
    Assignment,
    InfeasibleError,
    PlacementPlan,
    Problem,
    TenantGraph,
    evaluate,
    loads,
)
from qosched.placement.search import pareto_candidates, plan_with

EXHAUSTIVE_TENANTS = 16


def _uniform(tenant: TenantGraph, proc: str) -> Assignment:
    return (proc,) * tenant.n_units  # type: ignore[return-value]


def all_cpu(problem: Problem) -> PlacementPlan:
    """Every unit on the CPU."""
    return evaluate(problem, [_uniform(t, "cpu") for t in problem.tenants], method="all_cpu")


def all_gpu(problem: Problem) -> PlacementPlan:
    """Every unit on the GPU."""
    return evaluate(problem, [_uniform(t, "gpu") for t in problem.tenants], method="all_gpu")


def model_level(problem: Problem) -> PlacementPlan:
    """Each tenant wholly on the CPU or the GPU (see the module doc)."""
    start = time.perf_counter()
    options: list[list[tuple[Assignment, tuple[float, float, float]]]] = []
    for i, t in enumerate(problem.tenants):
        opts = []
        for proc in ("cpu", "gpu"):
            a = _uniform(t, proc)
            ld = loads(t, a)
            goal = t.latency_goal_s
            if all(math.isfinite(x) for x in ld) and (goal is None or sum(ld) <= goal):
                opts.append((a, ld))
        if not opts:
            raise InfeasibleError(
                f"tenant {t.name!r}: neither processor alone runs it within its latency goal",
                field=f"tenants[{i}].latency_goal_s",
            )
        options.append(opts)

    def bottleneck(choice: list[tuple[Assignment, tuple[float, float, float]]]) -> float:
        return max(sum(ld[r] for _, ld in choice) for r in range(3))

    if len(options) <= EXHAUSTIVE_TENANTS:
        best = min(itertools.product(*options), key=lambda c: bottleneck(list(c)))
        chosen = list(best)
    else:
        order = sorted(range(len(options)), key=lambda i: -min(max(ld) for _, ld in options[i]))
        picked: dict[int, tuple[Assignment, tuple[float, float, float]]] = {}
        for i in order:
            current = list(picked.values())
            picked[i] = min(options[i], key=lambda o: bottleneck([*current, o]))
        chosen = [picked[i] for i in range(len(options))]
    return evaluate(
        problem,
        [a for a, _ in chosen],
        method="model_level",
        search_s=time.perf_counter() - start,
    )


def layer_level(problem: Problem, max_switches: int = 4) -> PlacementPlan:
    """Contiguous splits at module boundaries only (see the module doc)."""
    return plan_with(
        problem,
        lambda t: pareto_candidates(t, max_switches, allowed_boundaries=t.layer_boundaries or ()),
        method="layer_level",
    )
