"""GPU nodes as Alibaba's node list records them (``openb_node_list_gpu_node.csv``: 1,213 GPU
nodes; ``openb_node_list_all_node.csv``: the same plus 310 CPU-only nodes, 1,523 in all):
``sn, cpu_milli, memory_mib, gpu, model``, one node a row, each with its own GPU type.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from qosched.cluster.pods.trace import MAX_CPU_MILLI, MAX_GPUS, MAX_MEMORY_MIB
from qosched.core.bounds import check_count
from qosched.core.csv_file import data_rows, header_columns, open_csv
from qosched.core.errors import InputError

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")


@dataclass(frozen=True, slots=True)
class GpuNode:
    """One node: CPU in milli-cores, memory in MiB, ``gpus`` GPUs of type ``model`` ("" for a
    node without GPUs)."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str


@dataclass(frozen=True, slots=True)
class PodCluster:
    """The nodes pods are placed on, in the node list's order; GPU types may differ by node."""

    nodes: tuple[GpuNode, ...]

    def __post_init__(self) -> None:
        if not self.nodes:
            raise ValueError("a cluster needs at least one node")

    @property
    def gpus(self) -> int:
        return sum(node.gpus for node in self.nodes)

    def gpu_types(self) -> dict[str, int]:
        """GPUs by type, most first."""
        counts: Counter[str] = Counter()
        for node in self.nodes:
            if node.gpus:
                counts[node.model] += node.gpus
        return dict(counts.most_common())

    def describe(self) -> str:
        types = ", ".join(f"{count} {model}" for model, count in self.gpu_types().items())
        return f"{len(self.nodes)} nodes, {self.gpus} GPUs ({types})"


def read_node_list(path: str | Path) -> PodCluster:
    """The nodes of a node list as it is, every field checked: a bad row is an InputError
    naming its line and field."""
    path = Path(path)
    nodes: list[GpuNode] = []
    first: dict[str, int] = {}
    with open_csv(path, "cluster spec") as rows:
        at = header_columns(
            rows, path, NODE_COLUMNS, "a node list of Alibaba's cluster-trace-gpu-v2023"
        )
        for line, row in data_rows(rows, path, at):
            cells = {name: row[index] for name, index in at.items()}
            node = _node(cells, path, line)
            if node.name in first:
                raise InputError(
                    f"duplicate node {node.name!r} (first on line {first[node.name]})",
                    source=path,
                    line=line,
                    field="sn",
                )
            first[node.name] = line
            nodes.append(node)
    if not nodes:
        raise InputError("no node in the file", source=path)
    return PodCluster(tuple(nodes))


def _whole(text: str, field: str, path: Path, line: int, minimum: int, maximum: int) -> int:
    try:
        value: float | str = float(text)
    except ValueError:
        value = text
    return check_count(value, field=field, minimum=minimum, maximum=maximum, source=path, line=line)


def _node(cells: dict[str, str], path: Path, line: int) -> GpuNode:
    if not cells["sn"]:
        raise InputError(
            "expected the node's name, got an empty cell", source=path, line=line, field="sn"
        )
    gpus = _whole(cells["gpu"], "gpu", path, line, 0, MAX_GPUS)
    model = cells["model"]
    if gpus and not model:
        raise InputError(
            f"a node of {gpus} GPU(s) names no GPU type", source=path, line=line, field="model"
        )
    if not gpus and model:
        raise InputError(
            f"a node of no GPU names the GPU type {model!r}",
            source=path,
            line=line,
            field="model",
        )
    return GpuNode(
        name=cells["sn"],
        cpu_milli=_whole(cells["cpu_milli"], "cpu_milli", path, line, 1, MAX_CPU_MILLI),
        memory_mib=_whole(cells["memory_mib"], "memory_mib", path, line, 0, MAX_MEMORY_MIB),
        gpus=gpus,
        model=model,
    )
