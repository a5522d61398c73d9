"""Roofline and transfer cost models: tiny pure functions over a Processor or a Link.

The roofline time of an operator is ``max(flops / (peak * efficiency), bytes / bandwidth)``
and nothing else: no launch overhead, no cache model, compute and memory traffic assumed to
overlap perfectly. Callers that need launch costs add them explicitly.
"""

from __future__ import annotations

import math
import numbers
from typing import Literal

from qosched.core.errors import InputError
from qosched.hardware.catalog import Link, Processor

Bound = Literal["compute", "memory"]

DEFAULT_SYNC_OVERHEAD_S = 5e-6
"""Host-side cost of issuing one copy and waiting for it (e.g. ``cudaMemcpyAsync`` followed by a
stream synchronize). Microbenchmarks of small host<->device copies typically land at ~5-10 us
end to end, of which the link's own latency (``Link.latency_s``, ~1 us for PCIe) is a part;
5 us is the remaining driver/launch/sync share. An estimate to calibrate, not a constant."""


def _amount(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputError(f"{what}: expected a number >= 0, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise InputError(f"{what}: expected a finite number >= 0, got {value!r}")
    return float(value)


def _efficiency(value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not math.isfinite(value)
        or not 0 < value <= 1
    ):
        raise InputError(f"efficiency: expected a number in (0, 1], got {value!r}")
    return float(value)


def compute_time_s(
    flops: float, processor: Processor, dtype: str = "float32", efficiency: float = 1.0
) -> float:
    """Seconds to execute ``flops`` at ``efficiency`` times the processor's ``dtype`` peak."""
    return _amount(flops, "flops") / (processor.peak(dtype) * _efficiency(efficiency))


def memory_time_s(bytes_moved: float, processor: Processor) -> float:
    """Seconds to move ``bytes_moved`` through the processor's memory at peak bandwidth."""
    return _amount(bytes_moved, "bytes_moved") / processor.memory_bandwidth


def roofline_time_s(
    flops: float,
    bytes_moved: float,
    processor: Processor,
    dtype: str = "float32",
    efficiency: float = 1.0,
) -> float:
    """``max(compute time, memory time)``; ``efficiency`` in (0, 1] scales only the compute peak."""
    return max(
        compute_time_s(flops, processor, dtype, efficiency),
        memory_time_s(bytes_moved, processor),
    )


def arithmetic_intensity(flops: float, bytes_moved: float) -> float:
    """FLOPs per byte; ``inf`` when work moves no bytes, InputError when there is neither."""
    flops = _amount(flops, "flops")
    bytes_moved = _amount(bytes_moved, "bytes_moved")
    if bytes_moved == 0:
        if flops == 0:
            raise InputError("arithmetic intensity is undefined for 0 flops and 0 bytes")
        return math.inf
    return flops / bytes_moved


def ridge_point(processor: Processor, dtype: str = "float32", efficiency: float = 1.0) -> float:
    """Arithmetic intensity (FLOP/byte) at which compute and memory time are equal."""
    return processor.peak(dtype) * _efficiency(efficiency) / processor.memory_bandwidth


def bound(
    flops: float,
    bytes_moved: float,
    processor: Processor,
    dtype: str = "float32",
    efficiency: float = 1.0,
) -> Bound:
    """``"compute"`` when compute time strictly exceeds memory time, else ``"memory"``.

    Ties (exactly at the ridge point, or no work at all) count as memory-bound.
    """
    compute = compute_time_s(flops, processor, dtype, efficiency)
    memory = memory_time_s(bytes_moved, processor)
    return "compute" if compute > memory else "memory"


def transfer_time_s(
    bytes_moved: float, link: Link, sync_overhead_s: float = DEFAULT_SYNC_OVERHEAD_S
) -> float:
    """``link.latency_s + bytes_moved / link.bandwidth + sync_overhead_s`` for one copy.

    The formula applies to 0 bytes too (a copy that is issued still costs latency and sync);
    callers that issue no copy should not call this. ``bandwidth`` is per direction, so a
    copy each way at once takes this long each, not twice as long.
    """
    bytes_moved = _amount(bytes_moved, "bytes_moved")
    sync_overhead_s = _amount(sync_overhead_s, "sync_overhead_s")
    return link.latency_s + bytes_moved / link.bandwidth + sync_overhead_s
