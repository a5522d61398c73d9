"""COS placement IR: tenants as chains of costed units, assignments, and the plan a search returns.

Cost model (one request of one tenant, executed sequentially):

- A tenant is a chain of units in topological order. Unit ``i`` costs ``cpu_s[i]`` seconds on the
  CPU and ``gpu_s[i]`` on the GPU; ``math.inf`` marks a unit the processor cannot run.
- Crossing processors between unit ``i`` and ``i + 1`` costs ``transfer_s[i]`` seconds (bytes /
  bandwidth + latency + synchronisation, precomputed by the caller); ``math.inf`` forbids a cut
  there.
- The request's input lives on the host: if the first unit runs on the GPU, ``input_to_gpu_s`` is
  paid; if the last unit runs on the GPU, ``output_from_gpu_s`` is paid to bring the result back.
  These host transfers are not counted as *switches* (only boundaries between units are).
- Loads per request: CPU = sum of the CPU units' costs, GPU = sum of the GPU units' costs, link =
  every transfer paid. Transfers occupy the link resource *and* add to latency, so
  ``latency = cpu + gpu + link`` (one request runs its units one after the other).
- A copy can also occupy the two processors: with ``copy_share`` s (0 <= s <= 0.5), every copy
  paid adds ``s * its time`` to the CPU load and to the GPU load (each end spends that long
  packing or unpacking it, as the processes of a core-set platform do; 0, the default, for DMA
  copies that leave the processors free). Latency still counts each copy once:
  ``latency = cpu units + gpu units + link``.
- All tenants are served round-robin at an equal rate: one request of every tenant per round.
  A round keeps each resource busy for the sum over tenants of its per-request load, so the round
  length is the *bottleneck* ``max(total cpu, total gpu, total link)`` and every tenant gets
  ``1 / bottleneck`` requests per second.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from qosched.core.errors import InputError
from qosched.hardware.catalog import ProcessorKind

PROCESSORS: tuple[ProcessorKind, ProcessorKind] = ("cpu", "gpu")
Assignment = tuple[ProcessorKind, ...]


class InfeasibleError(InputError):
    """No plan meets the constraints (latency goals, unsupported units, switch budget)."""


def _check_costs(values: Sequence[float], *, field: str, where: str) -> None:
    for i, v in enumerate(values):
        if not isinstance(v, int | float) or isinstance(v, bool):
            raise InputError(f"{where}: expected a number at index {i}, got {v!r}", field=field)
        if math.isnan(v) or v < 0:
            raise InputError(
                f"{where}: expected a cost >= 0 (or inf) at index {i}, got {v!r}", field=field
            )


@dataclass(frozen=True)
class TenantGraph:
    """One inference model as a chain of units with per-processor costs (see the module doc).

    ``layer_boundaries`` lists the boundaries (``i`` = between unit ``i`` and ``i + 1``) where a
    module ends; only the layer-level baseline reads it. ``None`` means no module boundaries known.
    ``latency_goal_s`` is the longest acceptable sequential latency of one request, or ``None``.
    """

    name: str
    unit_ids: tuple[str, ...]
    cpu_s: tuple[float, ...]
    gpu_s: tuple[float, ...]
    transfer_s: tuple[float, ...]
    input_to_gpu_s: float = 0.0
    output_from_gpu_s: float = 0.0
    latency_goal_s: float | None = None
    layer_boundaries: tuple[int, ...] | None = None
    copy_share: float = 0.0

    def __post_init__(self) -> None:
        where = f"tenant {self.name!r}"
        if not isinstance(self.name, str) or not self.name:
            raise InputError("expected a non-empty tenant name", field="name")
        n = len(self.unit_ids)
        if n == 0:
            raise InputError(f"{where}: expected at least one unit", field="unit_ids")
        if len(set(self.unit_ids)) != n:
            raise InputError(f"{where}: unit ids must be unique", field="unit_ids")
        for fld, expected in (("cpu_s", n), ("gpu_s", n), ("transfer_s", n - 1)):
            got = len(getattr(self, fld))
            if got != expected:
                raise InputError(
                    f"{where}: expected {expected} values for {n} units, got {got}", field=fld
                )
            _check_costs(getattr(self, fld), field=fld, where=where)
        _check_costs([self.input_to_gpu_s], field="input_to_gpu_s", where=where)
        _check_costs([self.output_from_gpu_s], field="output_from_gpu_s", where=where)
        for i, (c, g) in enumerate(zip(self.cpu_s, self.gpu_s, strict=True)):
            if math.isinf(c) and math.isinf(g):
                raise InputError(
                    f"{where}: unit {self.unit_ids[i]!r} is supported on no processor",
                    field="cpu_s",
                )
        goal = self.latency_goal_s
        if goal is not None and (
            isinstance(goal, bool)
            or not isinstance(goal, int | float)
            or not goal > 0
            or math.isinf(goal)
        ):
            raise InputError(
                f"{where}: expected a positive finite latency goal, got {goal!r}",
                field="latency_goal_s",
            )
        share = self.copy_share
        if isinstance(share, bool) or not isinstance(share, int | float) or not 0 <= share <= 0.5:
            raise InputError(
                f"{where}: expected a copy share in [0, 0.5], got {share!r}", field="copy_share"
            )
        if self.layer_boundaries is not None:
            lb = self.layer_boundaries
            if any(not isinstance(b, int) or not 0 <= b < n - 1 for b in lb) or len(set(lb)) != len(
                lb
            ):
                raise InputError(
                    f"{where}: expected distinct boundary indices in [0, {n - 2}], got {lb!r}",
                    field="layer_boundaries",
                )

    @property
    def n_units(self) -> int:
        return len(self.unit_ids)

    @staticmethod
    def from_costs(
        name: str,
        cpu_s: Sequence[float],
        gpu_s: Sequence[float],
        transfer_s: Sequence[float],
        **kwargs: object,
    ) -> TenantGraph:
        """A tenant whose unit ids are ``"0"``, ``"1"``, ...; the other fields as keywords."""
        return TenantGraph(
            name=name,
            unit_ids=tuple(str(i) for i in range(len(cpu_s))),
            cpu_s=tuple(float(c) for c in cpu_s),
            gpu_s=tuple(float(g) for g in gpu_s),
            transfer_s=tuple(float(t) for t in transfer_s),
            **kwargs,  # type: ignore[arg-type]
        )


@dataclass(frozen=True)
class Problem:
    """Tenants sharing one machine with the processors ``PROCESSORS`` (one CPU, one GPU)."""

    tenants: tuple[TenantGraph, ...]
    processors: tuple[ProcessorKind, ProcessorKind] = PROCESSORS

    def __post_init__(self) -> None:
        if not self.tenants:
            raise InputError("expected at least one tenant", field="tenants")
        names = [t.name for t in self.tenants]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise InputError(f"duplicate tenant names: {dupes}", field="tenants")
        if tuple(self.processors) != PROCESSORS:
            raise InputError(
                f"expected processors {PROCESSORS}, got {self.processors!r}", field="processors"
            )


def check_assignment(tenant: TenantGraph, assignment: Sequence[str]) -> None:
    """Raise InputError unless ``assignment`` names one processor per unit of ``tenant``."""
    if len(assignment) != tenant.n_units:
        raise InputError(
            f"tenant {tenant.name!r}: expected {tenant.n_units} processors, got {len(assignment)}",
            field="assignment",
        )
    bad = [p for p in assignment if p not in PROCESSORS]
    if bad:
        raise InputError(
            f"tenant {tenant.name!r}: expected processors in {PROCESSORS}, got {bad[0]!r}",
            field="assignment",
        )


def switches(assignment: Sequence[str]) -> int:
    """Number of boundaries where consecutive units run on different processors."""
    return sum(1 for a, b in itertools.pairwise(assignment) if a != b)


def segments(assignment: Sequence[str]) -> list[tuple[str, int, int]]:
    """``(processor, first unit, one past the last unit)`` of each maximal same-processor run."""
    result: list[tuple[str, int, int]] = []
    for i, p in enumerate(assignment):
        if result and result[-1][0] == p:
            result[-1] = (p, result[-1][1], i + 1)
        else:
            result.append((p, i, i + 1))
    return result


def loads(tenant: TenantGraph, assignment: Sequence[str]) -> tuple[float, float, float]:
    """Per-request ``(cpu_s, gpu_s, link_s)`` load of ``tenant`` under ``assignment``."""
    check_assignment(tenant, assignment)
    cpu = sum(c for c, p in zip(tenant.cpu_s, assignment, strict=True) if p == "cpu")
    gpu = sum(g for g, p in zip(tenant.gpu_s, assignment, strict=True) if p == "gpu")
    link = sum(
        t for t, a, b in zip(tenant.transfer_s, assignment, assignment[1:], strict=False) if a != b
    )
    if assignment[0] == "gpu":
        link += tenant.input_to_gpu_s
    if assignment[-1] == "gpu":
        link += tenant.output_from_gpu_s
    share = tenant.copy_share * link if tenant.copy_share else 0.0  # 0 * inf would be nan
    return cpu + share, gpu + share, link


def latency_of(tenant: TenantGraph, loaded: tuple[float, float, float]) -> float:
    """Sequential latency from ``loads``: the units plus every copy once (see the module doc)."""
    cpu, gpu, link = loaded
    if tenant.copy_share == 0 or math.isinf(link):
        return cpu + gpu + link
    return cpu + gpu + link * (1 - 2 * tenant.copy_share)


def latency_s(tenant: TenantGraph, assignment: Sequence[str]) -> float:
    """Sequential latency of one request: unit costs on their processors plus every transfer."""
    return latency_of(tenant, loads(tenant, assignment))


@dataclass(frozen=True)
class TenantPlan:
    """One tenant's assignment and what it costs per request."""

    name: str
    assignment: Assignment
    cpu_s: float
    gpu_s: float
    link_s: float
    latency_s: float
    latency_goal_s: float | None

    @property
    def meets_goal(self) -> bool:
        return self.latency_goal_s is None or self.latency_s <= self.latency_goal_s


@dataclass(frozen=True)
class PlacementPlan:
    """An assignment for every tenant, scored with the round-robin cost model of this module.

    ``throughput_rps`` is each tenant's rate (all tenants are served at the same rate);
    ``0.0`` when a tenant runs a unit its processor cannot run (infinite bottleneck).
    """

    method: str
    tenants: tuple[TenantPlan, ...]
    cpu_s: float
    gpu_s: float
    link_s: float
    bottleneck_s: float
    throughput_rps: float
    search_s: float

    @property
    def meets_goals(self) -> bool:
        return all(t.meets_goal for t in self.tenants)

    def assignment(self, name: str) -> Assignment:
        for t in self.tenants:
            if t.name == name:
                return t.assignment
        raise KeyError(name)

    @property
    def latency_s(self) -> dict[str, float]:
        return {t.name: t.latency_s for t in self.tenants}


def throughput_of(bottleneck_s: float) -> float:
    """Requests per second per tenant for a round of ``bottleneck_s`` seconds."""
    if bottleneck_s == 0:
        return math.inf
    return 0.0 if math.isinf(bottleneck_s) else 1.0 / bottleneck_s


def evaluate(
    problem: Problem,
    assignments: Sequence[Sequence[str]],
    *,
    method: str,
    search_s: float = 0.0,
) -> PlacementPlan:
    """Score one assignment per tenant (in ``problem.tenants`` order) as a
    :class:`PlacementPlan`."""
    if len(assignments) != len(problem.tenants):
        raise InputError(
            f"expected {len(problem.tenants)} assignments, got {len(assignments)}",
            field="assignments",
        )
    plans = []
    for tenant, a in zip(problem.tenants, assignments, strict=True):
        cpu, gpu, link = loads(tenant, a)
        latency = latency_of(tenant, (cpu, gpu, link))
        plans.append(
            TenantPlan(tenant.name, tuple(a), cpu, gpu, link, latency, tenant.latency_goal_s)
        )
    cpu = sum(p.cpu_s for p in plans)
    gpu = sum(p.gpu_s for p in plans)
    link = sum(p.link_s for p in plans)
    bottleneck = max(cpu, gpu, link)
    return PlacementPlan(
        method, tuple(plans), cpu, gpu, link, bottleneck, throughput_of(bottleneck), search_s
    )
