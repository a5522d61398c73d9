"""The record every part of GPU sharing passes around: one GPU kernel and what it needs.

Estimation (no execution) produces these, the interference model and the admission policies read
them, the GPU simulator and the runtime run them. Plain frozen data, no PyTorch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from qosched.core.errors import InputError

BoundKind = Literal["compute", "memory"]


def _dim3(value: tuple[int, ...], what: str, where: str) -> tuple[int, int, int]:
    if len(value) != 3 or any(not isinstance(v, int) or v < 1 for v in value):
        raise InputError(f"{where}: {what} must be three positive integers, got {value!r}")
    return (value[0], value[1], value[2])


@dataclass(frozen=True)
class Kernel:
    """One kernel launch on a GPU.

    ``op`` names the IR operator that launches it (several kernels may share one operator);
    ``grid``/``block`` are CUDA launch dimensions; ``sms`` is how many SMs the kernel occupies when
    it runs alone (its blocks spread over at most all SMs); ``occupancy`` is resident warps per SM
    over the SM's maximum; ``bytes`` is DRAM traffic; ``time_s`` is its duration alone on the GPU;
    ``bound`` says whether compute or memory bandwidth limits it on that GPU.
    """

    name: str
    op: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    registers_per_thread: int
    shared_bytes_per_block: int
    sms: int
    occupancy: float
    flops: float
    bytes: float
    bound: BoundKind
    time_s: float

    def __post_init__(self) -> None:
        where = f"kernel {self.name!r} (operator {self.op!r})"
        object.__setattr__(self, "grid", _dim3(tuple(self.grid), "grid", where))
        object.__setattr__(self, "block", _dim3(tuple(self.block), "block", where))
        if self.registers_per_thread < 1 or self.shared_bytes_per_block < 0 or self.sms < 1:
            raise InputError(
                f"{where}: registers_per_thread and sms must be >= 1 and shared memory >= 0"
            )
        if not 0.0 < self.occupancy <= 1.0:
            raise InputError(f"{where}: occupancy must be in (0, 1], got {self.occupancy!r}")
        if self.flops < 0 or self.bytes < 0 or not self.time_s > 0:
            raise InputError(f"{where}: flops and bytes must be >= 0 and time_s > 0")
        if self.bound not in ("compute", "memory"):
            raise InputError(f"{where}: bound must be 'compute' or 'memory', got {self.bound!r}")

    @property
    def blocks(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]

    @property
    def threads_per_block(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]
