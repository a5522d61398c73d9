"""Occupancy, SMs needed and the wave/SM-fraction factor against hand-computed cases."""

from __future__ import annotations

import pytest

from qosched.core.errors import InputError
from qosched.gpushare.occupancy import duration_scale, occupancy, sms_needed, wave_rate
from qosched.hardware import GPUS, gpu
from qosched.hardware.sm_limits import COMPUTE_CAPABILITIES, sm_limits

SM80 = COMPUTE_CAPABILITIES["8.0"]
SM75 = COMPUTE_CAPABILITIES["7.5"]


@pytest.mark.parametrize(
    ("name", "cc"),
    [("T4", "7.5"), ("v100", "7.0"), ("a100", "8.0"), ("h100", "9.0"), ("h200", "9.0")],
)
def test_catalog_gpus_map_to_their_compute_capability(name, cc):
    assert sm_limits(name).compute_capability == cc
    assert sm_limits(gpu(name)) is COMPUTE_CAPABILITIES[cc]


def test_every_catalog_gpu_has_limits():
    for processor in GPUS.values():
        assert sm_limits(processor).warp_size == 32


def test_programming_guide_figures():
    # CUDA C++ Programming Guide, technical specifications table.
    a100, t4, h100 = sm_limits("a100"), sm_limits("t4"), sm_limits("h100")
    assert (a100.max_threads_per_sm, a100.max_blocks_per_sm, a100.shared_per_sm) == (
        2048,
        32,
        164 * 1024,
    )
    assert (t4.max_threads_per_sm, t4.max_blocks_per_sm, t4.shared_per_sm) == (1024, 16, 65536)
    assert h100.shared_per_block == 227 * 1024
    assert a100.registers_per_sm == 65536


def test_unknown_processor_has_no_limits():
    cpu_like = gpu("a100").__class__(
        name="mystery",
        kind="gpu",
        peak_flops={"float32": 1e12},
        memory_bandwidth=1e11,
        memory_bytes=2**30,
        sm_count=4,
        source="test",
    )
    with pytest.raises(InputError, match="known GPUs: A100"):
        sm_limits(cpu_like)


@pytest.mark.parametrize(
    ("limits", "threads", "regs", "shared", "blocks", "limited_by", "occ"),
    [
        # 64 regs x 32 threads = 2048 per warp; 16384 per sub-partition / 2048 = 8 warps,
        # x4 = 32 warps per SM; 256 threads = 8 warps -> 4 blocks; 32/64 warps resident.
        pytest.param(SM80, 256, 64, 0, 4, "registers", 0.5, id="regs-sm80-256x64"),
        # 48 KB + 1 KB reserved = 50176 B per block; 167936 / 50176 -> 3 blocks of 4 warps.
        pytest.param(SM80, 128, 32, 48 * 1024, 3, "shared", 12 / 64, id="shared-sm80-48KB"),
        # One warp per block, few registers, no shared memory: 32 blocks per SM at most.
        pytest.param(SM80, 32, 16, 0, 32, "blocks", 0.5, id="blocks-sm80"),
        pytest.param(SM75, 32, 16, 0, 16, "blocks", 0.5, id="blocks-sm75"),
        # 1024-thread blocks: 64 warps / 32 -> 2 on sm_80; 32 / 32 -> 1 on sm_75.
        pytest.param(SM80, 1024, 32, 0, 2, "warps", 1.0, id="warps-sm80"),
        pytest.param(SM75, 1024, 32, 0, 1, "warps", 1.0, id="warps-sm75"),
        # 255 regs: 8160 -> 8192 per warp, 2 warps per sub-partition, 8 per SM; 4-warp blocks.
        pytest.param(SM80, 128, 255, 0, 2, "registers", 8 / 64, id="regs-255"),
        # 33 regs round up to 40 (1056 -> 1280 per warp): 12 warps per sub-partition.
        pytest.param(SM80, 128, 33, 0, 12, "registers", 48 / 64, id="regs-rounding"),
    ],
)
def test_occupancy_hand_cases(limits, threads, regs, shared, blocks, limited_by, occ):
    result = occupancy(threads, regs, shared, limits)
    assert (result.blocks_per_sm, result.limited_by) == (blocks, limited_by)
    assert result.occupancy == pytest.approx(occ)


@pytest.mark.parametrize(
    ("threads", "regs", "shared"),
    [
        pytest.param(2048, 32, 0, id="too-many-threads"),
        pytest.param(256, 256, 0, id="too-many-registers"),
        pytest.param(256, 32, 200 * 1024, id="too-much-shared"),
        pytest.param(1024, 255, 0, id="registers-per-block"),
    ],
)
def test_impossible_launches_raise(threads, regs, shared):
    with pytest.raises(InputError):
        occupancy(threads, regs, shared, SM80)


@pytest.mark.parametrize(
    ("blocks", "per_sm", "sms", "expected"),
    [(100, 4, 108, 25), (1000, 4, 108, 108), (1, 32, 108, 1), (433, 4, 108, 108)],
)
def test_sms_needed(blocks, per_sm, sms, expected):
    assert sms_needed(blocks, per_sm, sms) == expected


@pytest.mark.parametrize(
    ("blocks", "expected"),
    [
        # 10 SMs x 2 blocks per wave, 8-warp blocks saturating at 8 warps.
        pytest.param(40, 1.0, id="two-full-waves"),
        # One full wave (20/21 of the work, rate 1), then 1 block alone on 1 SM at full SM
        # rate: (1/21) / (1/10). Total 30/21.
        pytest.param(21, 30 / 21, id="one-block-tail"),
        # Half the SMs busy: rate 1/2.
        pytest.param(5, 2.0, id="sm-fraction"),
    ],
)
def test_duration_scale_hand_cases(blocks, expected):
    assert duration_scale(blocks, 2, 10, 8, 8) == pytest.approx(expected)


def test_few_warps_per_sm_run_below_full_rate():
    # 10 blocks of 4 warps on 10 SMs, saturating at 8 warps: every SM at half rate.
    assert wave_rate(10, 10, 4, 8) == pytest.approx(0.5)
    assert duration_scale(10, 4, 10, 4, 8) == pytest.approx(2.0)
