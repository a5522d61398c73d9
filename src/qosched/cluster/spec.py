"""The cluster: homogeneous nodes of GPUs, CPUs and memory, grouped under switches."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

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


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """``num_nodes`` identical nodes; node ``i`` sits under switch ``i // nodes_per_switch``."""

    num_switches: int
    nodes_per_switch: int
    gpus_per_node: int
    cpus_per_node: int = 0
    mem_per_node_bytes: int = 0

    def __post_init__(self) -> None:
        for name in ("num_switches", "nodes_per_switch", "gpus_per_node"):
            if getattr(self, name) < 1:
                raise InputError(f"must be >= 1, got {getattr(self, name)}", field=name)
        for name in ("cpus_per_node", "mem_per_node_bytes"):
            if getattr(self, name) < 0:
                raise InputError(f"must be >= 0, got {getattr(self, name)}", field=name)

    @property
    def num_nodes(self) -> int:
        return self.num_switches * self.nodes_per_switch

    @property
    def total_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node

    @classmethod
    def from_flags(cls, nodes: int, gpus_per_node: int, cpus_per_node: int = 0) -> ClusterSpec:
        return cls(1, nodes, gpus_per_node, cpus_per_node)

    def describe(self) -> str:
        return f"{self.num_nodes} nodes x {self.gpus_per_node} GPUs = {self.total_gpus} GPUs"


def read_cluster_spec(path: str | Path) -> ClusterSpec:
    """Read ElasticFlow's cluster-spec CSV: one data row, ``mem_p_node`` in GiB."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(f"cannot read cluster spec: {exc.strerror}", source=path) from exc
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
    if len(numbered) > 2:
        raise InputError(
            f"expected exactly one data row, found {len(numbered) - 1}",
            source=path,
            line=numbered[2][0],
        )
    line, row = numbered[1]
    if len(row) != len(header):
        raise InputError(f"expected {len(header)} fields, got {len(row)}", source=path, line=line)
    values = dict(zip(header, (cell.strip() for cell in row), strict=True))

    def whole(name: str, minimum: int) -> int:
        return parse_int(values[name], field=name, source=path, line=line, minimum=minimum)

    mem_gib = parse_float(
        values["mem_p_node"], field="mem_p_node", source=path, line=line, minimum=0
    )
    return ClusterSpec(
        num_switches=whole("num_switch", 1),
        nodes_per_switch=whole("num_node_p_switch", 1),
        gpus_per_node=whole("num_gpu_p_node", 1),
        cpus_per_node=whole("num_cpu_p_node", 0),
        mem_per_node_bytes=int(mem_gib * GIB),
    )
