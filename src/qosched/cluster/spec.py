"""The cluster: nodes of workers (GPUs or CPU cores) and memory, under switches; on a GPU
cluster, optionally in groups of one GPU type each (`qosched.cluster.gpu_types`)."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from qosched.cluster.gpu_types import check_gpu_type
from qosched.core.bounds import check_count
from qosched.core.csv_file import read_text
from qosched.core.errors import InputError
from qosched.core.validate import parse_float, parse_int

GIB = 1024**3
CLUSTER_SPEC_COLUMNS = (
    "num_switch",
    "num_node_p_switch",
    "num_gpu_p_node",
    "num_cpu_p_node",
    "mem_p_node",
)
#: The optional column of a mixed cluster: one row per GPU type, nodes in the rows' order.
GPU_TYPE_COLUMN = "gpu_type"


RESOURCES = ("gpu", "cpu")
#: The largest cluster simulated: about a million nodes (a million-node run of a small trace takes
#: seconds), each of up to 65,536 workers.
MAX_NODES = 2**20
MAX_WORKERS_PER_NODE = 2**16
#: The most memory of one node, in GiB: a pebibyte, far above the largest machines (tens of TiB),
#: and small enough that the node's bytes stay below 2**53 (exact as a float).
MAX_MEM_GIB = 2**20
# Singular and plural name of one worker, by resource: what people read in tables and plots.
UNIT_NAMES = {"gpu": ("GPU", "GPUs"), "cpu": ("CPU core", "CPU cores")}


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """``num_nodes`` identical nodes; node ``i`` sits under switch ``i // nodes_per_switch``.

    A job is given *workers*, the cluster's unit of allocation: one GPU on a GPU cluster
    (``resource="gpu"``), one CPU core on a CPU cluster (``resource="cpu"``). ``workers_per_node``
    counts them; ``cpus_per_node`` and ``mem_per_node_bytes`` describe the nodes and schedule
    nothing (on a CPU cluster ``cpus_per_node`` is the worker count again).

    ``gpu_types``: on a mixed GPU cluster, (GPU type, nodes) per group in node order, the
    groups' nodes adding up to ``num_nodes``; empty on a cluster of one unnamed type. Nodes
    differ only in their GPU type: every node has ``workers_per_node`` GPUs.
    """

    num_switches: int
    nodes_per_switch: int
    workers_per_node: int
    cpus_per_node: int = 0
    mem_per_node_bytes: int = 0
    resource: str = "gpu"
    gpu_types: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        if self.resource not in RESOURCES:
            raise InputError(
                f"expected one of {', '.join(RESOURCES)}, got {self.resource!r}", field="resource"
            )
        for name in ("num_switches", "nodes_per_switch", "workers_per_node"):
            if getattr(self, name) < 1:
                raise InputError(f"must be >= 1, got {getattr(self, name)}", field=name)
        for name in ("cpus_per_node", "mem_per_node_bytes"):
            if getattr(self, name) < 0:
                raise InputError(f"must be >= 0, got {getattr(self, name)}", field=name)
        # Bounded so that a typo cannot make a simulation build a list of a billion nodes.
        if self.num_nodes > MAX_NODES:
            raise InputError(
                f"a cluster has at most {MAX_NODES:,} nodes, got {self.num_nodes:,}",
                field="nodes",
            )
        for name in ("workers_per_node", "cpus_per_node"):
            if getattr(self, name) > MAX_WORKERS_PER_NODE:
                raise InputError(
                    f"at most {MAX_WORKERS_PER_NODE:,} per node, got {getattr(self, name):,}",
                    field=name,
                )
        if self.mem_per_node_bytes > MAX_MEM_GIB * GIB:
            raise InputError(
                f"at most {MAX_MEM_GIB:,} GiB per node, got {self.mem_per_node_bytes:,} bytes",
                field="mem_per_node_bytes",
            )
        if self.gpu_types:
            self._check_gpu_types()

    def _check_gpu_types(self) -> None:
        if self.resource != "gpu":
            raise InputError("GPU types are for a GPU cluster", field="gpu_types")
        names = [name for name, _ in self.gpu_types]
        for name, nodes in self.gpu_types:
            check_gpu_type(name)
            if nodes < 1:
                raise InputError(
                    f"type {name}: must have >= 1 node, got {nodes}", field="gpu_types"
                )
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise InputError(
                f"one group per type; {', '.join(repeated)} named more than once",
                field="gpu_types",
            )
        if sum(nodes for _, nodes in self.gpu_types) != self.num_nodes:
            raise InputError(
                f"the groups' nodes add up to {sum(n for _, n in self.gpu_types)}, "
                f"the cluster has {self.num_nodes}",
                field="gpu_types",
            )

    @property
    def groups(self) -> tuple[tuple[str, range], ...]:
        """(GPU type, its nodes' indices) per group, in node order; () on an untyped cluster."""
        result, first = [], 0
        for name, nodes in self.gpu_types:
            result.append((name, range(first, first + nodes)))
            first += nodes
        return tuple(result)

    @property
    def num_nodes(self) -> int:
        return self.num_switches * self.nodes_per_switch

    @property
    def total_workers(self) -> int:
        return self.num_nodes * self.workers_per_node

    @property
    def unit_name(self) -> str:
        """One worker in words: ``"GPU"`` or ``"CPU core"``."""
        return UNIT_NAMES[self.resource][0]

    @property
    def unit_plural(self) -> str:
        """Workers in words: ``"GPUs"`` or ``"CPU cores"``."""
        return UNIT_NAMES[self.resource][1]

    def count(self, workers: float) -> str:
        """``workers`` with the unit, singular or plural: ``"1 GPU"``, ``"32 CPU cores"``."""
        return f"{workers:g} {self.unit_name if workers == 1 else self.unit_plural}"

    @classmethod
    def from_flags(
        cls, nodes: int, workers_per_node: int, cpus_per_node: int = 0, resource: str = "gpu"
    ) -> ClusterSpec:
        """One switch of ``nodes`` nodes; on a CPU cluster the cores per node are the workers."""
        if resource == "cpu":
            cpus_per_node = workers_per_node
        return cls(1, nodes, workers_per_node, cpus_per_node, resource=resource)

    @classmethod
    def cpu(cls, nodes: int, cores_per_node: int) -> ClusterSpec:
        """A CPU cluster: ``nodes`` nodes of ``cores_per_node`` cores, one worker per core."""
        return cls.from_flags(nodes, cores_per_node, resource="cpu")

    def describe(self) -> str:
        text = (
            f"{self.num_nodes} node{'' if self.num_nodes == 1 else 's'} x "
            f"{self.count(self.workers_per_node)} = "
            f"{self.count(self.total_workers)}"
        )
        if self.gpu_types:
            per_type = (f"{n * self.workers_per_node} {name}" for name, n in self.gpu_types)
            text += f" ({', '.join(per_type)})"
        return text


def read_cluster_spec(path: str | Path, resource: str = "gpu") -> ClusterSpec:
    """Read ElasticFlow's cluster-spec CSV: one data row, ``mem_p_node`` in GiB.

    The workers per node are ``num_gpu_p_node`` on a GPU cluster and ``num_cpu_p_node`` on a CPU
    cluster (where ``num_gpu_p_node`` may be 0). With a ``gpu_type`` column (a GPU cluster
    only), one row per GPU type, its nodes ``num_switch x num_node_p_switch``; the rows differ
    in ``num_switch`` and ``gpu_type`` alone.
    """
    if resource not in RESOURCES:
        raise InputError(
            f"expected one of {', '.join(RESOURCES)}, got {resource!r}", field="resource"
        )
    path = Path(path)
    text = read_text(path, "cluster spec")
    # Keep each row's physical line number for error messages; blank lines are skipped.
    numbered = [
        (number, row)
        for number, row in enumerate(csv.reader(text.splitlines()), start=1)
        if any(cell.strip() for cell in row)
    ]
    if not numbered:
        raise InputError("empty file; expected a header and one row", source=path)
    header_line, header = numbered[0][0], [name.strip() for name in numbered[0][1]]
    missing = [name for name in CLUSTER_SPEC_COLUMNS if name not in header]
    if missing:
        raise InputError(
            f"missing column(s) {', '.join(missing)}; expected {','.join(CLUSTER_SPEC_COLUMNS)}",
            source=path,
            line=header_line,
        )
    if len(numbered) < 2:
        raise InputError("no data row after the header", source=path, line=header_line)
    typed = GPU_TYPE_COLUMN in header
    if typed and resource != "gpu":
        raise InputError(
            f"a {GPU_TYPE_COLUMN} column is for a GPU cluster, not a {resource.upper()} one",
            source=path,
            line=header_line,
        )
    if len(numbered) > 2 and not typed:
        raise InputError(
            f"expected exactly one data row, found {len(numbered) - 1} "
            f"(a cluster of several GPU types names each row's in a {GPU_TYPE_COLUMN} column)",
            source=path,
            line=numbered[2][0],
        )
    rows = [_read_row(path, header, line, row, resource) for line, row in numbered[1:]]
    first = rows[0][1]
    if not typed:
        return first
    groups: list[tuple[str, int]] = []
    seen: dict[str, int] = {}
    for (line, spec), (_, row) in zip(rows, numbered[1:], strict=True):
        name = row[header.index(GPU_TYPE_COLUMN)].strip()
        try:
            check_gpu_type(name)
        except InputError as error:
            raise InputError(error.reason, source=path, line=line, field=GPU_TYPE_COLUMN) from None
        if name in seen:
            raise InputError(
                f"GPU type {name} has a row already (line {seen[name]}); one row per type",
                source=path,
                line=line,
                field=GPU_TYPE_COLUMN,
            )
        seen[name] = line
        for column, attribute in _SHARED_COLUMNS:
            if getattr(spec, attribute) != getattr(first, attribute):
                raise InputError(
                    f"every row of a mixed cluster has the same {column} (nodes differ only in "
                    f"their GPU type); line {rows[0][0]} has {getattr(first, attribute)}, this "
                    f"one {getattr(spec, attribute)}",
                    source=path,
                    line=line,
                    field=column,
                )
        groups.append((name, spec.num_nodes))
    switches = sum(spec.num_switches for _, spec in rows)
    if switches * first.nodes_per_switch > MAX_NODES:
        raise InputError(
            f"the rows have {switches * first.nodes_per_switch:,} nodes in all; "
            f"a cluster has at most {MAX_NODES:,}",
            source=path,
            line=rows[-1][0],
            field="num_switch",
        )
    return ClusterSpec(
        num_switches=switches,
        nodes_per_switch=first.nodes_per_switch,
        workers_per_node=first.workers_per_node,
        cpus_per_node=first.cpus_per_node,
        mem_per_node_bytes=first.mem_per_node_bytes,
        resource=resource,
        gpu_types=tuple(groups),
    )


# The columns every row of a mixed cluster shares, with the ClusterSpec field each sets.
_SHARED_COLUMNS = (
    ("num_node_p_switch", "nodes_per_switch"),
    ("num_gpu_p_node", "workers_per_node"),
    ("num_cpu_p_node", "cpus_per_node"),
    ("mem_p_node", "mem_per_node_bytes"),
)


def _read_row(
    path: Path, header: list[str], line: int, row: list[str], resource: str
) -> tuple[int, ClusterSpec]:
    """One data row as a cluster of its own, every field checked, with its line number."""
    if len(row) != len(header):
        raise InputError(f"expected {len(header)} fields, got {len(row)}", source=path, line=line)
    values = dict(zip(header, (cell.strip() for cell in row), strict=True))

    # Every field is bounded here, as ClusterSpec bounds it, so that an error names the file,
    # line and column rather than only the field of the dataclass.
    def whole(name: str, minimum: int, maximum: int) -> int:
        value = parse_int(values[name], field=name, source=path, line=line, minimum=minimum)
        return check_count(
            value, field=name, minimum=minimum, maximum=maximum, source=path, line=line
        )

    mem_gib = parse_float(
        values["mem_p_node"], field="mem_p_node", source=path, line=line, minimum=0
    )
    if mem_gib > MAX_MEM_GIB:
        raise InputError(
            f"expected GiB per node from 0 to {MAX_MEM_GIB:,}, got {values['mem_p_node']!r}",
            source=path,
            line=line,
            field="mem_p_node",
        )
    gpus = whole("num_gpu_p_node", 1 if resource == "gpu" else 0, MAX_WORKERS_PER_NODE)
    cpus = whole("num_cpu_p_node", 1 if resource == "cpu" else 0, MAX_WORKERS_PER_NODE)
    switches = whole("num_switch", 1, MAX_NODES)
    nodes_per_switch = whole("num_node_p_switch", 1, MAX_NODES)
    if switches * nodes_per_switch > MAX_NODES:
        raise InputError(
            f"num_switch x num_node_p_switch = {switches * nodes_per_switch:,} nodes; "
            f"a cluster has at most {MAX_NODES:,}",
            source=path,
            line=line,
            field="num_node_p_switch",
        )
    return line, ClusterSpec(
        num_switches=switches,
        nodes_per_switch=nodes_per_switch,
        workers_per_node=gpus if resource == "gpu" else cpus,
        cpus_per_node=cpus,
        mem_per_node_bytes=int(mem_gib * GIB),
        resource=resource,
    )
