"""The interference score: how much a candidate kernel would slow the kernels it joins.

Called by admission policies (``policies.fggr``) before a lower-priority kernel starts beside
higher-priority ones. The score is a predicted *fractional slowdown* of the protected kernels
(0.0 = none, 0.10 = they take 10 % longer), a weighted sum of four features computed from the
kernels' static estimates only (no execution):

- ``bandwidth``: how far combined DRAM demand would exceed the GPU's bandwidth, as a fraction of
  it (the protected kernels then lose bandwidth to the candidate);
- ``same_bound``: the candidate has the same bottleneck (compute with compute, memory with memory)
  as a protected kernel, weighted by the share of the GPU's SMs the candidate occupies;
- ``sm_overflow``: SMs the candidate wants beyond those free, over the GPU's SMs (it would hold SMs
  a protected kernel's next blocks need);
- ``drain``: the candidate's share of SMs times its wave time over the protected kernel's time:
  blocks are never pre-empted, so a protected kernel that needs those SMs next waits for a wave.

The weights are fitted (non-negative least squares) to slowdowns measured in the GPU simulator
over random kernel pairs: ``python bench/gpushare_evidence.py --calibrate`` prints the fit and
its error; :data:`CALIBRATED` holds the numbers it printed.
"""

from __future__ import annotations

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
    demand = sum(bandwidth_share(k, gpu) for k in running) + bandwidth_share(candidate, gpu)
    bandwidth = max(0.0, demand - 1.0)
    sm_share = min(1.0, candidate.sms / sm_count)
    same = sm_share if any(k.bound == candidate.bound for k in protected) else 0.0
    used = sum(k.sms for k in running)
    overflow = max(0, used + candidate.sms - sm_count) / sm_count
    shortest = min(k.time_s for k in protected)
    drain = sm_share * wave_time_s(candidate, gpu) / shortest
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


# Fitted by `python bench/gpushare_evidence.py --calibrate` (see docs/results/gpushare.md).
CALIBRATED = InterferenceModel(bandwidth=1.0, same_bound=0.0, sm_overflow=0.0, drain=1.0)
