"""COS two-phase search: per-tenant Pareto candidates, then one candidate per tenant for all.

Phase one (:func:`pareto_candidates`) is a dynamic programme over a tenant's chain. A state at unit
``i`` is (processor of unit ``i``, switches so far, cpu load, gpu load, link load); states with the
same processor and switch count that are dominated in all three loads are pruned at every position,
because any completion adds the same costs to both. Latency is not a fourth objective: it equals
``cpu + gpu + link`` (see :mod:`qosched.placement.ir`), so a point dominated in the three loads is
dominated in latency too. The result is the exact Pareto set of the three loads over all assignments
with at most ``max_switches`` switches (each load vector once), optionally restricted to a set of
allowed cut points and to the tenant's latency goal.

Phase two (:func:`select`) picks one candidate per tenant minimising the bottleneck
``max(sum cpu, sum gpu, sum link)`` as a small MILP solved by HiGHS (``scipy.optimize.milp``); since
the bottleneck and the latency are monotone in the loads, choosing among Pareto candidates loses
nothing. On a phase-one grid the MILP only needs to be as exact as the grid: it stops within a
tenth of a cell of the best choice. :func:`plan` then refines locally (best-response candidate
swaps and single-unit flips within the switch budget and latency goals, while the bottleneck
strictly falls); after an exact MILP this only matters when HiGHS stops at its time limit.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from qosched.core.errors import InputError
from qosched.placement.ir import (
    PROCESSORS,
    Assignment,
    InfeasibleError,
    PlacementPlan,
    Problem,
    TenantGraph,
    evaluate,
    latency_of,
    loads,
    switches,
)

# Slack when pruning by latency goal inside the DP, where sums are taken in another order than in
# ``loads``; the exact check on the final candidates uses ``loads``.
_GOAL_SLACK = 1e-9
# Phase-one grid of plan(), relative to a tenant's cheapest sequential latency: close to the exact
# search's plans in a fraction of its time (the tests bound the gap).
DEFAULT_RESOLUTION = 1e-2
# Phase two's relative MILP gap: "optimal" for exact searches; an approximate search (phase one
# on a grid) stops within a tenth of its grid cell, finer than its grid can tell apart, which
# saves the solver most of its time on large problems.
EXACT_GAP = 1e-9
GAP_PER_RESOLUTION = 0.1


@dataclass(frozen=True)
class Candidate:
    """One assignment of a tenant and its per-request loads."""

    assignment: Assignment
    cpu_s: float
    gpu_s: float
    link_s: float
    copy_share: float = 0.0

    @property
    def latency_s(self) -> float:
        return self.cpu_s + self.gpu_s + self.link_s * (1 - 2 * self.copy_share)

    @property
    def switches(self) -> int:
        return switches(self.assignment)

    @property
    def loads(self) -> tuple[float, float, float]:
        return self.cpu_s, self.gpu_s, self.link_s


def _merge_masks(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of ``a`` and ``b`` (each mutually non-dominated) that survive their union.

    A row of ``b`` goes when some row of ``a`` is ``<=`` it everywhere (ties keep ``a``); a row of
    ``a`` goes when a surviving row of ``b`` dominates it strictly.
    """
    keep_a, keep_b = np.ones(len(a), bool), np.ones(len(b), bool)
    if len(a) == 0 or len(b) == 0:
        return keep_a, keep_b
    # One 2-D comparison per load, combined: several times faster than a 3-D array reduced over
    # its short last axis, and phase one calls this once per unit, processor and switch count.
    a_le_b = a[:, None, 0] <= b[None, :, 0]
    for d in (1, 2):
        a_le_b &= a[:, None, d] <= b[None, :, d]
    keep_b = ~a_le_b.any(0)
    bk = b[keep_b]
    if len(bk):
        # b <= a everywhere, and not equal everywhere (equal rows of ``a`` were kept over b's).
        b_le_a = bk[:, None, 0] <= a[None, :, 0]
        b_eq_a = bk[:, None, 0] == a[None, :, 0]
        for d in (1, 2):
            b_le_a &= bk[:, None, d] <= a[None, :, d]
            b_eq_a &= bk[:, None, d] == a[None, :, d]
        keep_a = ~(b_le_a & ~b_eq_a).any(0)
    return keep_a, keep_b


# A group of phase-one states: their loads (m x 3) and tags (m x c) that trace each back.
Group = tuple[np.ndarray, np.ndarray]
# layer[p][s]: the states at one unit on processor p after s switches.
Layer = list[list[Group]]


def check_switch_budget(max_switches: object) -> int:
    if isinstance(max_switches, bool) or not isinstance(max_switches, int) or max_switches < 0:
        raise InputError(
            f"expected a non-negative integer, got {max_switches!r}", field="max_switches"
        )
    return max_switches


def allowed_cuts(tenant: TenantGraph, allowed_boundaries: Sequence[int] | None) -> list[bool]:
    """Whether a switch may happen at each boundary (``None``: at every one)."""
    n = tenant.n_units
    if allowed_boundaries is None:
        return [True] * max(n - 1, 0)
    allowed = [False] * max(n - 1, 0)
    for b in allowed_boundaries:
        if not 0 <= b < n - 1:
            raise InputError(
                f"tenant {tenant.name!r}: boundary {b} outside [0, {n - 2}]",
                field="allowed_boundaries",
            )
        allowed[b] = True
    return allowed


@dataclass(frozen=True)
class Front:
    """How phase one adds copies to loads and prunes groups of states for one tenant."""

    share: float  # the tenant's copy_share
    cell: float  # grid cell of the load comparison; 0: exact
    limit: float | None = None  # the latency goal with slack; None: no goal

    @classmethod
    def of(cls, tenant: TenantGraph, resolution: float, respect_goal: bool) -> Front:
        goal = tenant.latency_goal_s if respect_goal else None
        cell = resolution * sum(min(c, g) for c, g in zip(tenant.cpu_s, tenant.gpu_s, strict=True))
        limit = None if goal is None else goal * (1 + _GOAL_SLACK) + _GOAL_SLACK
        return cls(tenant.copy_share, cell, limit)

    def copy(self, seconds: float) -> np.ndarray:
        """What a copy adds to the (cpu, gpu, link) loads."""
        return np.array([self.share * seconds, self.share * seconds, seconds])

    def key(self, pts: np.ndarray) -> np.ndarray:
        return np.floor(pts / self.cell) if self.cell > 0 else pts

    def within(self, pts: np.ndarray, tag: np.ndarray) -> Group:
        """The states whose latency meets the goal."""
        if self.limit is None or len(pts) == 0:
            return pts, tag
        ok = pts[:, 0] + pts[:, 1] + pts[:, 2] * (1 - 2 * self.share) <= self.limit
        return pts[ok], tag[ok]

    def union(self, a: Group, b: Group) -> Group:
        """The states of ``a`` and ``b`` within the goal that no other dominates (ties keep
        ``a``'s)."""
        a = self.within(*a)
        b = self.within(*b)
        if len(b[0]) == 0:
            return a
        if len(a[0]) == 0:
            return b
        keep_a, keep_b = _merge_masks(self.key(a[0]), self.key(b[0]))
        return (
            np.concatenate([a[0][keep_a], b[0][keep_b]]),
            np.concatenate([a[1][keep_a], b[1][keep_b]]),
        )


class Tags:
    """Tag arrays ``(cols..., index)`` for groups of a given size, made once each: read only,
    since indexing them makes copies."""

    def __init__(self) -> None:
        self._made: dict[tuple[int, ...], np.ndarray] = {}

    def __call__(self, pts: np.ndarray, *cols: int) -> np.ndarray:
        tag = self._made.get((len(pts), *cols))
        if tag is None:
            tag = np.empty((len(pts), len(cols) + 1), np.int64)
            tag[:, :-1] = cols
            tag[:, -1] = np.arange(len(pts))
            self._made[(len(pts), *cols)] = tag
        return tag


_NOTHING: Group = (np.zeros((0, 3)), np.zeros((0, 2), dtype=np.int64))


def first_layer(tenant: TenantGraph, max_switches: int, front: Front) -> Layer:
    """The states at unit 0: on the cpu, or on the gpu after the input's copy."""
    layer = [[_NOTHING for _ in range(max_switches + 1)] for _ in PROCESSORS]
    for p in (0, 1):
        c = (tenant.cpu_s, tenant.gpu_s)[p][0]
        link = 0.0 if p == 0 else tenant.input_to_gpu_s
        if math.isfinite(c) and math.isfinite(link):
            pt = front.copy(link).reshape(1, 3)
            pt[0, p] += c
            layer[p][0] = front.within(pt, np.zeros((1, 2), dtype=np.int64))
    return layer


def next_layer(
    tenant: TenantGraph,
    i: int,
    prev: Layer,
    max_switches: int,
    can_cut: bool,
    front: Front,
    tags: Tags,
) -> Layer:
    """The states at unit ``i`` from those at unit ``i - 1``: each stays on its processor, or
    (when the boundary may be cut) switches and pays the copy. Tags: (came by a switch, index
    in the parent group)."""
    layer = [[_NOTHING for _ in range(max_switches + 1)] for _ in PROCESSORS]
    cut = tenant.transfer_s[i - 1]
    for p in (0, 1):
        c = (tenant.cpu_s, tenant.gpu_s)[p][i]
        if not math.isfinite(c):
            continue
        step = np.zeros(3)
        step[p] = c
        step_cut = step + front.copy(cut) if can_cut else step
        for s in range(min(max_switches, i) + 1):  # i boundaries so far: at most i switches
            a_pts = prev[p][s][0]
            stay = (a_pts + step, tags(a_pts, 0))
            move = _NOTHING
            if s > 0 and can_cut:
                b_pts = prev[1 - p][s - 1][0]
                move = (b_pts + step_cut, tags(b_pts, 1))
            layer[p][s] = front.union(stay, move)
    return layer


def close(tenant: TenantGraph, last: Layer, front: Front, tags: Tags) -> Group:
    """Bring gpu results back to the host, then one Pareto set over every end group; tags:
    (processor, switches, index in the group)."""
    ends: Group = (np.zeros((0, 3)), np.zeros((0, 3), dtype=np.int64))
    for p in (0, 1):
        out = 0.0 if p == 0 else tenant.output_from_gpu_s
        if not math.isfinite(out):
            continue
        for s in range(len(last[p])):
            g_pts = last[p][s][0]
            ends = front.union(ends, (g_pts + front.copy(out), tags(g_pts, p, s)))
    return ends


def trace_back(history: Sequence[Layer], ends: np.ndarray) -> list[Assignment]:
    """The assignment of every end state (rows ``(processor, switches, index)`` of ``ends``),
    followed back through each unit's tags."""
    result = []
    for p, s, j in ends.tolist():
        procs = []
        for i in range(len(history) - 1, -1, -1):
            procs.append(PROCESSORS[p])
            came_by_switch, parent = history[i][p][s][1][j]
            if came_by_switch:
                p, s = 1 - p, s - 1
            j = int(parent)
        result.append(tuple(reversed(procs)))
    return result


def pareto_candidates(
    tenant: TenantGraph,
    max_switches: int,
    *,
    allowed_boundaries: Sequence[int] | None = None,
    respect_goal: bool = True,
    resolution: float = 0.0,
) -> list[Candidate]:
    """Pareto set of ``(cpu, gpu, link)`` loads over assignments with ``<= max_switches`` switches.

    ``allowed_boundaries`` restricts switches to those boundaries (``None``: any). With
    ``respect_goal`` only assignments within ``tenant.latency_goal_s`` are kept. Units a processor
    cannot run and infinite transfers are never chosen. Sorted by (max load, latency, assignment);
    may be empty when nothing fits.

    ``resolution == 0`` gives the exact Pareto set. ``resolution > 0`` trades exactness for speed:
    loads are compared on a grid of cell ``resolution * scale`` (``scale`` = the sum over units of
    their cheaper processor cost), so a state is dropped when another is no worse by more than a
    cell in every load. The error compounds at most once per unit; exact fronts grow quickly with
    the chain length and ``max_switches`` (minutes at 300 units and 3 switches), grid fronts do not.
    """
    # A chain of n units switches processor at most n - 1 times: a larger budget allows nothing
    # more, and the search's layers are as wide as the budget.
    k = min(check_switch_budget(max_switches), max(tenant.n_units - 1, 0))
    if not resolution >= 0 or math.isinf(resolution):
        raise InputError(f"expected a resolution >= 0, got {resolution!r}", field="resolution")
    allowed = allowed_cuts(tenant, allowed_boundaries)
    front = Front.of(tenant, resolution, respect_goal)
    tags = Tags()
    history = [first_layer(tenant, k, front)]
    for i in range(1, tenant.n_units):
        can_cut = allowed[i - 1] and math.isfinite(tenant.transfer_s[i - 1])
        history.append(next_layer(tenant, i, history[-1], k, can_cut, front, tags))
    _, ends = close(tenant, history[-1], front, tags)
    goal = tenant.latency_goal_s if respect_goal else None
    result = []
    for assignment in trace_back(history, ends):
        cand = Candidate(assignment, *loads(tenant, assignment), tenant.copy_share)
        if goal is None or cand.latency_s <= goal:
            result.append(cand)
    result.sort(key=lambda c: (max(c.loads), c.latency_s, c.assignment))
    return result


def select(
    candidates: Sequence[Sequence[Candidate]],
    *,
    time_limit_s: float = 60.0,
    rel_gap: float = EXACT_GAP,
) -> tuple[int, ...]:
    """Index of one candidate per tenant minimising the bottleneck (MILP, HiGHS).

    Every list must be non-empty and every load finite. Returns HiGHS's best solution: within
    ``rel_gap`` of the optimum (the default: optimal) unless ``time_limit_s`` ran out.
    """
    if any(len(c) == 0 for c in candidates):
        raise InputError("every tenant needs at least one candidate", field="candidates")
    flat = [c for cs in candidates for c in cs]
    load = np.array([c.loads for c in flat]).T  # 3 x m
    scale = float(load.max()) or 1.0
    m = len(flat)
    # Variables: one binary per candidate, then the bottleneck t.
    rows = [np.append(load[r] / scale, -1.0) for r in range(3)]
    tenant_rows = []
    start = 0
    for cs in candidates:
        row = np.zeros(m + 1)
        row[start : start + len(cs)] = 1.0
        tenant_rows.append(row)
        start += len(cs)
    constraints = [
        LinearConstraint(np.array(rows), -np.inf, 0.0),
        LinearConstraint(np.array(tenant_rows), 1.0, 1.0),
    ]
    cost = np.zeros(m + 1)
    cost[-1] = 1.0
    integrality = np.append(np.ones(m), 0)
    bounds = Bounds(np.zeros(m + 1), np.append(np.ones(m), np.inf))
    res = milp(
        cost,
        constraints=constraints,
        integrality=integrality,
        bounds=bounds,
        options={"time_limit": time_limit_s, "mip_rel_gap": rel_gap},
    )
    if res.x is None:
        raise InfeasibleError(f"phase two found no solution: {res.message}")
    chosen = []
    start = 0
    for cs in candidates:
        chosen.append(int(np.argmax(res.x[start : start + len(cs)])))
        start += len(cs)
    return tuple(chosen)


def _bottleneck(totals: Sequence[float]) -> float:
    return max(totals)


def refine_swaps(
    candidates: Sequence[Sequence[Candidate]], chosen: Sequence[int], *, max_rounds: int = 100
) -> tuple[int, ...]:
    """Best-response candidate swaps per tenant while the bottleneck strictly falls."""
    chosen = list(chosen)
    totals = [sum(candidates[t][c].loads[r] for t, c in enumerate(chosen)) for r in range(3)]
    for _ in range(max_rounds):
        improved = False
        for t, cs in enumerate(candidates):
            base = [totals[r] - cs[chosen[t]].loads[r] for r in range(3)]
            best, best_j = _bottleneck(totals), chosen[t]
            for j, c in enumerate(cs):
                b = _bottleneck([base[r] + c.loads[r] for r in range(3)])
                if b < best:
                    best, best_j = b, j
            if best_j != chosen[t]:
                chosen[t] = best_j
                totals = [base[r] + cs[best_j].loads[r] for r in range(3)]
                improved = True
        if not improved:
            break
    return tuple(chosen)


def _flipped_loads(
    tenant: TenantGraph, a: Assignment, u: int, before: tuple[float, float, float]
) -> tuple[float, float, float] | None:
    """``loads(tenant, a with unit u flipped)`` from ``loads(tenant, a)`` in constant time, or
    ``None`` when the flip makes a load infinite (a unit or copy the platform cannot run)."""
    to_gpu = a[u] == "cpu"
    unit_cpu, unit_gpu = tenant.cpu_s[u], tenant.gpu_s[u]
    if not math.isfinite(unit_gpu if to_gpu else unit_cpu):
        return None
    link = 0.0  # the change of the link load
    for i in (u - 1, u):  # the boundaries on either side of unit u
        if 0 <= i < tenant.n_units - 1:
            t = tenant.transfer_s[i]
            other = a[u + 1] if i == u else a[u - 1]
            if other == a[u]:  # equal before the flip: a cut appears
                if not math.isfinite(t):
                    return None
                link += t
            else:
                link -= t
    n = tenant.n_units
    for at_end, t in ((u == 0, tenant.input_to_gpu_s), (u == n - 1, tenant.output_from_gpu_s)):
        if at_end:
            if to_gpu and not math.isfinite(t):
                return None
            link += t if to_gpu else -t
    cpu, gpu, old_link = before
    share = tenant.copy_share * link
    if to_gpu:
        return cpu - unit_cpu + share, gpu + unit_gpu + share, old_link + link
    return cpu + unit_cpu + share, gpu - unit_gpu + share, old_link + link


def refine_flips(
    problem: Problem,
    assignments: Sequence[Assignment],
    accept: Callable[[TenantGraph, Assignment], bool],
    *,
    max_rounds: int = 10,
) -> tuple[Assignment, ...]:
    """Flip single units while the bottleneck strictly falls and ``accept`` allows the result.

    ``accept`` is the constraint policy (switch budget, allowed cuts); latency goals are always
    enforced here.
    """
    current = [tuple(a) for a in assignments]
    per = [loads(t, a) for t, a in zip(problem.tenants, current, strict=True)]
    totals = [sum(p[r] for p in per) for r in range(3)]
    for _ in range(max_rounds):
        improved = False
        for ti, tenant in enumerate(problem.tenants):
            for u in range(tenant.n_units):
                a = current[ti]
                flipped = (*a[:u], "gpu" if a[u] == "cpu" else "cpu", *a[u + 1 :])
                new = _flipped_loads(tenant, a, u, per[ti])
                if new is None:
                    continue
                goal = tenant.latency_goal_s
                if goal is not None and latency_of(tenant, new) > goal:
                    continue
                cand = [totals[r] - per[ti][r] + new[r] for r in range(3)]
                if _bottleneck(cand) < _bottleneck(totals) and accept(tenant, flipped):
                    current[ti], per[ti], totals = flipped, new, cand
                    improved = True
        if not improved:
            break
    return tuple(current)


def plan_with(
    problem: Problem,
    candidates_of: Callable[[TenantGraph], list[Candidate]],
    *,
    method: str,
    accept: Callable[[TenantGraph, Assignment], bool] | None = None,
    time_limit_s: float = 60.0,
    rel_gap: float = EXACT_GAP,
) -> PlacementPlan:
    """Phase two over the candidates ``candidates_of`` gives each tenant, then refinement.

    ``accept`` (when given) enables single-unit flips that keep an assignment acceptable.
    Raises :class:`InfeasibleError` naming the tenant when it has no candidate (latency goal out
    of reach, or unsupported units that the switch budget cannot route around).
    """
    start = time.perf_counter()
    candidates = []
    for i, tenant in enumerate(problem.tenants):
        cs = candidates_of(tenant)
        if not cs:
            goal = tenant.latency_goal_s
            meets = "" if goal is None else f"meets its latency goal ({goal * 1e3:g} ms) or "
            raise InfeasibleError(
                f"tenant {tenant.name!r}: no assignment allowed by {method!r} {meets}runs every "
                "unit",
                field=f"tenants[{i}].latency_goal_s",
            )
        candidates.append(cs)
    chosen = refine_swaps(
        candidates, select(candidates, time_limit_s=time_limit_s, rel_gap=rel_gap)
    )
    assignments = tuple(cs[c].assignment for cs, c in zip(candidates, chosen, strict=True))
    if accept is not None:
        assignments = refine_flips(problem, assignments, accept)
    return evaluate(problem, assignments, method=method, search_s=time.perf_counter() - start)


def _with_whole_model(tenant: TenantGraph, candidates: list[Candidate]) -> list[Candidate]:
    """Add the whole-model assignments (all CPU, all GPU) where they run and meet the goal.

    On a load grid phase one may drop them; with them, phase two (exact over candidates) is never
    worse than all-CPU, all-GPU or model-level placement.
    """
    present = {c.assignment for c in candidates}
    extra = []
    for processor in PROCESSORS:
        assignment: Assignment = (processor,) * tenant.n_units
        if assignment in present:
            continue
        candidate = Candidate(assignment, *loads(tenant, assignment), tenant.copy_share)
        finite = all(math.isfinite(x) for x in (candidate.cpu_s, candidate.gpu_s, candidate.link_s))
        goal = tenant.latency_goal_s
        if finite and (goal is None or candidate.latency_s <= goal):
            extra.append(candidate)
    return candidates + extra


def plan(
    problem: Problem,
    max_switches: int = 4,
    *,
    resolution: float = DEFAULT_RESOLUTION,
    time_limit_s: float = 60.0,
) -> PlacementPlan:
    """COS: operator-level plan with at most ``max_switches`` switches per tenant.

    ``resolution`` is phase one's grid (see :func:`pareto_candidates`; ``0`` = exact Pareto sets
    and an exact phase two, then the plan is optimal for the switch budget; otherwise phase two
    stops within ``GAP_PER_RESOLUTION * resolution`` of the best choice among the candidates).
    Every returned plan meets every latency goal; :class:`InfeasibleError` otherwise.
    """
    return plan_with(
        problem,
        lambda t: _with_whole_model(t, pareto_candidates(t, max_switches, resolution=resolution)),
        method="cos",
        accept=lambda _t, a: switches(a) <= max_switches,
        time_limit_s=time_limit_s,
        rel_gap=EXACT_GAP if resolution == 0 else GAP_PER_RESOLUTION * resolution,
    )
