"""Hand-built IR operators for the estimator's tests: shapes in, nothing captured."""

from __future__ import annotations

import math

from qosched.graph.ir import Operator, TensorMeta

_SIZE = {"float32": 4, "float16": 2, "int64": 8}


def meta(*shape: int, dtype: str = "float32") -> TensorMeta:
    return TensorMeta(tuple(shape), dtype, math.prod(shape) * _SIZE[dtype])


def operator(
    target: str,
    kind: str,
    inputs: list[TensorMeta],
    outputs: list[TensorMeta],
    flops: int = 0,
    name: str = "op",
    sources: list[str] | None = None,
) -> Operator:
    sources = sources if sources is not None else [f"in{i}" for i in range(len(inputs))]
    return Operator(
        name=name,
        target=target,
        kind=kind,
        inputs=(),
        input_sources=tuple(sources),
        input_meta=tuple(inputs),
        output_meta=tuple(outputs),
        flops=flops,
        bytes_read=sum(m.bytes for m in inputs),
        bytes_written=sum(m.bytes for m in outputs),
        param_bytes=0,
    )


def mm(m: int, k: int, n: int, dtype: str = "float32") -> Operator:
    """``aten.mm`` of (m, k) x (k, n): 2*m*n*k FLOPs."""
    return operator(
        "aten.mm.default",
        "compute",
        [meta(m, k, dtype=dtype), meta(k, n, dtype=dtype)],
        [meta(m, n, dtype=dtype)],
        flops=2 * m * n * k,
        name="mm",
    )


def add(n: int, dtype: str = "float32") -> Operator:
    """``aten.add.Tensor`` of two n-element tensors: n FLOPs."""
    return operator(
        "aten.add.Tensor",
        "elementwise",
        [meta(n, dtype=dtype), meta(n, dtype=dtype)],
        [meta(n, dtype=dtype)],
        flops=n,
        name="add",
    )
