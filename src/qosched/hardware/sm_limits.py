"""Per-SM architecture limits of the catalog GPUs, keyed by compute capability.

What a kernel's occupancy depends on: threads, warps and resident blocks per SM, the register
file, shared memory per SM and per block, and the allocation granularities. The numbers are the
CUDA C++ Programming Guide's "Technical Specifications per Compute Capability" table (CUDA 12.x,
columns 7.0, 7.5, 8.0 and 9.0) and, for the allocation units, the CUDA Occupancy Calculator
(``cuda_occupancy.h`` in the CUDA toolkit), which encodes the same rules the hardware applies.

Shared memory per SM is the largest carve-out (the L1/shared split a kernel gets when it asks
for it, as cuBLAS/cuDNN kernels do); ``shared_per_block`` is the opt-in maximum for one block
(``cudaFuncAttributeMaxDynamicSharedMemorySize``), not the 48 KB static default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from qosched.core.errors import InputError
from qosched.hardware.catalog import GPUS, Processor, gpu

_KB = 1024


@dataclass(frozen=True)
class SmLimits:
    """Resource limits of one streaming multiprocessor for one compute capability."""

    compute_capability: str
    warp_size: int
    max_threads_per_block: int
    max_threads_per_sm: int
    max_warps_per_sm: int
    max_blocks_per_sm: int
    registers_per_sm: int
    max_registers_per_block: int
    max_registers_per_thread: int
    shared_per_sm: int
    shared_per_block: int
    # Registers are handed out per warp in units of this many (rounded up).
    register_allocation_unit: int
    # Warps are split over this many schedulers (sub-partitions), each with a quarter of the
    # register file: a warp's registers must fit in one sub-partition.
    sub_partitions: int
    # Shared memory is handed out per block in units of this many bytes (rounded up)...
    shared_allocation_unit: int
    # ...plus this much the driver reserves per resident block (8.x and later).
    shared_reserved_per_block: int
    source: str

    def __post_init__(self) -> None:
        for name in (
            "warp_size",
            "max_threads_per_block",
            "max_threads_per_sm",
            "max_warps_per_sm",
            "max_blocks_per_sm",
            "registers_per_sm",
            "max_registers_per_block",
            "max_registers_per_thread",
            "shared_per_sm",
            "shared_per_block",
            "register_allocation_unit",
            "sub_partitions",
            "shared_allocation_unit",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise InputError(
                    f"SM limits of compute capability {self.compute_capability}: {name} must "
                    f"be a positive integer, got {value!r}"
                )
        if self.max_warps_per_sm * self.warp_size != self.max_threads_per_sm:
            raise InputError(
                f"SM limits of compute capability {self.compute_capability}: warps x warp size "
                "must equal the threads per SM"
            )


_GUIDE = (
    "CUDA C++ Programming Guide, 'Technical Specifications per Compute Capability' table, "
    "column {cc}; allocation units from the CUDA Occupancy Calculator (cuda_occupancy.h)"
)

COMPUTE_CAPABILITIES: Mapping[str, SmLimits] = MappingProxyType(
    {
        limits.compute_capability: limits
        for limits in (
            # Volta: 96 KB unified L1/shared, all of it usable as shared memory by opt-in.
            SmLimits(
                compute_capability="7.0",
                warp_size=32,
                max_threads_per_block=1024,
                max_threads_per_sm=2048,
                max_warps_per_sm=64,
                max_blocks_per_sm=32,
                registers_per_sm=64 * _KB,
                max_registers_per_block=64 * _KB,
                max_registers_per_thread=255,
                shared_per_sm=96 * _KB,
                shared_per_block=96 * _KB,
                register_allocation_unit=256,
                sub_partitions=4,
                shared_allocation_unit=256,
                shared_reserved_per_block=0,
                source=_GUIDE.format(cc="7.0"),
            ),
            # Turing halves the threads, warps and blocks per SM of Volta; 64 KB shared.
            SmLimits(
                compute_capability="7.5",
                warp_size=32,
                max_threads_per_block=1024,
                max_threads_per_sm=1024,
                max_warps_per_sm=32,
                max_blocks_per_sm=16,
                registers_per_sm=64 * _KB,
                max_registers_per_block=64 * _KB,
                max_registers_per_thread=255,
                shared_per_sm=64 * _KB,
                shared_per_block=64 * _KB,
                register_allocation_unit=256,
                sub_partitions=4,
                shared_allocation_unit=256,
                shared_reserved_per_block=0,
                source=_GUIDE.format(cc="7.5"),
            ),
            # A100: 164 KB shared per SM, 163 KB per block; 1 KB reserved per block.
            SmLimits(
                compute_capability="8.0",
                warp_size=32,
                max_threads_per_block=1024,
                max_threads_per_sm=2048,
                max_warps_per_sm=64,
                max_blocks_per_sm=32,
                registers_per_sm=64 * _KB,
                max_registers_per_block=64 * _KB,
                max_registers_per_thread=255,
                shared_per_sm=164 * _KB,
                shared_per_block=163 * _KB,
                register_allocation_unit=256,
                sub_partitions=4,
                shared_allocation_unit=128,
                shared_reserved_per_block=1 * _KB,
                source=_GUIDE.format(cc="8.0"),
            ),
            # Hopper: 228 KB shared per SM, 227 KB per block; 1 KB reserved per block.
            SmLimits(
                compute_capability="9.0",
                warp_size=32,
                max_threads_per_block=1024,
                max_threads_per_sm=2048,
                max_warps_per_sm=64,
                max_blocks_per_sm=32,
                registers_per_sm=64 * _KB,
                max_registers_per_block=64 * _KB,
                max_registers_per_thread=255,
                shared_per_sm=228 * _KB,
                shared_per_block=227 * _KB,
                register_allocation_unit=256,
                sub_partitions=4,
                shared_allocation_unit=128,
                shared_reserved_per_block=1 * _KB,
                source=_GUIDE.format(cc="9.0"),
            ),
        )
    }
)

# Catalog GPU (lower-case canonical name) -> compute capability (CUDA GPUs list,
# developer.nvidia.com/cuda-gpus: T4 7.5, V100 7.0, A100 8.0, H100 and H200 9.0).
GPU_COMPUTE_CAPABILITY: Mapping[str, str] = MappingProxyType(
    {
        "t4": "7.5",
        "v100-sxm2-32gb": "7.0",
        "a100-sxm4-80gb": "8.0",
        "h100-sxm5-80gb": "9.0",
        "h200-sxm-141gb": "9.0",
    }
)
assert set(GPU_COMPUTE_CAPABILITY) == set(GPUS), "every catalog GPU needs a compute capability"


def sm_limits(device: Processor | str) -> SmLimits:
    """The per-SM limits of a catalog GPU, given as a Processor or a name (aliases work).

    A Processor that is not in the catalog raises InputError naming the catalog GPUs: its
    compute capability is unknown.
    """
    processor = gpu(device) if isinstance(device, str) else device
    key = processor.name.lower()
    if processor.kind != "gpu" or key not in GPU_COMPUTE_CAPABILITY:
        known = ", ".join(sorted(p.name for p in GPUS.values()))
        raise InputError(
            f"no SM limits for processor {processor.name!r}: its compute capability is unknown; "
            f"known GPUs: {known}"
        )
    return COMPUTE_CAPABILITIES[GPU_COMPUTE_CAPABILITY[key]]
