"""Operator IR: a model as a DAG of operators with shapes, FLOPs and bytes, in topological order.

The IR is plain data (frozen dataclasses) so that passes stay pure ``Graph -> Graph`` functions and
cost models never need PyTorch. ``capture`` in :mod:`qosched.graph.capture` builds it from a model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType

from qosched.core.errors import InputError

# Operator kinds, set at capture time and read by passes.
COMPUTE = "compute"  # has a FLOP formula in torch.utils.flop_counter (matmul, conv, attention)
ELEMENTWISE = "elementwise"  # one output element from the same-index input elements
VIEW = "view"  # reshapes, transposes, copies: moves or re-labels data, no arithmetic
REDUCTION = "reduction"  # sums, means, softmax, normalisations over an axis
OTHER = "other"  # everything else (embedding lookups, pooling, ...)
KINDS = frozenset({COMPUTE, ELEMENTWISE, VIEW, REDUCTION, OTHER})


@dataclass(frozen=True)
class TensorMeta:
    """Shape, dtype (``"float32"``) and size in bytes of one tensor."""

    shape: tuple[int, ...]
    dtype: str
    bytes: int

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class Value:
    """A named tensor that is not produced by an operator: a graph input or a parameter/buffer.

    ``kind`` is ``"input"``, ``"parameter"``, ``"buffer"`` or ``"constant"``.
    """

    name: str
    kind: str
    meta: TensorMeta


@dataclass(frozen=True)
class Operator:
    """One ATen operator of a captured model.

    ``inputs`` names the operators and graph inputs this one depends on (each once, in argument
    order); ``input_sources`` and ``input_meta`` are aligned and list every tensor argument read,
    parameters included, so that ``bytes_read == sum(m.bytes for m in input_meta)``.
    ``fused`` lists the targets of operators folded into this one by a pass, in order.
    """

    name: str
    target: str
    kind: str
    inputs: tuple[str, ...]
    input_sources: tuple[str, ...]
    input_meta: tuple[TensorMeta, ...]
    output_meta: tuple[TensorMeta, ...]
    flops: int
    bytes_read: int
    bytes_written: int
    param_bytes: int
    module: str = ""
    fused: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise InputError(
                f"operator {self.name!r}: unknown kind {self.kind!r}, expected one of "
                f"{sorted(KINDS)}",
                field="kind",
            )
        if len(self.input_sources) != len(self.input_meta):
            raise InputError(
                f"operator {self.name!r}: {len(self.input_sources)} input sources but "
                f"{len(self.input_meta)} input tensor metas",
                field="input_meta",
            )
        for attr in ("flops", "bytes_read", "bytes_written", "param_bytes"):
            if getattr(self, attr) < 0:
                raise InputError(
                    f"operator {self.name!r}: {attr} must be >= 0, got {getattr(self, attr)}",
                    field=attr,
                )


@dataclass(frozen=True)
class Graph:
    """A model as operators in topological order.

    ``inputs`` are the user inputs, ``parameters`` the parameters, buffers and lifted constants,
    ``outputs`` the names (operators or inputs) whose tensors the model returns. Construction checks
    that names are unique and that every operator depends only on inputs and earlier operators,
    which makes the graph a DAG in topological order.
    """

    name: str
    operators: tuple[Operator, ...]
    inputs: tuple[Value, ...]
    outputs: tuple[str, ...]
    parameters: tuple[Value, ...] = ()
    _index: Mapping[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        seen: dict[str, str] = {}
        for v in (*self.inputs, *self.parameters):
            if v.name in seen:
                raise InputError(f"graph {self.name!r}: duplicate value name {v.name!r}")
            seen[v.name] = v.kind
        index: dict[str, int] = {}
        for i, op in enumerate(self.operators):
            if op.name in seen or op.name in index:
                raise InputError(f"graph {self.name!r}: duplicate name {op.name!r} (operator {i})")
            for dep in op.inputs:
                if dep in index or seen.get(dep) == "input":
                    continue
                where = "a later operator" if any(o.name == dep for o in self.operators) else None
                raise InputError(
                    f"graph {self.name!r}: operator {op.name!r} (position {i}) depends on "
                    f"{dep!r}, which is {where or 'neither a graph input nor an operator'}; "
                    "operators must be in topological order and the graph acyclic",
                    field="inputs",
                )
            index[op.name] = i
        for out in self.outputs:
            if out not in index and seen.get(out) != "input":
                raise InputError(
                    f"graph {self.name!r}: output {out!r} is not an operator or graph input",
                    field="outputs",
                )
        object.__setattr__(self, "_index", MappingProxyType(index))

    def __len__(self) -> int:
        return len(self.operators)

    def __getitem__(self, name: str) -> Operator:
        try:
            return self.operators[self._index[name]]
        except KeyError:
            raise KeyError(f"graph {self.name!r} has no operator {name!r}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._index

    @property
    def total_flops(self) -> int:
        return sum(op.flops for op in self.operators)

    @property
    def total_param_bytes(self) -> int:
        """Bytes of every parameter, buffer and constant, each counted once (tied weights too)."""
        return sum(v.meta.bytes for v in self.parameters)

    @cached_property
    def _successors(self) -> Mapping[str, tuple[str, ...]]:
        succ: dict[str, list[str]] = {op.name: [] for op in self.operators}
        succ.update({v.name: [] for v in self.inputs})
        for op in self.operators:
            for dep in op.inputs:
                succ[dep].append(op.name)
        return MappingProxyType({k: tuple(v) for k, v in succ.items()})

    def successors(self, name: str) -> tuple[str, ...]:
        """Operators that read ``name`` (an operator or a graph input), in topological order."""
        if name not in self._successors:
            raise KeyError(f"graph {self.name!r} has no operator or input {name!r}")
        return self._successors[name]

    def predecessors(self, name: str) -> tuple[str, ...]:
        """Operators and graph inputs that ``name`` reads."""
        return self[name].inputs
