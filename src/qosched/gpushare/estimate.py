"""Static kernel estimation (FgGR): each operator's kernels, their resource needs and durations on
a catalog GPU, and the model's totals, without running the model.

Per operator, :mod:`qosched.gpushare.kernel_classes` gives the kernels it launches with their
launch shapes, FLOPs and DRAM bytes. Per kernel, this module applies the GPU:

* occupancy and SMs needed (:mod:`qosched.gpushare.occupancy`, the CUDA occupancy rules);
* the roofline ``max(flops / (peak * compute_eff), bytes / (bandwidth * memory_eff))`` with the
  class's achievable efficiencies; ``bound`` is ``"compute"`` when the compute term is larger,
  i.e. when the arithmetic intensity exceeds the GPU's ridge point at those efficiencies;
* times the block-to-SM factor (wave quantisation above one wave, the SM fraction below it:
  :func:`~qosched.gpushare.occupancy.duration_scale`);
* plus ``LAUNCH_OVERHEAD_S`` per kernel.

Model totals: ``total_time_s`` is the sum of the kernels (one stream, kernels back to back, no
host-side gaps); ``memory_bytes`` is parameters + graph inputs + the peak of live activations
along the topological order (see :func:`activation_peak_bytes`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from qosched.core.bounds import MAX_BATCH
from qosched.core.errors import InputError
from qosched.gpushare.kernel import Kernel
from qosched.gpushare.kernel_classes import (
    FLOATING,
    Context,
    KernelPlan,
    kernel_class,
    plan_kernels,
)
from qosched.gpushare.occupancy import duration_scale, occupancy, sms_needed
from qosched.graph.ir import Graph, Operator
from qosched.hardware import Processor, gpu
from qosched.hardware.sm_limits import SmLimits, sm_limits

LAUNCH_OVERHEAD_S = 2e-6
"""Fixed device-side cost of every kernel: block dispatch, ramp-up and drain. An empty kernel
measures ~2-3 us in Nsight/``torch.profiler`` on V100-H100 class GPUs; 2 us is the floor of
that. Host-side launch cost (the CPU enqueueing the kernel, ~5 us in eager PyTorch) is not
included: it overlaps with earlier kernels whenever the GPU is the bottleneck."""

DTYPES = ("float32", "float16", "bfloat16")


@dataclass(frozen=True)
class ModelEstimate:
    """A model's kernels on one GPU, in execution order, with totals.

    ``kernel_classes`` is aligned with ``kernels`` and names each kernel's class
    (``"gemm"``, ``"elementwise"``, ...).
    """

    model: str
    gpu: str
    dtype: str
    batch: int
    kernels: tuple[Kernel, ...]
    total_time_s: float
    memory_bytes: int
    kernel_classes: tuple[str, ...] = ()
    param_bytes: int = 0
    activation_bytes: int = 0

    def to_dict(self) -> dict[str, object]:
        """The JSON of ``qosched gpu estimate --json`` (docs/contracts.md)."""
        classes = self.kernel_classes or ("",) * len(self.kernels)
        return {
            "model": self.model,
            "gpu": self.gpu,
            "dtype": self.dtype,
            "batch": self.batch,
            "total_time_s": self.total_time_s,
            "memory_bytes": self.memory_bytes,
            "param_bytes": self.param_bytes,
            "activation_bytes": self.activation_bytes,
            "kernels": [
                {
                    "op": k.op,
                    "name": k.name,
                    "class": cls,
                    "grid": list(k.grid),
                    "block": list(k.block),
                    "registers_per_thread": k.registers_per_thread,
                    "shared_bytes_per_block": k.shared_bytes_per_block,
                    "sms": k.sms,
                    "occupancy": k.occupancy,
                    "flops": k.flops,
                    "bytes": k.bytes,
                    "bound": k.bound,
                    "time_s": k.time_s,
                }
                for k, cls in zip(self.kernels, classes, strict=True)
            ],
        }


def _check(device: Processor, dtype: str) -> SmLimits:
    if dtype not in DTYPES:
        raise InputError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
    device.peak(dtype)  # raises, naming the dtypes the GPU has, when it has no such path
    return sm_limits(device)


def place_kernel(
    plan: KernelPlan, op: str, device: Processor, limits: SmLimits, dtype: str
) -> Kernel:
    """The :class:`Kernel` of ``plan`` on ``device``: occupancy, SMs, bound and duration."""
    threads = plan.block[0] * plan.block[1] * plan.block[2]
    occ = occupancy(threads, plan.registers_per_thread, plan.shared_bytes_per_block, limits)
    blocks = plan.grid[0] * plan.grid[1] * plan.grid[2]
    sm_count = device.sm_count or 1
    compute_s = plan.flops / (_peak(plan, device, limits, dtype) * plan.compute_efficiency)
    memory_s = plan.bytes / (device.memory_bandwidth * plan.memory_efficiency)
    scale = duration_scale(
        blocks, occ.blocks_per_sm, sm_count, occ.warps_per_block, plan.saturation_warps
    )
    return Kernel(
        name=plan.name,
        op=op,
        grid=plan.grid,
        block=plan.block,
        registers_per_thread=plan.registers_per_thread,
        shared_bytes_per_block=plan.shared_bytes_per_block,
        sms=sms_needed(blocks, occ.blocks_per_sm, sm_count),
        occupancy=occ.occupancy,
        flops=float(plan.flops),
        bytes=float(plan.bytes),
        bound="compute" if compute_s > memory_s else "memory",
        time_s=max(compute_s, memory_s) * scale + LAUNCH_OVERHEAD_S,
    )


def _peak(plan: KernelPlan, device: Processor, limits: SmLimits, dtype: str) -> float:
    if not plan.tensor_cores:
        return device.peak("float32")
    if dtype == "float32" and plan.tf32 and float(limits.compute_capability) >= 8.0:
        return device.peak("float16") / 2
    return device.peak(dtype)


def operator_dtype(op: Operator) -> str:
    """The floating dtype an operator computes in: its first floating tensor's (else float32)."""
    for m in (*op.input_meta, *op.output_meta):
        if m.dtype in FLOATING:
            return m.dtype
    return "float32"


def estimate_operator(
    op: Operator, device: Processor | str, *, dtype: str | None = None
) -> tuple[tuple[Kernel, str], ...]:
    """The kernels ``op`` launches on ``device``, each with its class, in launch order.

    ``dtype`` re-sizes the operator's floating-point tensors and picks the peak; ``None`` takes
    the operator's own floating dtype (what the runtime does with real operators).
    """
    device = gpu(device) if isinstance(device, str) else device
    dtype = dtype or operator_dtype(op)
    limits = _check(device, dtype)
    return _estimate(op, device, limits, Context(dtype, device.sm_count or 1, limits))


def _estimate(
    op: Operator, device: Processor, limits: SmLimits, ctx: Context
) -> tuple[tuple[Kernel, str], ...]:
    try:
        return tuple(
            (place_kernel(p, op.name, device, limits, ctx.dtype), p.kernel_class)
            for p in plan_kernels(op, ctx)
        )
    except InputError as e:
        if op.name in str(e):
            raise
        raise InputError(f"operator {op.name!r} ({op.target}): {e}") from e


def activation_peak_bytes(graph: Graph, ctx: Context) -> int:
    """Peak bytes of live activations when the operators run in topological order.

    An operator allocates its outputs when it runs; a view allocates nothing and keeps its
    source's storage alive; a storage is freed after the last operator that reads it (or a view
    of it); graph outputs live to the end. Graph inputs and parameters are not counted here (the
    caller holds them). Not counted: the caching allocator's rounding and fragmentation,
    cuBLAS/cuDNN workspaces and the CUDA context (~0.3-0.5 GiB per process).
    """
    ops = graph.operators
    storage: dict[str, str] = {}
    size: dict[str, int] = {}
    for op in ops:
        if kernel_class(op) == "view" and op.input_sources:
            src = op.input_sources[0]
            storage[op.name] = storage.get(src, src)
        else:
            storage[op.name] = op.name
            size[op.name] = sum(ctx.nbytes(m) for m in op.output_meta)
    last_use: dict[str, int] = {}
    for i, op in enumerate(ops):
        for src in (*op.input_sources, op.name):
            last_use[storage.get(src, src)] = i
    for out in graph.outputs:
        last_use[storage.get(out, out)] = len(ops)
    live = peak = 0
    frees: dict[int, list[str]] = {}
    for name, i in last_use.items():
        if name in size:
            frees.setdefault(i, []).append(name)
    for i, op in enumerate(ops):
        live += size.get(op.name, 0)
        peak = max(peak, live)
        live -= sum(size[name] for name in frees.get(i, ()))
    return peak


def estimate_graph(graph: Graph, gpu: Processor, *, dtype: str = "float32") -> ModelEstimate:
    """Every kernel of ``graph`` on ``gpu`` in execution order, with the totals (module doc).

    ``dtype`` is the precision costed: the graph's floating-point tensors are re-sized to it and
    its peak is used (a graph captured in float32 estimates as float16 with ``dtype="float16"``).
    """
    device = gpu
    limits = _check(device, dtype)
    ctx = Context(dtype, device.sm_count or 1, limits)
    pairs = [pair for op in graph.operators for pair in _estimate(op, device, limits, ctx)]
    kernels = tuple(k for k, _ in pairs)
    params = sum(ctx.nbytes(v.meta) for v in graph.parameters)
    inputs = sum(ctx.nbytes(v.meta) for v in graph.inputs)
    activations = activation_peak_bytes(graph, ctx)
    batch = graph.inputs[0].meta.shape[0] if graph.inputs and graph.inputs[0].meta.shape else 1
    return ModelEstimate(
        model=graph.name,
        gpu=device.name,
        dtype=dtype,
        batch=batch,
        kernels=kernels,
        total_time_s=sum(k.time_s for k in kernels),
        memory_bytes=params + inputs + activations,
        kernel_classes=tuple(c for _, c in pairs),
        param_bytes=params,
        activation_bytes=activations,
    )


def estimate_model(
    model: str, gpu: Processor | str, *, batch: int = 1, dtype: str = "float32"
) -> ModelEstimate:
    """Capture ``model`` (a zoo name, ``hf:<model_type>`` or ``package.module:factory``) on meta
    tensors and estimate it on ``gpu`` (a Processor or a catalog name). A zoo or ``hf:`` model
    takes ``batch``; a factory gets
    ``batch=`` only when ``batch != 1`` and must then accept it."""
    from qosched.graph.capture import capture, load_model, takes_batch_and_device

    device = _gpu_of(gpu)
    if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= MAX_BATCH:
        raise InputError(
            f"batch must be a whole number in [1, {MAX_BATCH:,}], got {batch!r}", field="batch"
        )
    _check(device, dtype)
    kwargs = {"batch": batch} if (takes_batch_and_device(model) or batch != 1) else {}
    try:
        module, inputs = load_model(model, **kwargs)
    except TypeError as e:
        raise InputError(
            f"model {model!r}: its factory does not take batch={batch}: {e}", field="batch"
        ) from e
    graph = capture(module, inputs, name=model)
    result = estimate_graph(graph, device, dtype=dtype)
    return dataclasses.replace(result, batch=batch)


def _gpu_of(device: Processor | str) -> Processor:
    if isinstance(device, Processor):
        return device
    return gpu(device)
