"""Upper bound on COS throughput from the LP relaxation of the assignment.

Unit ``i`` of a tenant runs a fraction ``x_i`` on the GPU and ``1 - x_i`` on the CPU; the cut
between ``i`` and ``i + 1`` is charged ``transfer_s[i] * z_i`` with ``z_i >= |x_i - x_{i+1}|``
(two linear inequalities); host transfers are charged ``input_to_gpu_s * x_0`` and
``output_from_gpu_s * x_{n-1}``; each copy also charges ``copy_share`` of its time to the CPU and
the GPU loads (``placement.ir``). The LP minimises ``t`` with every summed load ``<= t``. Every
integral assignment is feasible, so ``1 / t*`` bounds the throughput of every plan, whatever its
switch count, latency goals ignored (the bound also covers baselines that miss goals).
Unsupported units fix ``x_i``; infinite transfers force ``z_i = 0``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linprog

from qosched.core.errors import QoschedError
from qosched.placement.ir import Problem, throughput_of


@dataclass(frozen=True)
class Bound:
    """The LP's optimal bottleneck and the throughput bound it gives (requests/s per tenant)."""

    bottleneck_s: float
    throughput_rps: float


def lp_bound(problem: Problem) -> Bound:
    """Solve the relaxation with HiGHS."""
    n_x = sum(t.n_units for t in problem.tenants)
    n_z = sum(t.n_units - 1 for t in problem.tenants)
    nv = n_x + n_z + 1  # x..., z..., t
    load = np.zeros((3, nv))
    const = np.zeros(3)  # load that does not depend on x (CPU cost of fractions on the CPU)
    bounds: list[tuple[float, float]] = [(0.0, 1.0)] * (n_x + n_z) + [(0.0, None)]
    a_ub: list[np.ndarray] = []
    xi = 0
    zi = n_x
    for t in problem.tenants:
        for i in range(t.n_units):
            c, g = t.cpu_s[i], t.gpu_s[i]
            if math.isinf(c):
                bounds[xi + i] = (1.0, 1.0)
            elif math.isinf(g):
                bounds[xi + i] = (0.0, 0.0)
            if math.isfinite(c):
                const[0] += c
                load[0, xi + i] -= c
            if math.isfinite(g):
                load[1, xi + i] += g
        for i in range(t.n_units - 1):
            if math.isinf(t.transfer_s[i]):
                bounds[zi + i] = (0.0, 0.0)
            else:
                load[:, zi + i] += t.transfer_s[i] * np.array([t.copy_share, t.copy_share, 1.0])
            for sign in (1.0, -1.0):
                row = np.zeros(nv)
                row[xi + i], row[xi + i + 1], row[zi + i] = sign, -sign, -1.0
                a_ub.append(row)
        for idx, cost in ((xi, t.input_to_gpu_s), (xi + t.n_units - 1, t.output_from_gpu_s)):
            if math.isinf(cost):
                bounds[idx] = (0.0, 0.0) if bounds[idx] != (1.0, 1.0) else bounds[idx]
            else:
                load[:, idx] += cost * np.array([t.copy_share, t.copy_share, 1.0])
        xi += t.n_units
        zi += t.n_units - 1
    for r in range(3):
        row = load[r].copy()
        row[-1] = -1.0
        a_ub.append(row)
    b_ub = np.concatenate([np.zeros(2 * n_z), -const])
    scale = max(float(np.abs(load).max()), float(const.max()), 1e-300)
    a = np.array(a_ub)
    a[-3:, :-1] /= scale
    b_ub[-3:] /= scale
    cost = np.zeros(nv)
    cost[-1] = 1.0
    res = linprog(cost, A_ub=a, b_ub=b_ub, bounds=bounds, method="highs")
    if res.status == 2:  # a tenant that cannot run at all
        return Bound(math.inf, 0.0)
    if not res.success:
        raise QoschedError(f"LP bound failed: {res.message}")
    bottleneck = float(res.x[-1]) * scale
    return Bound(bottleneck, throughput_of(bottleneck))
