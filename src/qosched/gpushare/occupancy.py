"""The CUDA occupancy rules: how many blocks of a kernel fit on one SM, and how many SMs it needs.

These are the rules of NVIDIA's CUDA Occupancy Calculator (``cuda_occupancy.h``): resident blocks
per SM are the minimum of four limits, each computed from the launch configuration and the SM's
limits (:class:`qosched.hardware.sm_limits.SmLimits`):

* blocks: at most ``max_blocks_per_sm``;
* warps: ``floor(max_warps_per_sm / warps_per_block)``;
* registers: each warp's registers are rounded up to the allocation unit (256), each of the four
  sub-partitions holds ``floor(registers_per_sm / 4 / registers_per_warp)`` warps, and the SM holds
  ``floor(4 * that / warps_per_block)`` blocks;
* shared memory: each block's shared memory is rounded up to the allocation unit plus the
  per-block reservation, and ``floor(shared_per_sm / that)`` blocks fit.

A launch that exceeds a per-block limit (threads, registers, shared memory) can never run and
raises InputError.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from qosched.core.errors import InputError
from qosched.hardware.sm_limits import SmLimits


@dataclass(frozen=True)
class Occupancy:
    """Resident blocks per SM and which limit set it; ``occupancy`` = resident warps / max warps."""

    blocks_per_sm: int
    limited_by: str  # "blocks", "warps", "registers" or "shared"
    warps_per_block: int
    occupancy: float


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def occupancy(
    threads_per_block: int, registers_per_thread: int, shared_per_block: int, limits: SmLimits
) -> Occupancy:
    """Resident blocks per SM of a launch with this block size, register and shared-memory use."""
    where = (
        f"a block of {threads_per_block} threads, {registers_per_thread} registers/thread, "
        f"{shared_per_block} B shared on compute capability {limits.compute_capability}"
    )
    if not 1 <= threads_per_block <= limits.max_threads_per_block:
        raise InputError(f"{where}: at most {limits.max_threads_per_block} threads per block")
    if not 1 <= registers_per_thread <= limits.max_registers_per_thread:
        raise InputError(f"{where}: at most {limits.max_registers_per_thread} registers/thread")
    if not 0 <= shared_per_block <= limits.shared_per_block:
        raise InputError(f"{where}: at most {limits.shared_per_block} B shared per block")
    warps = math.ceil(threads_per_block / limits.warp_size)
    regs_per_warp = _round_up(
        registers_per_thread * limits.warp_size, limits.register_allocation_unit
    )
    if regs_per_warp * warps > limits.max_registers_per_block:
        raise InputError(f"{where}: exceeds {limits.max_registers_per_block} registers per block")
    shared = (
        _round_up(shared_per_block, limits.shared_allocation_unit)
        + limits.shared_reserved_per_block
    )
    by = {
        "blocks": limits.max_blocks_per_sm,
        "warps": limits.max_warps_per_sm // warps,
        "registers": (
            limits.sub_partitions
            * ((limits.registers_per_sm // limits.sub_partitions) // regs_per_warp)
            // warps
        ),
        # A block with no shared memory (and no reservation) is not limited by it.
        "shared": limits.shared_per_sm // shared if shared else limits.max_blocks_per_sm,
    }
    # Ties go to the first limit in this order, as the calculator reports them.
    limited_by = min(by, key=lambda k: by[k])
    blocks = by[limited_by]
    if blocks < 1:
        raise InputError(f"{where}: not even one block fits on an SM (limited by {limited_by})")
    return Occupancy(blocks, limited_by, warps, blocks * warps / limits.max_warps_per_sm)


def sms_needed(blocks: int, blocks_per_sm: int, sm_count: int) -> int:
    """SMs a kernel needs: enough to hold all its blocks at once, at most the GPU's SMs."""
    if blocks < 1 or blocks_per_sm < 1 or sm_count < 1:
        raise InputError(
            f"sms_needed: blocks ({blocks}), blocks_per_sm ({blocks_per_sm}) and sm_count "
            f"({sm_count}) must be >= 1"
        )
    return min(sm_count, math.ceil(blocks / blocks_per_sm))


def waves(blocks: int, blocks_per_sm: int, sm_count: int) -> float:
    """How many times the blocks fill the GPU: ``blocks / (blocks_per_sm * sm_count)``."""
    return blocks / (blocks_per_sm * sm_count)


def wave_rate(blocks: int, sm_count: int, warps_per_block: int, saturation_warps: int) -> float:
    """Fraction of the GPU's full rate while ``blocks`` blocks are resident together.

    The block scheduler spreads blocks over SMs first, so ``min(sm_count, blocks)`` SMs work;
    an SM runs at full rate once it holds ``saturation_warps`` warps (enough to hide latency)
    and proportionally below that.
    """
    active = min(sm_count, blocks)
    per_sm = min(1.0, (blocks / active) * warps_per_block / saturation_warps)
    return active / sm_count * per_sm


def duration_scale(
    blocks: int,
    blocks_per_sm: int,
    sm_count: int,
    warps_per_block: int,
    saturation_warps: int,
) -> float:
    """Factor on a whole-GPU roofline time for how the blocks map onto the SMs.

    The blocks run in waves of at most ``blocks_per_sm * sm_count``; each block is an equal share
    of the work, and a wave of ``b`` blocks runs at :func:`wave_rate` of the GPU. The factor is
    ``sum over waves of (b / blocks) / wave_rate(b)``. So a kernel of several full, saturating
    waves has factor 1; a partial last wave costs as long as its blocks take at the rate they
    get (wave quantisation); a kernel smaller than one wave uses only ``min(sm_count, blocks)``
    SMs (the SM fraction) and, with few warps per SM, not even those fully.
    """
    if min(blocks, blocks_per_sm, sm_count, warps_per_block, saturation_warps) < 1:
        raise InputError(
            "duration_scale: blocks, blocks_per_sm, sm_count, warps_per_block and "
            "saturation_warps must be >= 1"
        )
    per_wave = blocks_per_sm * sm_count
    full, tail = divmod(blocks, per_wave)
    scale = (
        full
        * (per_wave / blocks)
        / wave_rate(per_wave, sm_count, warps_per_block, saturation_warps)
    )
    if tail:
        scale += (tail / blocks) / wave_rate(tail, sm_count, warps_per_block, saturation_warps)
    return scale
