"""The interference score: how much a candidate kernel would slow the kernels it joins.

Used by admission policies before a lower-priority kernel starts beside higher-priority ones
(``policies.fggr`` weights its predicted SM waits and bandwidth slowdowns with the fitted
``drain`` and ``bandwidth`` weights; ``bench/gpu_validate.py`` scores real pairs). The score
is a predicted *fractional slowdown* of the protected kernels (0.0 = none, 0.10 = they take
10 % longer), a weighted sum of four features computed from the kernels' static estimates only
(no execution):

- ``bandwidth``: how far combined DRAM demand would exceed the GPU's bandwidth, as a fraction of
  it (the protected kernels then lose bandwidth to the candidate);
- ``same_bound``: the candidate has the same bottleneck (compute with compute, memory with memory)
  as a protected kernel, weighted by the share of the GPU's SMs the candidate occupies;
- ``sm_overflow``: SMs the candidate wants beyond those free, over the GPU's SMs (it would hold SMs
  a protected kernel's next blocks need);
- ``drain``: the delay, over the protected kernel's time, of the protected stream's next kernel
  (as long, wanting every SM) while the candidate's blocks hold SMs until their wave ends:
  blocks are never pre-empted.

The weights are fitted (non-negative least squares) to slowdowns measured in the GPU simulator
over random kernel pairs: ``python bench/gpushare_evidence.py calibrate`` prints the fit and
its error; :data:`CALIBRATED` holds the numbers it printed. They are fitted to the simulator
the policies are judged in, which shows neither cache nor memory-controller contention nor clock
changes: ``python bench/gpu_validate.py`` on a CUDA GPU measures real pairwise slowdowns and
prints the score's error against them and the weights they would give.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

from qosched.core.errors import InputError
from qosched.gpushare.kernel import Kernel
from qosched.hardware import Processor

FEATURES = ("bandwidth", "same_bound", "sm_overflow", "drain")

_WARP = 32
# Resident warps per SM: 64 on Volta (sm_70), Ampere (sm_80) and Hopper (sm_90); 32 on Turing
# (sm_75, the T4). CUDA C Programming Guide, "Technical Specifications per Compute Capability".
_MAX_WARPS_PER_SM = {"T4": 32}
_DEFAULT_MAX_WARPS = 64


def bandwidth_share(kernel: Kernel, gpu: Processor) -> float:
    """Fraction of the GPU's DRAM bandwidth ``kernel`` uses when it runs alone (at most 1)."""
    return min(1.0, kernel.bytes / (kernel.time_s * gpu.memory_bandwidth))


def wave_time_s(kernel: Kernel, gpu: Processor) -> float:
    """Duration of one wave of ``kernel``'s blocks alone: how long its SMs stay busy once taken.

    Resident blocks per SM follow from the occupancy (resident warps over the SM's maximum);
    the kernel runs in ``ceil(blocks / (sms * resident))`` waves of equal length.
    """
    max_warps = _MAX_WARPS_PER_SM.get(gpu.name, _DEFAULT_MAX_WARPS)
    warps_per_block = math.ceil(kernel.threads_per_block / _WARP)
    resident = max(1, int(kernel.occupancy * max_warps) // warps_per_block)
    waves = math.ceil(kernel.blocks / (kernel.sms * resident))
    return kernel.time_s / max(1, waves)


def max_min_fair(demands: Sequence[float], capacity: float) -> list[float]:
    """Split ``capacity`` max-min fairly: demands below the equal share are met in full and the
    rest is divided equally among the others. Returns the grants, in the demands' order."""
    grants = [0.0] * len(demands)
    order = sorted(range(len(demands)), key=lambda i: demands[i])
    left = capacity
    for position, i in enumerate(order):
        share = left / (len(order) - position)
        grants[i] = min(demands[i], share)
        left -= grants[i]
    return grants


class FairShare:
    """What :func:`max_min_fair` grants one more demand beside fixed ``others``, for many such
    demands: ``grant(d) == max_min_fair([d, *others], capacity)[0]``, with the same arithmetic
    (so to the last bit), at the cost of a bisection per demand once ``others`` are sorted.

    A demand is met in the order of the sorted demands (ties: the new one first), so what it
    gets depends only on what the smaller of ``others`` left before it."""

    def __init__(self, others: Sequence[float], capacity: float) -> None:
        self._ranked = sorted(others)
        self._count = len(self._ranked) + 1
        left = capacity
        self._lefts = [left]  # what is left before each of the ranked demands
        for position, demand in enumerate(self._ranked):
            left -= min(demand, left / (self._count - position))
            self._lefts.append(left)

    def grant(self, demand: float) -> float:
        position = bisect.bisect_left(self._ranked, demand)
        return min(demand, self._lefts[position] / (self._count - position))


def features(
    candidate: Kernel,
    protected: Sequence[Kernel],
    gpu: Processor,
    *,
    others: Sequence[Kernel] = (),
) -> tuple[float, float, float, float]:
    """The four features (in :data:`FEATURES` order) of starting ``candidate`` now.

    ``protected`` are the running kernels whose slowdown matters (higher priority than the
    candidate); ``others`` are running kernels that only take resources (same or lower priority).
    With nothing protected running every feature is 0.
    """
    if not protected:
        return (0.0, 0.0, 0.0, 0.0)
    sm_count = gpu.sm_count or 1
    running = (*protected, *others)
    used = sum(min(k.sms, sm_count) for k in running)
    held = min(candidate.sms, max(0, sm_count - used))  # the SMs it gets at once
    sm_share = min(1.0, candidate.sms / sm_count)
    fraction = held / candidate.sms
    # Bandwidth split max-min fairly (as the simulator does): the worst protected slowdown.
    demands = [bandwidth_share(k, gpu) for k in running]
    demands.append(fraction * bandwidth_share(candidate, gpu))
    grants = max_min_fair(demands, 1.0)
    bandwidth = max(
        (d / g - 1.0 for d, g in zip(demands[: len(protected)], grants, strict=False) if g > 0),
        default=0.0,
    )
    same = sm_share if any(k.bound == candidate.bound for k in protected) else 0.0
    overflow = max(0, used + candidate.sms - sm_count) / sm_count
    # When the shortest protected kernel ends, the candidate grows into the SMs it frees (its
    # blocks are queued first). The stream's next kernel, taken to be as long and to want every
    # SM, runs on the rest until the candidate's wave ends (blocks are not pre-empted): it is
    # delayed by min(wave * h / S, T * h / (S - h)) for h SMs held, a wave w and its length T.
    shortest = min(k.time_s for k in protected)
    outlives = candidate.time_s / fraction - shortest if fraction > 0 else candidate.time_s
    wave = min(wave_time_s(candidate, gpu), max(0.0, outlives))
    hold = min(candidate.sms, sm_count)
    delay = wave * hold / sm_count
    if hold < sm_count:
        delay = min(delay, shortest * hold / (sm_count - hold))
    drain = delay / shortest
    return (bandwidth, same, overflow, drain)


@dataclass(frozen=True)
class InterferenceModel:
    """Weights of the features; ``score`` is their weighted sum, a predicted fractional slowdown."""

    bandwidth: float
    same_bound: float
    sm_overflow: float
    drain: float

    def __post_init__(self) -> None:
        for name in FEATURES:
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise InputError(f"interference weight {name!r} must be finite and >= 0")

    @property
    def weights(self) -> tuple[float, float, float, float]:
        return (self.bandwidth, self.same_bound, self.sm_overflow, self.drain)

    def score(
        self,
        candidate: Kernel,
        protected: Sequence[Kernel],
        gpu: Processor,
        *,
        others: Sequence[Kernel] = (),
    ) -> float:
        """Predicted fractional slowdown of ``protected`` if ``candidate`` starts now (>= 0)."""
        values = features(candidate, protected, gpu, others=others)
        return sum(w * v for w, v in zip(self.weights, values, strict=True))


# Fitted by `python bench/gpushare_evidence.py calibrate` (docs/results/gpushare.md): on 600
# random pairs on an A100, non-negative least squares gave bandwidth 0.505, drain 0.912 and 0 for
# the other two (the simulator's bandwidth and hand-over terms already carry what they measure);
# on 300 other pairs the score ranks slowdowns with Spearman 0.955.
CALIBRATED = InterferenceModel(bandwidth=0.505, same_bound=0.0, sm_overflow=0.0, drain=0.912)
