"""GPU types of a mixed cluster, and a job's speed on a type its tables do not measure.

Type names are Alibaba's (``openb_node_list_gpu_node.csv``'s ``model`` column, the names the
pod mode reads): ``A100``, ``T4``, ``V100M16``, ``V100M32``; ``V100``, ``H100`` and ``H200`` as
well. Each maps to a GPU of the hardware catalog (`qosched.hardware.catalog`), whose peaks the
speed rule reads. ``A100`` and ``T4`` also have bundled tables (``qosched/data/throughputs``).

The rule, for a job whose (model, batch size) has no table on type X: its speed on X at every
worker count is its speed on a reference type R (one with a table) times

    ratio(X, R) = 1 / (c * F_R / F_X + (1 - c) * B_R / B_X)

with F the tensor-core float16 peak FLOP/s, B the memory bandwidth and ``c`` the share of a
step's time on R that is compute-bound (``COMPUTE_SHARE``). That is the roofline: the
compute-bound part of a step stretches by the FLOP ratio and the memory-bound part by the
bandwidth ratio. The tables say nothing of that share, so ``c`` is one stated constant for every
model; the scaling with worker count (communication) is taken to be the same on both types.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

from qosched.cluster.throughput import SpeedCurve, ThroughputModel
from qosched.core.errors import InputError
from qosched.hardware.catalog import Processor, gpu

#: Each type a cluster spec may name, with its GPU in the hardware catalog. The V100s of
#: Alibaba's list (16 and 32 GB) have the same peaks and bandwidth: the catalog's 32 GB part.
GPU_TYPES: Mapping[str, str] = MappingProxyType(
    {
        "A100": "A100-SXM4-80GB",
        "H100": "H100-SXM5-80GB",
        "H200": "H200-SXM-141GB",
        "T4": "T4",
        "V100": "V100-SXM2-32GB",
        "V100M16": "V100-SXM2-32GB",
        "V100M32": "V100-SXM2-32GB",
    }
)
#: The types with bundled tables, by the name of their table set.
TABLED_TYPES = ("A100", "T4")
#: ``c`` of the rule: half of a training step's time compute-bound, half memory-bound. Stated,
#: not measured: no (model, batch size) is in both bundled table sets to fit it on.
COMPUTE_SHARE = 0.5
#: The peak the rule compares: training in mixed precision runs its matmuls on tensor cores.
PEAK_DTYPE = "float16"


def check_gpu_type(name: str) -> str:
    """``name`` when it is a known type; InputError naming the known ones otherwise."""
    if name not in GPU_TYPES:
        raise InputError(
            f"unknown GPU type {name!r}; known types: {', '.join(GPU_TYPES)}", field="gpu_type"
        )
    return name


def processor(gpu_type: str) -> Processor:
    return gpu(GPU_TYPES[check_gpu_type(gpu_type)])


def speed_ratio(target: str, reference: str, compute_share: float = COMPUTE_SHARE) -> float:
    """A job's speed on ``target`` over its speed on ``reference``, by the module's rule."""
    if not 0.0 <= compute_share <= 1.0:
        raise InputError(f"must be in [0, 1], got {compute_share}", field="compute_share")
    x, r = processor(target), processor(reference)
    stretch = compute_share * r.peak(PEAK_DTYPE) / x.peak(PEAK_DTYPE) + (1.0 - compute_share) * (
        r.memory_bandwidth / x.memory_bandwidth
    )
    return 1.0 / stretch


def scaled(curve: SpeedCurve, ratio: float) -> SpeedCurve:
    """``curve`` with every speed times ``ratio`` (the same counts measured)."""
    return SpeedCurve(
        curve.model, curve.batch_size, tuple(s * ratio for s in curve.speeds), curve.measured
    )


def slowest(curves: Sequence[SpeedCurve], most: int | None = None) -> SpeedCurve:
    """Per worker count (up to ``most`` if given), the lowest speed of ``curves``; 0 where any
    has none."""
    first = curves[0]
    top = first.max_workers if most is None else min(most, first.max_workers)
    speeds = tuple(min(c.rate(g) for c in curves) if g else 0.0 for g in range(top + 1))
    measured = tuple(
        g
        for g in first.measured
        if g < len(speeds) and speeds[g] > 0.0 and all(g in c.measured for c in curves)
    )
    return SpeedCurve(first.model, first.batch_size, speeds, measured)


class TypeSpeeds:
    """A job's speed curve on each GPU type: the type's own table where it measures the job's
    (model, batch size), else the reference tables' curve scaled by `speed_ratio`.

    ``reference``: the tables every job of a trace is checked against, of GPU type
    ``reference_type``; ``tables``: the other types' own tables (bundled ones by default).
    """

    def __init__(
        self,
        reference: ThroughputModel,
        reference_type: str,
        tables: Mapping[str, ThroughputModel] | None = None,
    ) -> None:
        self.reference = reference
        self.reference_type = check_gpu_type(reference_type)
        if tables is None:
            tables = {name: ThroughputModel.bundled(name) for name in TABLED_TYPES}
        self.tables = {**tables, reference_type: reference}

    def curve(self, gpu_type: str, model: str, batch_size: int) -> SpeedCurve:
        own = self.tables.get(gpu_type)
        if own is not None and own.has(model, batch_size):
            return own.curve(model, batch_size)
        return scaled(
            self.reference.curve(model, batch_size), speed_ratio(gpu_type, self.reference_type)
        )

    def source(self, gpu_type: str, model: str, batch_size: int) -> str:
        """Where ``curve``'s speeds come from, in words."""
        own = self.tables.get(gpu_type)
        if own is not None and own.has(model, batch_size):
            return f"{gpu_type} table"
        ratio = speed_ratio(gpu_type, self.reference_type)
        return f"{self.reference_type} table x {ratio:.4g}"
