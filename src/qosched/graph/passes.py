"""Pure passes over the operator IR: ``coarsen`` (Graph -> Graph) and ``linearize``."""

from __future__ import annotations

from dataclasses import replace

from qosched.graph.ir import ELEMENTWISE, VIEW, Graph, Operator

CHEAP_KINDS = frozenset({ELEMENTWISE, VIEW})


def fuse(producer: Operator, consumer: Operator) -> Operator:
    """One operator doing ``producer`` then ``consumer``, named and anchored like ``producer``.

    FLOPs and parameter bytes add up; the tensor passed between the two never reaches memory, so
    reads are the producer's plus the consumer's other reads, and writes are the consumer's.
    """
    other = [
        (s, m)
        for s, m in zip(consumer.input_sources, consumer.input_meta, strict=True)
        if s != producer.name
    ]
    sources = (*producer.input_sources, *(s for s, _ in other))
    metas = (*producer.input_meta, *(m for _, m in other))
    deps = tuple(
        dict.fromkeys((*producer.inputs, *(d for d in consumer.inputs if d != producer.name)))
    )
    return replace(
        producer,
        inputs=deps,
        input_sources=sources,
        input_meta=metas,
        output_meta=consumer.output_meta,
        flops=producer.flops + consumer.flops,
        bytes_read=sum(m.bytes for m in metas),
        bytes_written=consumer.bytes_written,
        param_bytes=producer.param_bytes + consumer.param_bytes,
        fused=(*producer.fused, consumer.target, *consumer.fused),
    )


def _absorb(consumer: Operator, producer: Operator) -> Operator:
    """``fuse`` anchored on the consumer: keeps the consumer's name, target and module."""
    merged = fuse(producer, consumer)
    return replace(
        merged,
        name=consumer.name,
        target=consumer.target,
        kind=consumer.kind,
        module=consumer.module,
        fused=(producer.target, *producer.fused, *consumer.fused),
    )


def _rename(op: Operator, alias: dict[str, str]) -> Operator:
    if not any(s in alias for s in op.input_sources):
        return op
    return replace(
        op,
        inputs=tuple(dict.fromkeys(alias.get(d, d) for d in op.inputs)),
        input_sources=tuple(alias.get(s, s) for s in op.input_sources),
    )


def coarsen(graph: Graph) -> Graph:
    """Fuse cheap operators (elementwise, views, copies) into neighbours; FLOPs are preserved.

    Rules, applied in topological order until nothing changes in one sweep:

    1. *Into the producer*: a cheap operator whose only dependency is one operator P, where P is
       read by nobody else and is not a graph output, is fused into P (see :func:`fuse`); the
       result keeps P's name, target and module, and ``fused`` records the absorbed targets. So
       ``conv -> batch_norm -> relu`` becomes one ``conv`` operator.
    2. *Weight layout into the consumer*: a cheap operator that depends on no operator or graph
       input (it only reads parameters or constants, e.g. the ``permute`` of a Linear weight)
       and has exactly one reader is fused into that reader, which keeps its own name.
    """
    ops, outputs = list(graph.operators), graph.outputs
    while True:
        new_ops, alias = _coarsen_once(ops, outputs)
        outputs = tuple(dict.fromkeys(alias.get(o, o) for o in outputs))
        if len(new_ops) == len(ops):
            break
        ops = new_ops
    return Graph(graph.name, tuple(ops), graph.inputs, outputs, graph.parameters)


def _coarsen_once(
    ops: list[Operator], outputs: tuple[str, ...]
) -> tuple[list[Operator], dict[str, str]]:
    readers: dict[str, list[str]] = {op.name: [] for op in ops}
    for op in ops:
        for d in op.inputs:
            if d in readers:
                readers[d].append(op.name)
    for out in outputs:
        if out in readers:
            readers[out].append("<output>")
    # Rule 2: parameter-only cheap ops waiting for their single reader.
    pending: dict[str, list[Operator]] = {}
    kept: dict[str, Operator] = {}
    alias: dict[str, str] = {}
    for op in ops:
        if op.kind in CHEAP_KINDS and not op.inputs and len(readers[op.name]) == 1:
            reader = readers[op.name][0]
            if reader != "<output>":
                pending.setdefault(reader, []).append(op)
                continue
        for p in pending.pop(op.name, []):
            op = _absorb(op, p)
        op = _rename(op, alias)
        (dep,) = op.inputs if len(op.inputs) == 1 else (None,)
        if op.kind in CHEAP_KINDS and dep in kept and len(readers[dep]) == 1:
            kept[dep] = fuse(kept[dep], op)
            alias[op.name] = dep
            readers[dep] = readers[op.name]
        else:
            kept[op.name] = op
    return list(kept.values()), alias


#: `linearize` wants at least one unit per this many (coarsened) operators: about a
#: transformer layer's worth, so that a placement can change processors between layers.
OPERATORS_PER_UNIT = 40
#: The most tensors `linearize` lets a cut cross, however few units that leaves.
MAX_LIVE_AT_CUT = 4


def linearize(
    graph: Graph,
    *,
    operators_per_unit: int = OPERATORS_PER_UNIT,
    max_live: int = MAX_LIVE_AT_CUT,
) -> list[list[str]]:
    """Split the topological order into segments that run as a chain.

    The tensors live across position ``i`` are the operators' outputs and graph inputs made at
    or before ``i`` and read after it or returned (parameters are resident and never count).
    A cut is placed after ``i`` where exactly one tensor is live: each segment then reads one
    tensor, from the segment before, and where branches overlap (a residual block, parallel
    heads) no cut falls inside. Where that leaves fewer than one segment per
    ``operators_per_unit`` operators, cuts crossing up to ``k`` tensors are allowed too, for the
    smallest ``k <= max_live`` that gives that many: an encoder-decoder has no one-tensor cut at
    all (the decoder's token ids wait through the encoder, and every decoder layer reads the
    encoder's output), and a decoder LM few (its mask and positions are read by every layer).
    A segment may then read tensors of any earlier segment; every tensor live across a cut is
    what crossing it moves (``placement.costs.crossing_bytes``, ``UnitProgram.live_after``).
    Returns the operator names of each segment, in order; no operators gives no segments.
    """
    ops = graph.operators
    n = len(ops)
    if n == 0:
        return []
    last_use: dict[str, int] = {}
    for i, op in enumerate(ops):
        for d in op.inputs:
            last_use[d] = i
    for out in graph.outputs:
        last_use[out] = n  # live to the end
    born: dict[str, int] = {v.name: -1 for v in graph.inputs}
    born.update({op.name: i for i, op in enumerate(ops)})
    # live(i) = #{t : born(t) <= i < last_use(t)}, as prefix sums of a difference array
    delta = [0] * (n + 1)
    for t, end in last_use.items():
        start = max(born[t], 0)
        if start < end:
            delta[start] += 1
            delta[end] -= 1
    live_after = []
    live = 0
    for i in range(n - 1):
        live += delta[i]
        live_after.append(live)
    wanted = n // max(operators_per_unit, 1)
    limit = 1
    while limit < max_live and 1 + sum(0 < k <= limit for k in live_after) < wanted:
        limit += 1
    segments: list[list[str]] = [[]]
    for i, op in enumerate(ops):
        segments[-1].append(op.name)
        if i < n - 1 and 0 < live_after[i] <= limit:
            segments.append([])
    return segments
