"""Hardware the cost models reason about: a catalog of GPUs and links, this machine's measured
CPU, per-SM limits of the catalog GPUs, and roofline / transfer-time formulas.

Shared by operator placement (``qosched.placement``) and GPU sharing (``qosched.gpushare``);
no PyTorch here. Every catalog number carries a ``source`` saying where it comes from.
"""

from qosched.hardware.catalog import GPUS, LINKS, Link, Processor, ProcessorKind, gpu, link
from qosched.hardware.measure import default_cache_path, measure_cpu
from qosched.hardware.roofline import (
    DEFAULT_SYNC_OVERHEAD_S,
    Bound,
    arithmetic_intensity,
    bound,
    compute_time_s,
    memory_time_s,
    ridge_point,
    roofline_time_s,
    transfer_time_s,
)
from qosched.hardware.sm_limits import COMPUTE_CAPABILITIES, SmLimits, sm_limits

__all__ = [
    "COMPUTE_CAPABILITIES",
    "DEFAULT_SYNC_OVERHEAD_S",
    "GPUS",
    "LINKS",
    "Bound",
    "Link",
    "Processor",
    "ProcessorKind",
    "SmLimits",
    "arithmetic_intensity",
    "bound",
    "compute_time_s",
    "default_cache_path",
    "gpu",
    "link",
    "measure_cpu",
    "memory_time_s",
    "ridge_point",
    "roofline_time_s",
    "sm_limits",
    "transfer_time_s",
]
