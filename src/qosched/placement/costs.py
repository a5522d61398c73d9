"""From a captured model to a costed tenant: the chain units and what each costs where.

A model's operator graph (``qosched.graph``) is coarsened and cut into a chain of units
(``graph.passes.linearize``: one tensor crosses each cut, or a few where a model has too few
such cuts, as an encoder-decoder has none). A unit costs, on each
processor, the sum over its operators of a roofline time plus a fixed per-operator overhead:

    time(op) = max(flops / (peak * efficiency), bytes / memory bandwidth) + overhead

with ``bytes`` the operator's reads plus writes. A cut costs one copy of the tensors crossing it
over the CPU-GPU link (``hardware.roofline.transfer_time_s``); the graph's inputs go to the GPU
and its outputs come back the same way.

A calibration factor per processor (measured / roofline, default 1) scales every estimate: the
GPU's comes from ``bench/placement_gpu.py`` on that GPU, the CPU's from
``bench/placement_evidence.py``. Where both processors exist, costs are measured instead
(``placement.measured``). What this leaves out: caches (every byte is counted from memory) and
any per-operator-kind calibration (one factor per processor).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from qosched.core.errors import InputError
from qosched.graph.ir import Graph, Operator
from qosched.graph.passes import coarsen, linearize
from qosched.hardware.catalog import Link, Processor
from qosched.hardware.roofline import roofline_time_s, transfer_time_s
from qosched.placement.ir import TenantGraph

#: A calibration factor (measured over modelled time) is within a thousandfold either way: one
#: further off is not a calibration of that model but a different machine, and at 1e308 the
#: modelled rates overflow.
MIN_CALIBRATION, MAX_CALIBRATION = 1e-3, 1e3


def check_calibration(
    value: Any, *, field: str, meaning: str = "", source: str | None = None
) -> float:
    """``value`` as a calibration factor within ``MIN_CALIBRATION``..``MAX_CALIBRATION``;
    InputError naming ``field`` (and ``source``) otherwise. ``meaning`` is said after "factor"."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not MIN_CALIBRATION <= value <= MAX_CALIBRATION
    ):
        raise InputError(
            f"expected a factor{meaning} in [{MIN_CALIBRATION:g}, {MAX_CALIBRATION:g}], "
            f"got {value!r}",
            source=source,
            field=field,
        )
    return float(value)


#: Share of a processor's peak FLOP/s that framework operators reach. One value per processor
#: kind until per-operator calibration exists; 0.5 is a middle ground for dense kernels.
DEFAULT_EFFICIENCY = 0.5
#: Fixed cost of issuing one operator: framework dispatch on the CPU, a kernel launch on the GPU.
DEFAULT_CPU_OVERHEAD_S = 5e-6
DEFAULT_GPU_OVERHEAD_S = 5e-6


@dataclass(frozen=True)
class CostModel:
    """The machine the tenants share: one CPU, one GPU, the link between them."""

    cpu: Processor
    gpu: Processor
    link: Link
    dtype: str = "float32"
    cpu_efficiency: float = DEFAULT_EFFICIENCY
    gpu_efficiency: float = DEFAULT_EFFICIENCY
    cpu_overhead_s: float = DEFAULT_CPU_OVERHEAD_S
    gpu_overhead_s: float = DEFAULT_GPU_OVERHEAD_S
    #: Measured / roofline time on each processor (1.0: the roofline as it is). A spec sets the
    #: GPU's from ``bench/placement_gpu.py`` run on that GPU; ``bench/placement_evidence.py``
    #: prints the CPU's on this machine.
    cpu_calibration: float = 1.0
    gpu_calibration: float = 1.0

    def __post_init__(self) -> None:
        if self.cpu.kind != "cpu" or self.gpu.kind != "gpu":
            raise InputError(
                f"expected a CPU and a GPU, got {self.cpu.kind} {self.cpu.name!r} and "
                f"{self.gpu.kind} {self.gpu.name!r}",
                field="processors",
            )
        for name in ("cpu_overhead_s", "gpu_overhead_s"):
            if not getattr(self, name) >= 0:
                raise InputError(f"must be >= 0, got {getattr(self, name)!r}", field=name)
        for name in ("cpu_calibration", "gpu_calibration"):
            check_calibration(getattr(self, name), field=name)

    def operator_s(self, op: Operator, on: str) -> float:
        """Seconds for ``op`` on the ``"cpu"`` or the ``"gpu"``."""
        processor, efficiency, overhead, factor = (
            (self.cpu, self.cpu_efficiency, self.cpu_overhead_s, self.cpu_calibration)
            if on == "cpu"
            else (self.gpu, self.gpu_efficiency, self.gpu_overhead_s, self.gpu_calibration)
        )
        moved = op.bytes_read + op.bytes_written
        roofline = roofline_time_s(op.flops, moved, processor, self.dtype, efficiency)
        return factor * (roofline + overhead)

    def copy_s(self, nbytes: int) -> float:
        return transfer_time_s(nbytes, self.link)


def tenant_from_graph(
    graph: Graph,
    costs: CostModel,
    *,
    name: str | None = None,
    latency_goal_s: float | None = None,
    coarsened: bool = False,
) -> TenantGraph:
    """The tenant for ``graph`` on ``costs``' machine (see the module docstring).

    ``coarsened=True`` says ``graph`` is already coarsened. Module boundaries between units (a
    change of top-level module) become the tenant's layer boundaries, for the layer-level
    baseline.
    """
    g = graph if coarsened else coarsen(graph)
    units = linearize(g)
    if not units:
        raise InputError(f"model {graph.name!r} has no operators to place", field="graph")
    cpu_s = [sum(costs.operator_s(g[n], "cpu") for n in unit) for unit in units]
    gpu_s = [sum(costs.operator_s(g[n], "gpu") for n in unit) for unit in units]
    crossing = crossing_bytes(g, units)
    transfer_s = [costs.copy_s(nbytes) for nbytes in crossing]
    inputs = sum(v.meta.bytes for v in g.inputs if v.kind == "input")
    outputs = sum(sum(m.bytes for m in g[n].output_meta) for n in g.outputs if n in g)
    return TenantGraph(
        name=name or graph.name,
        unit_ids=tuple(unit[0] for unit in units),
        cpu_s=tuple(cpu_s),
        gpu_s=tuple(gpu_s),
        transfer_s=tuple(transfer_s),
        input_to_gpu_s=costs.copy_s(inputs),
        output_from_gpu_s=costs.copy_s(outputs),
        latency_goal_s=latency_goal_s,
        layer_boundaries=layer_boundaries(g, units),
    )


def layer_boundaries(graph: Graph, units: Sequence[Sequence[str]]) -> tuple[int, ...]:
    """Cuts between units where the top-level module changes (the layer-level baseline's)."""
    return tuple(
        i
        for i in range(len(units) - 1)
        if _top_module(graph[units[i][-1]]) != _top_module(graph[units[i + 1][0]])
    )


def crossing_bytes(graph: Graph, units: Sequence[Sequence[str]]) -> list[int]:
    """Bytes of the tensor(s) live across each cut between consecutive units: produced at or
    before the cut and read after it (or a graph output)."""
    position = {name: i for i, unit in enumerate(units) for name in unit}
    outputs = set(graph.outputs)
    result = []
    for cut in range(len(units) - 1):
        live = sum(
            value.meta.bytes
            for value in graph.inputs
            if value.kind == "input"
            and any(position[s] > cut for s in graph.successors(value.name))
        )
        for op in graph.operators:
            if position[op.name] > cut:
                continue
            read_later = any(position[s] > cut for s in graph.successors(op.name))
            if read_later or op.name in outputs:
                live += sum(m.bytes for m in op.output_meta)
        result.append(live)
    return result


def _top_module(op: Operator) -> str:
    return op.module.split(".", 1)[0]
