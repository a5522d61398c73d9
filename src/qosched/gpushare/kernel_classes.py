"""Which kernels an operator launches, and each one's launch shape, by operator class.

An operator of the captured IR is first classified (:func:`kernel_class`: gemm, conv, attention,
softmax, norm, reduction, gather, pool, elementwise, copy, other, or view), then the class's tiny
registered function turns its shapes into :class:`KernelPlan` s: grid, block, registers per
thread, shared memory per block, the FLOPs and DRAM bytes of each kernel, and which peak and
achievable efficiencies bound it. Nothing runs: only shapes and the IR's FLOPs are read.

The launch shapes follow what PyTorch's CUDA kernels and cuBLAS/cuDNN do for each class,
simplified to one or two variants per class; every constant below says where it comes from.
Efficiencies are *achievable fractions of the datasheet peak*, stated once here:

* ``GEMM_COMPUTE_EFFICIENCY`` 0.75: cuBLAS reaches 70-85 % of the dense peak on large GEMMs
  (both tensor-core FP16 and CUDA-core SGEMM); 0.75 sits in that band.
* ``CONV_COMPUTE_EFFICIENCY`` 0.6: cuDNN's implicit-GEMM convolutions run below cuBLAS on CNN
  layer shapes (im2col address arithmetic, small channel counts, filter-size tails).
* ``ATTENTION_COMPUTE_EFFICIENCY`` 0.6: FlashAttention-2 reports ~50-70 % of peak in its forward
  pass on A100.
* ``CUDA_CORE_EFFICIENCY`` 0.5: elementwise, reduction and gather kernels do their arithmetic on
  CUDA cores in float (PyTorch's ``opmath``), with index arithmetic beside it; they are memory
  bound by orders of magnitude, so this constant only matters for a pathological shape.
* ``MEMORY_EFFICIENCY`` 0.8: streaming kernels (STREAM-like copies, PyTorch's vectorised
  elementwise loops) reach ~80-90 % of the datasheet DRAM bandwidth on HBM GPUs.

An SM reaches its full rate once it holds ``saturation_warps`` warps: 16 (four per scheduler,
the usual latency-hiding need) by default, ``TILED_SATURATION_WARPS`` = 8 for tiled GEMM,
convolution and attention kernels, whose mainloops are built to run near peak at one or two
blocks of 4-8 warps per SM (instruction-level parallelism from large register tiles).

Float32 GEMMs use the CUDA-core FP32 peak (PyTorch's default: ``torch.backends.cuda.matmul.
allow_tf32`` is off); float32 convolutions use TF32 tensor cores on compute capability 8.0 and
later, because ``torch.backends.cudnn.allow_tf32`` is on by default.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from qosched.core.errors import InputError
from qosched.graph.ir import ELEMENTWISE, REDUCTION, VIEW, Operator, TensorMeta
from qosched.hardware.sm_limits import SmLimits

GEMM_COMPUTE_EFFICIENCY = 0.75
CONV_COMPUTE_EFFICIENCY = 0.6
ATTENTION_COMPUTE_EFFICIENCY = 0.6
CUDA_CORE_EFFICIENCY = 0.5
MEMORY_EFFICIENCY = 0.8

TILED_SATURATION_WARPS = 8

FLOATING = frozenset({"float16", "bfloat16", "float32", "float64"})
_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}


@dataclass(frozen=True)
class KernelPlan:
    """One kernel an operator launches, before it is placed on a GPU.

    ``tensor_cores``: its FLOPs run at the dtype's (tensor-core) peak; otherwise at the FP32
    CUDA-core peak. ``tf32``: in float32 on compute capability 8.0 and later it runs on TF32
    tensor cores (half the FP16 tensor rate: 156 of 312 TFLOP/s on A100, 494.7 of 989.5 on
    H100, as the datasheets print). The efficiencies scale those peaks and the DRAM bandwidth;
    ``saturation_warps`` is the warps per SM at which an SM reaches its full rate.
    """

    name: str
    kernel_class: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    registers_per_thread: int
    shared_bytes_per_block: int
    flops: float
    bytes: float
    tensor_cores: bool
    compute_efficiency: float
    memory_efficiency: float = MEMORY_EFFICIENCY
    saturation_warps: int = 16
    tf32: bool = False


@dataclass(frozen=True)
class Context:
    """What a class function may read besides the operator: the dtype costed (``dtype``; the
    graph's floating-point tensors are re-sized to it) and the GPU's SM count and limits."""

    dtype: str
    sm_count: int
    limits: SmLimits

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self.dtype]

    def nbytes(self, meta: TensorMeta) -> int:
        """Bytes of ``meta`` with floating-point tensors in ``dtype`` (indices keep their size)."""
        return meta.numel * self.itemsize if meta.dtype in FLOATING else meta.bytes

    def traffic(self, op: Operator) -> int:
        """The IR's DRAM bytes of ``op`` (every input read once, every output written once)."""
        return sum(self.nbytes(m) for m in (*op.input_meta, *op.output_meta))


ClassFn = Callable[[Operator, Context], tuple[KernelPlan, ...]]
_CLASSES: dict[str, ClassFn] = {}


def register(name: str) -> Callable[[ClassFn], ClassFn]:
    """Register the kernel function of operator class ``name``; a duplicate name raises."""

    def wrap(fn: ClassFn) -> ClassFn:
        if name in _CLASSES:
            raise InputError(f"kernel class {name!r} is already registered")
        _CLASSES[name] = fn
        return fn

    return wrap


def class_function(name: str) -> ClassFn:
    """The registered function of class ``name``; an unknown name lists the known ones."""
    try:
        return _CLASSES[name]
    except KeyError:
        raise InputError(
            f"unknown kernel class {name!r}; known classes: {', '.join(sorted(_CLASSES))}"
        ) from None


def kernel_classes() -> Mapping[str, ClassFn]:
    return MappingProxyType(_CLASSES)


# ATen operator (target without its overload) -> class. Anything not listed goes by IR kind.
_TARGET_CLASS: Mapping[str, str] = MappingProxyType(
    {
        **dict.fromkeys(
            (
                *("mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "mv", "addmv", "dot"),
                *("_grouped_mm", "grouped_mm_fallback"),  # experts of a mixture, one launch
            ),
            "gemm",
        ),
        **dict.fromkeys(
            ("convolution", "_convolution", "conv1d", "conv2d", "conv3d", "cudnn_convolution"),
            "conv",
        ),
        **dict.fromkeys(
            (
                "scaled_dot_product_attention",
                "_scaled_dot_product_flash_attention",
                "_scaled_dot_product_efficient_attention",
                "_scaled_dot_product_cudnn_attention",
                "_scaled_dot_product_flash_attention_for_cpu",
                "_flash_attention_forward",
            ),
            "attention",
        ),
        **dict.fromkeys(("_softmax", "softmax", "_log_softmax", "log_softmax"), "softmax"),
        **dict.fromkeys(
            ("native_layer_norm", "layer_norm", "native_group_norm", "group_norm", "rms_norm"),
            "norm",
        ),
        **dict.fromkeys(("embedding", "index_select", "gather", "embedding_bag"), "gather"),
        **dict.fromkeys(
            (
                "max_pool2d_with_indices",
                "max_pool2d",
                "avg_pool2d",
                "max_pool3d_with_indices",
                "avg_pool3d",
                "_adaptive_avg_pool2d",
                "adaptive_max_pool2d",
            ),
            "pool",
        ),
        **dict.fromkeys(("clone", "copy", "copy_", "_to_copy", "lift_fresh_copy"), "copy"),
        **dict.fromkeys(
            ("native_batch_norm", "_native_batch_norm_legit_no_training", "batch_norm"),
            "batch_norm",
        ),
    }
)


def _base(target: str) -> str:
    """``"aten.addmm.default"`` -> ``"addmm"``; a library's operator too
    (``"transformers.grouped_mm_fallback.default"`` -> ``"grouped_mm_fallback"``)."""
    parts = target.split(".")
    return parts[1] if len(parts) == 3 or (len(parts) >= 2 and parts[0] == "aten") else parts[0]


def kernel_class(op: Operator) -> str:
    """The class whose function estimates ``op``'s kernels; ``"view"`` launches none."""
    cls = _TARGET_CLASS.get(_base(op.target))
    if cls is not None:
        return cls
    if op.kind == VIEW:
        return "view"
    if op.kind == ELEMENTWISE:
        return "elementwise"
    if op.kind == REDUCTION:
        return "reduction"
    return "other"


def plan_kernels(op: Operator, ctx: Context) -> tuple[KernelPlan, ...]:
    """The kernels ``op`` launches, in launch order (none for a view or an empty output)."""
    try:
        return class_function(kernel_class(op))(op, ctx)
    except InputError:
        raise
    except Exception as e:  # a class function met a shape it does not expect
        raise InputError(
            f"operator {op.name!r} ({op.target}): cannot estimate its kernels: "
            f"{type(e).__name__}: {e}"
        ) from e


# ---- helpers -------------------------------------------------------------------------------


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _pow2(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, n))))


def _grid(blocks: int) -> tuple[int, int, int]:
    # grid.x may hold up to 2**31 - 1 blocks on every GPU here; use y beyond that.
    if blocks <= 2**31 - 1:
        return (max(1, blocks), 1, 1)
    return (2**31 - 1, _cdiv(blocks, 2**31 - 1), 1)


def _out(op: Operator) -> TensorMeta | None:
    outs = [m for m in op.output_meta if m.numel > 0]
    return outs[0] if outs else None


def _streaming(
    name: str, cls: str, elements: int, flops: float, nbytes: float, ctx: Context
) -> KernelPlan:
    """PyTorch's vectorised elementwise launch (``ATen/native/cuda/Loops.cuh``): 128 threads per
    block, each thread handles one 16-byte vector (4 float32 or 8 float16 elements), so one block
    covers 128 x that many elements and the grid covers the tensor once (no grid-stride loop).
    ~32 registers, no shared memory."""
    per_thread = max(4, 16 // ctx.itemsize)
    blocks = _cdiv(elements, 128 * per_thread)
    return KernelPlan(
        name, cls, _grid(blocks), (128, 1, 1), 32, 0, flops, nbytes, False, CUDA_CORE_EFFICIENCY
    )


def _per_output(name: str, cls: str, outputs: int, flops: float, nbytes: float) -> KernelPlan:
    """One thread per output element in 256-thread blocks, ~32 registers, no shared memory, on
    CUDA cores: PyTorch's simple kernels (pooling, depthwise convolution, short reductions)."""
    return KernelPlan(
        name, cls, _grid(_cdiv(outputs, 256)), (256, 1, 1), 32, 0, flops, nbytes, False,
        CUDA_CORE_EFFICIENCY,
    )  # fmt: skip


# ---- GEMM and convolution (tiled, implicit GEMM for convolutions) --------------------------

# Tile variants: (rows, cols, threads, registers/thread). 128x128 with 256 threads (8 warps, each
# a 64x32 accumulator fragment) is cuBLAS/CUTLASS's default large tile at ~128 registers;
# 64x64 with 128 threads at ~96 registers is its small-problem tile, chosen when 128x128 tiles
# would not give every SM one tile.
_TILE_LARGE = (128, 128, 256, 128)
_TILE_SMALL = (64, 64, 128, 96)


def _tile(batch: int, m: int, n: int, sm_count: int) -> tuple[int, int, int, int]:
    big = batch * _cdiv(m, 128) * _cdiv(n, 128)
    return _TILE_LARGE if big >= sm_count else _TILE_SMALL


def _tiled(
    name: str,
    cls: str,
    batch: int,
    m: int,
    n: int,
    flops: float,
    nbytes: float,
    efficiency: float,
    ctx: Context,
    *,
    tf32: bool = False,
    split: int = 1,
) -> KernelPlan:
    """One output tile per block. Shared memory holds the A and B tiles of one K-slice of
    64 bytes (32 float16 or 16 float32 values) per pipeline stage: 3 stages on 8.x and later
    (``cp.async`` multistage mainloops), 2 (double buffering) before. ``split`` > 1 splits K
    over that many blocks per tile (grid.z)."""
    bm, bn, threads, regs = _tile(batch, m, n, ctx.sm_count)
    stages = 3 if float(ctx.limits.compute_capability) >= 8.0 else 2
    bk = 64 // ctx.itemsize
    shared = stages * (bm + bn) * bk * ctx.itemsize
    grid = (_cdiv(n, bn), _cdiv(m, bm), batch * split)
    return KernelPlan(
        f"{name}_{bm}x{bn}",
        cls,
        grid,
        (threads, 1, 1),
        regs,
        shared,
        flops,
        nbytes,
        True,
        efficiency,
        saturation_warps=TILED_SATURATION_WARPS,
        tf32=tf32,
    )


def _gemv(name: str, outputs: int, flops: float, nbytes: float, ctx: Context) -> KernelPlan:
    """A matrix-vector product (one output dimension <= 4): one warp per output element,
    8 warps (256 threads) per block, ~40 registers; it streams the matrix once."""
    return KernelPlan(
        f"{name}_gemv",
        "gemm",
        _grid(_cdiv(outputs, 8)),
        (256, 1, 1),
        40,
        0,
        flops,
        nbytes,
        False,
        CUDA_CORE_EFFICIENCY,
    )


@register("gemm")
def gemm(op: Operator, ctx: Context) -> tuple[KernelPlan, ...]:
    """mm/addmm/bmm/baddbmm/mv: output ``(*batch, M, N)``; K = FLOPs / (2 * output elements).

    ``addmm`` with a single output row is not a cuBLASLt bias-epilogue case in PyTorch: it
    first copies the broadcast bias into the output (a copy kernel), then runs the GEMV that
    accumulates onto it, so it launches two kernels. A thin, deep GEMM splits K
    (:func:`_split_k`): the tiled kernel writes float32 partial sums and a reduction kernel
    adds them into the output, two kernels too."""
    out = _out(op)
    if out is None:
        return ()
    shape = out.shape if len(out.shape) >= 2 else (out.shape[0] if out.shape else 1, 1)
    m, n = shape[-2], shape[-1]
    batch = math.prod(shape[:-2])
    outputs = batch * m * n
    total = ctx.traffic(op)
    if min(m, n) <= 4:
        kernels = []
        if _base(op.target) in ("addmm", "baddbmm", "addmv") and len(op.input_meta) == 3:
            bias = ctx.nbytes(op.input_meta[0]) + ctx.nbytes(out)
            kernels.append(_streaming("bias_copy", "copy", outputs, 0.0, bias, ctx))
            total += ctx.nbytes(out)  # the GEMV reads the copied bias back
        kernels.append(_gemv("gemm", outputs, op.flops, total, ctx))
        return tuple(kernels)
    depth = max(1, round(op.flops / (2 * outputs)))
    split = _split_k(batch, m, n, depth, ctx.sm_count)
    if split == 1:
        plan = _tiled("gemm", "gemm", batch, m, n, op.flops, total, GEMM_COMPUTE_EFFICIENCY, ctx)
        return (plan,)
    partials = outputs * split * 4  # float32 partial sums, written once and read once
    out_bytes = ctx.nbytes(out)
    main = _tiled(
        "gemm",
        "gemm",
        batch,
        m,
        n,
        op.flops,
        total - out_bytes + partials,
        GEMM_COMPUTE_EFFICIENCY,
        ctx,
        split=split,
    )
    reduce = _streaming(
        "splitk_reduce", "gemm", outputs, outputs * (split - 1), partials + out_bytes, ctx
    )
    return (main, reduce)


SPLIT_K_MIN_DEPTH = 256
"""Each K split keeps at least this much of K (8 slices of 32), so that its mainloop still
amortises the prologue and epilogue."""


def _split_k(batch: int, m: int, n: int, depth: int, sm_count: int) -> int:
    """cuBLAS's split-K for thin, deep problems (its ``splitKreduce_kernel`` shows up in
    profiles): when even small tiles leave SMs idle, K is split so that tiles x splits covers
    the SMs, at most 16 ways and each split at least ``SPLIT_K_MIN_DEPTH`` deep; 1 = no split."""
    if batch * _cdiv(m, 128) * _cdiv(n, 128) >= sm_count:
        return 1  # large tiles already fill the GPU
    tiles = batch * _cdiv(m, 64) * _cdiv(n, 64)
    split = min(_cdiv(sm_count, tiles), depth // SPLIT_K_MIN_DEPTH, 16)
    return max(1, split)


@register("conv")
def conv(op: Operator, ctx: Context) -> tuple[KernelPlan, ...]:
    """Convolution ``x (N, Cin, *S)``, ``w (Cout, Cin/g, *k)`` (or transposed): depthwise
    (g == Cin > 1) runs a direct kernel, one thread per output element in 256-thread blocks, ~32
    registers, memory bound; otherwise implicit GEMM with M = N * output pixels,
    N = Cout / g, K = Cin/g * kernel size, the g groups as grid.z."""
    out = _out(op)
    if out is None:
        return ()
    x, w = op.input_meta[0], op.input_meta[1]
    # The weight is (Cout, Cin/g, *k), or (Cin, Cout/g, *k) when transposed: either way its
    # first two sizes multiply to Cin * Cout / g.
    groups = max(1, x.shape[1] * out.shape[1] // (w.shape[0] * w.shape[1]))
    total = ctx.traffic(op)
    if groups > 1 and groups == x.shape[1]:
        return (_per_output("conv_depthwise", "conv", out.numel, op.flops, total),)
    m = out.shape[0] * math.prod(out.shape[2:])
    n = out.shape[1] // groups
    plan = _tiled(
        "conv_implicit_gemm",
        "conv",
        groups,
        m,
        n,
        op.flops,
        total,
        CONV_COMPUTE_EFFICIENCY,
        ctx,
        tf32=True,
    )
    return (plan,)


@register("attention")
def attention(op: Operator, ctx: Context) -> tuple[KernelPlan, ...]:
    """Fused attention, FlashAttention-2 style: q ``(B, H, L, D)``; one block per 128 query
    rows per head (grid ``(ceil(L/128), B*H)``), 4 warps for D <= 64 and 8 beyond; shared
    memory holds the Q tile (128 x D) and K/V tiles (64 x D each); ~255 registers (the
    accumulators live in registers)."""
    q = op.input_meta[0]
    if q.numel == 0:
        return ()
    *lead, length, dim = q.shape
    heads = math.prod(lead)
    threads = 128 if dim <= 64 else 256
    shared = (128 * dim + 2 * 64 * dim) * ctx.itemsize
    return (
        KernelPlan(
            "flash_attention_fwd",
            "attention",
            (_cdiv(length, 128), heads, 1),
            (threads, 1, 1),
            255,
            shared,
            op.flops,
            ctx.traffic(op),
            True,
            ATTENTION_COMPUTE_EFFICIENCY,
            saturation_warps=TILED_SATURATION_WARPS,
        ),
    )


# ---- reductions, normalisations, softmax ---------------------------------------------------


@register("softmax")
def softmax(op: Operator, ctx: Context) -> tuple[KernelPlan, ...]:
    """Softmax over the last dimension C of R rows (PyTorch ``SoftMax.cu``): C <= 1024 uses the
    persistent warp-per-row kernel, 128-thread blocks of 4 warps, each warp 1 row (2 rows when
    C <= 128); longer rows one block per row, ``clamp(pow2(C / 16-byte vector), 32, 1024)``
    threads, a warp-partial buffer in shared memory."""
    x = op.input_meta[0]
    if x.numel == 0:
        return ()
    c = x.shape[-1] if x.shape else 1
    rows = x.numel // c
    total = ctx.traffic(op)
    if c <= 1024:
        rows_per_block = 8 if c <= 128 else 4
        return (
            KernelPlan(
                "softmax_warp",
                "softmax",
                _grid(_cdiv(rows, rows_per_block)),
                (128, 1, 1),
                40,
                0,
                op.flops,
                total,
                False,
                CUDA_CORE_EFFICIENCY,
            ),
        )
    threads = min(1024, max(32, _pow2(_cdiv(c, 16 // ctx.itemsize))))
    return (
        KernelPlan(
            "softmax_block",
            "softmax",
            _grid(rows),
            (threads, 1, 1),
            40,
            threads // 32 * 4,
            op.flops,
            total,
            False,
            CUDA_CORE_EFFICIENCY,
        ),
    )


@register("norm")
def norm(op: Operator, ctx: Context) -> tuple[KernelPlan, ...]:
    """Layer/group/RMS normalisation: one block per row (layer norm) or per (sample, group)
    (group norm); the row count is the size of the saved mean (second output) when there is
    one, else rows of the last dimension. ``clamp(pow2(row / 4), 32, 512)`` threads; Welford
    partials (mean, M2) per warp in shared memory."""
    x = op.input_meta[0]
    if x.numel == 0:
        return ()
    stats = [m for m in op.output_meta[1:] if m.numel > 0]
    rows = stats[0].numel if stats else x.numel // (x.shape[-1] if x.shape else 1)
    row = max(1, x.numel // rows)
    threads = min(512, max(32, _pow2(_cdiv(row, 4))))
    return (
        KernelPlan(
            "norm_rowwise",
            "norm",
            _grid(rows),
            (threads, 1, 1),
            32,
            threads // 32 * 8,
            op.flops,
            ctx.traffic(op),
            False,
            CUDA_CORE_EFFICIENCY,
        ),
    )


@register("reduction")
def reduction(op: Operator, ctx: Context) -> tuple[KernelPlan, ...]:
    """sum/mean/amax... of I input elements into O outputs, K = I / O reduced each (PyTorch
    ``Reduce.cuh``, simplified): K < 32: one thread per output, 256-thread blocks; otherwise
    512-thread blocks of ``clamp(pow2(K / 4), 32, 512)`` threads per output (several outputs per
    block for short rows). A few outputs with long rows (O below the SM count, K >= 65536) split
    each row over blocks (grid.y) so the whole GPU works, as ``Reduce.cuh`` does."""
    x = op.input_meta[0] if op.input_meta else None
    out = _out(op)
    if x is None or out is None or x.numel == 0:
        return ()
    k = max(1, x.numel // out.numel)
    total = ctx.traffic(op)
    if k < 32:
        return (_per_output("reduce_thread", "reduction", out.numel, op.flops, total),)
    per_output = min(512, max(32, _pow2(_cdiv(k, 4))))
    outputs_per_block = 512 // per_output
    blocks = _cdiv(out.numel, outputs_per_block)
    split = 1
    if out.numel < ctx.sm_count and k >= 65536:
        split = max(1, min(_cdiv(k, 512 * 16), 4 * ctx.sm_count // blocks))
    return (
        KernelPlan(
            "reduce_block",
            "reduction",
            (blocks, split, 1),
            (512, 1, 1),
            32,
            512 // 32 * 8,
            op.flops,
            total,
            False,
            CUDA_CORE_EFFICIENCY,
        ),
    )


# ---- data movement -------------------------------------------------------------------------


@register("gather")
def gather(op: Operator, ctx: Context) -> tuple[KernelPlan, ...]:
    """Embedding lookups and index gathers: elementwise over the output. Only the rows gathered
    are read, not the whole table, so DRAM bytes = indices + output read + output written (the
    IR counts the whole weight as read)."""
    out = _out(op)
    if out is None:
        return ()
    indices = sum(ctx.nbytes(m) for m in op.input_meta if m.dtype not in FLOATING)
    nbytes = indices + 2 * ctx.nbytes(out)
    return (_streaming("gather", "gather", out.numel, op.flops, nbytes, ctx),)


@register("pool")
def pool(op: Operator, ctx: Context) -> tuple[KernelPlan, ...]:
    """Max/average pooling: one thread per output element, 256-thread blocks, ~32 registers
    (PyTorch's ``max_pool2d_with_indices_out_cuda_frame``); reads the input once."""
    out = _out(op)
    if out is None:
        return ()
    return (_per_output("pool", "pool", out.numel, op.flops, ctx.traffic(op)),)


@register("elementwise")
def elementwise(op: Operator, ctx: Context) -> tuple[KernelPlan, ...]:
    """Pointwise operators and inference batch norm: one vectorised pass over the output."""
    out = _out(op)
    if out is None:
        return ()
    return (_streaming("elementwise", "elementwise", out.numel, op.flops, ctx.traffic(op), ctx),)


@register("batch_norm")
def batch_norm(op: Operator, ctx: Context) -> tuple[KernelPlan, ...]:
    """Batch norm ``x (N, C, ...)``. In inference (``_native_batch_norm_legit_no_training``, or
    empty saved statistics in outputs 2 and 3) it is ``y = x * a + b`` per channel: one
    elementwise pass. In training it first
    reduces each channel's mean and variance over N x spatial (one block per channel, as
    PyTorch's ``batch_norm_collect_statistics_kernel``), then normalises elementwise."""
    out = _out(op)
    if out is None:
        return ()
    x = op.input_meta[0]
    normalise = _streaming("batch_norm", "elementwise", out.numel, op.flops, ctx.traffic(op), ctx)
    inference = _base(op.target) == "_native_batch_norm_legit_no_training"
    if inference or not any(m.numel for m in op.output_meta[1:]):
        return (normalise,)
    channels = x.shape[1] if len(x.shape) > 1 else 1
    stats = KernelPlan(
        "batch_norm_stats",
        "reduction",
        _grid(channels),
        (512, 1, 1),
        32,
        512 // 32 * 8,
        float(x.numel),
        float(ctx.nbytes(x)),
        False,
        CUDA_CORE_EFFICIENCY,
    )
    return (stats, normalise)


@register("copy")
def copy(op: Operator, ctx: Context) -> tuple[KernelPlan, ...]:
    """clone/copy/_to_copy: these launch a copy kernel (a contiguous copy of a transposed view
    is a real kernel); reads the input, writes the output."""
    out = _out(op)
    if out is None:
        return ()
    return (_streaming("copy", "copy", out.numel, 0.0, ctx.traffic(op), ctx),)


@register("other")
def other(op: Operator, ctx: Context) -> tuple[KernelPlan, ...]:
    """Operators no class describes (``arange``, ``fill``, ``where`` variants...): one streaming
    pass over their output, which is what most such ATen kernels are; no output, no kernel."""
    out = _out(op)
    if out is None:
        return ()
    return (_streaming("other", "other", out.numel, op.flops, ctx.traffic(op), ctx),)


@register("view")
def view(op: Operator, ctx: Context) -> tuple[KernelPlan, ...]:
    """Views re-label a tensor's storage: no kernel."""
    return ()
