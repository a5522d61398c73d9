"""Per-operator kernel estimates: classes, launch shapes, bounds and durations of known shapes."""

from __future__ import annotations

import pytest
from gpushare_estimate_helpers import add, meta, mm, operator

from qosched.core.errors import InputError
from qosched.gpushare.estimate import LAUNCH_OVERHEAD_S, estimate_operator
from qosched.gpushare.kernel_classes import MEMORY_EFFICIENCY, kernel_class, register
from qosched.hardware import gpu

A100 = gpu("a100")


def kernels(op, device="a100", dtype=None):
    return [k for k, _ in estimate_operator(op, device, dtype=dtype)]


def test_large_fp16_gemm_is_compute_bound_with_128_tiles():
    (k,) = kernels(mm(4096, 4096, 4096, "float16"))
    assert k.bound == "compute"
    assert (k.grid, k.block, k.registers_per_thread) == ((32, 32, 1), (256, 1, 1), 128)
    # 3 stages x (128 + 128) rows x 32 halves x 2 bytes.
    assert k.shared_bytes_per_block == 3 * 256 * 32 * 2
    assert k.sms == 108
    # 1024 tiles, 2 resident per SM: waves 4.74, every wave saturates the GPU, so the time is
    # the compute roofline at 75 % of the 312 TFLOP/s FP16 peak plus the launch cost.
    expected = 2 * 4096**3 / (312e12 * 0.75) + LAUNCH_OVERHEAD_S
    assert k.time_s == pytest.approx(expected)


def test_elementwise_add_is_memory_bound_at_the_bandwidth_roofline():
    n = 1 << 26
    (k,) = kernels(add(n))
    assert k.bound == "memory"
    assert k.bytes == 3 * 4 * n
    # 128 threads x 4 floats per block.
    assert k.grid == (n // 512, 1, 1)
    expected = 3 * 4 * n / (2039e9 * MEMORY_EFFICIENCY) + LAUNCH_OVERHEAD_S
    assert k.time_s == pytest.approx(expected)


def test_gemv_is_memory_bound():
    (k,) = kernels(mm(4096, 4096, 1, "float16"))
    assert k.bound == "memory"
    assert "gemv" in k.name


def test_fp32_gemm_of_moderate_size_is_compute_bound_on_a100_and_t4():
    for device in ("a100", "t4"):
        (k,) = kernels(mm(2048, 2048, 2048), device)
        assert k.bound == "compute"


@pytest.mark.parametrize("device", ["t4", "v100", "a100", "h100"])
def test_kernel_time_grows_with_size(device):
    elementwise = [kernels(add(n), device)[0].time_s for n in (1 << 10, 1 << 16, 1 << 22, 1 << 26)]
    gemm = [kernels(mm(s, s, s, "float16"), device)[0].time_s for s in (64, 256, 1024, 4096)]
    # Non-decreasing: below one wave a small kernel's time is one block's latency, whatever the
    # block count; beyond it time grows with the work.
    assert elementwise == sorted(elementwise) and elementwise[-1] > 10 * elementwise[0]
    assert gemm == sorted(gemm) and gemm[-1] > 10 * gemm[0]


def test_small_kernel_uses_few_sms_and_costs_at_least_the_launch():
    (k,) = kernels(add(512))
    assert (k.blocks, k.sms) == (1, 1)
    assert k.time_s > LAUNCH_OVERHEAD_S


def test_float16_halves_the_bytes_of_a_float32_graph_operator():
    op = add(1 << 20)
    (fp32,) = kernels(op, dtype="float32")
    (fp16,) = kernels(op, dtype="float16")
    assert fp16.bytes == fp32.bytes / 2


def test_views_launch_nothing_and_copies_launch_one_kernel():
    x = meta(64, 128)
    view = operator("aten.permute.default", "view", [x], [meta(128, 64)])
    clone = operator("aten.clone.default", "view", [x], [meta(64, 128)])
    assert kernel_class(view) == "view" and kernels(view) == []
    assert kernel_class(clone) == "copy"
    (k,) = kernels(clone)
    assert k.bytes == 2 * x.bytes and k.flops == 0


@pytest.mark.parametrize(
    "target", ["aten._grouped_mm.default", "transformers.grouped_mm_fallback.default"]
)
def test_a_grouped_matmul_of_experts_is_a_gemm(target):
    tokens, experts, k, n = 4096, 8, 1024, 1024
    op = operator(
        target,
        "compute",
        [meta(tokens, k), meta(experts, k, n), meta(experts, dtype="int64")],
        [meta(tokens, n)],
        flops=2 * tokens * k * n,
    )
    assert kernel_class(op) == "gemm"
    (k1,) = kernels(op)
    assert k1.bound == "compute" and k1.flops == 2 * tokens * k * n


def test_addmm_with_one_row_copies_the_bias_then_runs_a_gemv():
    op = operator(
        "aten.addmm.default",
        "compute",
        [meta(256), meta(1, 512), meta(512, 256)],
        [meta(1, 256)],
        flops=2 * 512 * 256,
    )
    names = [k.name for k in kernels(op)]
    assert names == ["bias_copy", "gemm_gemv"]


def test_addmm_with_many_rows_is_one_tiled_gemm():
    op = operator(
        "aten.addmm.default",
        "compute",
        [meta(1024), meta(512, 1024), meta(1024, 1024)],
        [meta(512, 1024)],
        flops=2 * 512 * 1024 * 1024,
    )
    (k,) = kernels(op)
    assert k.name.startswith("gemm_") and k.grid[2] == 1


def test_bmm_puts_the_batch_on_grid_z():
    op = operator(
        "aten.bmm.default",
        "compute",
        [meta(12, 128, 64), meta(12, 64, 128)],
        [meta(12, 128, 128)],
        flops=2 * 12 * 128 * 128 * 64,
    )
    (k,) = kernels(op)
    assert k.grid == (2, 2, 12)  # 64x64 tiles: 12 x 2 x 2 = 48 < 108 SMs of 128-tiles


def test_convolution_is_an_implicit_gemm_and_depthwise_a_direct_kernel():
    # 3x3 conv 64 -> 64 on 8x64x56x56: M = 8*56*56, N = 64, K = 64*9.
    dense = operator(
        "aten.convolution.default",
        "compute",
        [meta(8, 64, 56, 56), meta(64, 64, 3, 3)],
        [meta(8, 64, 56, 56)],
        flops=2 * 8 * 56 * 56 * 64 * 64 * 9,
    )
    (k,) = kernels(dense)
    assert k.name.startswith("conv_implicit_gemm") and k.grid[1] == -(-8 * 56 * 56 // k_rows(k))
    depthwise = operator(
        "aten.convolution.default",
        "compute",
        [meta(8, 64, 56, 56), meta(64, 1, 3, 3)],
        [meta(8, 64, 56, 56)],
        flops=2 * 8 * 56 * 56 * 64 * 9,
    )
    (d,) = kernels(depthwise)
    assert d.name == "conv_depthwise" and d.bound == "memory"


def k_rows(k):
    return int(k.name.rsplit("_", 1)[1].split("x")[0])


def test_fp32_convolution_uses_tf32_on_ampere_but_not_on_volta():
    op = operator(
        "aten.convolution.default",
        "compute",
        [meta(64, 256, 28, 28), meta(256, 256, 3, 3)],
        [meta(64, 256, 28, 28)],
        flops=2 * 64 * 28 * 28 * 256 * 256 * 9,
    )
    (a100,) = kernels(op, "a100")
    (v100,) = kernels(op, "v100")
    # TF32 is 156 TFLOP/s on A100 against 15.7 FP32 on V100: ~10x faster, not 19.5/15.7.
    assert v100.time_s / a100.time_s > 5


def test_embedding_reads_only_the_rows_it_gathers():
    table, ids = meta(30522, 768), meta(1, 128, dtype="int64")
    op = operator("aten.embedding.default", "other", [table, ids], [meta(1, 128, 768)])
    (k,) = kernels(op)
    assert k.bytes == ids.bytes + 2 * 128 * 768 * 4


@pytest.mark.parametrize(
    ("c", "name", "blocks"),
    [
        (128, "softmax_warp", 1536 // 8),
        (512, "softmax_warp", 1536 // 4),
        (4096, "softmax_block", 1536),
    ],
)
def test_softmax_rows(c, name, blocks):
    x = meta(12, 128, c)
    (k,) = kernels(operator("aten._softmax.default", "reduction", [x], [x], flops=x.numel))
    assert (k.name, k.blocks) == (name, blocks)


def test_layer_norm_runs_one_block_per_row():
    x = meta(4, 128, 768)
    op = operator(
        "aten.native_layer_norm.default",
        "reduction",
        [x, meta(768), meta(768)],
        [x, meta(4, 128, 1), meta(4, 128, 1)],
        flops=x.numel,
    )
    (k,) = kernels(op)
    assert k.blocks == 4 * 128 and k.bound == "memory"


def test_global_mean_splits_long_rows_over_blocks():
    x = meta(1 << 24)
    op = operator("aten.mean.default", "reduction", [x], [meta()], flops=x.numel)
    (k,) = kernels(op)
    assert k.blocks > 1 and k.sms > 1


def test_unknown_dtype_and_missing_hardware_path_raise():
    with pytest.raises(InputError, match="unknown dtype"):
        estimate_operator(add(8), "a100", dtype="int8")
    with pytest.raises(InputError, match="no peak for dtype 'bfloat16'"):
        estimate_operator(add(8), "t4", dtype="bfloat16")


def test_duplicate_kernel_class_raises():
    with pytest.raises(InputError, match="already registered"):
        register("gemm")(lambda op, ctx: ())


def test_transposed_and_grouped_convolutions_find_their_groups():
    # ConvTranspose2d(32, 16, 2, stride 2): weight (Cin=32, Cout/g=16, 2, 2), one group.
    transposed = operator(
        "aten.convolution.default",
        "compute",
        [meta(1, 32, 32, 32), meta(32, 16, 2, 2)],
        [meta(1, 16, 64, 64)],
        flops=2 * 32 * 32 * 32 * 16 * 4,
    )
    (k,) = kernels(transposed)
    assert k.name.startswith("conv_implicit_gemm") and k.grid[2] == 1
    # Conv2d(64, 128, 3, groups=4): weight (128, 16, 3, 3) -> 4 groups on grid.z.
    grouped = operator(
        "aten.convolution.default",
        "compute",
        [meta(1, 64, 28, 28), meta(128, 16, 3, 3)],
        [meta(1, 128, 28, 28)],
        flops=2 * 28 * 28 * 128 * 16 * 9,
    )
    (g,) = kernels(grouped)
    assert g.grid[2] == 4


def test_thin_deep_gemm_splits_k_and_reduces():
    # 128x128 output, K = 8192: 4 small tiles on 108 SMs -> split min(27, 8192/256=32, 16) = 16.
    plain, split = kernels(mm(128, 8192, 128, "float16"))
    assert (plain.name, split.name) == ("gemm_64x64", "splitk_reduce")
    assert plain.grid == (2, 2, 16)
    assert split.flops == 128 * 128 * 15
    # Without the split (a K too shallow to split) the same tiles leave 104 SMs idle.
    (shallow,) = kernels(mm(128, 255, 128, "float16"))
    assert shallow.grid == (2, 2, 1)


def test_splitting_k_makes_a_thin_gemm_faster_than_its_unsplit_tiles():
    from qosched.gpushare.estimate import place_kernel
    from qosched.gpushare.kernel_classes import Context, _tiled
    from qosched.hardware.sm_limits import sm_limits

    op = mm(128, 8192, 128, "float16")
    ctx = Context("float16", 108, sm_limits("a100"))
    unsplit = _tiled("gemm", "gemm", 1, 128, 128, op.flops, ctx.traffic(op), 0.75, ctx)
    alone = place_kernel(unsplit, "mm", A100, sm_limits("a100"), "float16")
    assert sum(k.time_s for k in kernels(op)) < alone.time_s
