"""Pod traces: Alibaba's ``openb_pod_list_*.csv`` read and checked, and qosched's pod-trace CSV.

Alibaba's columns (``cluster-trace-gpu-v2023/README.md``): ``name, cpu_milli, memory_mib,
num_gpu, gpu_milli, gpu_spec, qos, pod_phase, creation_time, deletion_time, scheduled_time``.
``gpu_milli`` is the share of each GPU a pod asks for (1000 = a whole GPU), so only a one-GPU pod
may ask for less than 1000; ``gpu_spec`` lists the GPU types the pod may run on (``A|B``, empty
for any). Times are seconds from the trace's start.

qosched's pod trace (``docs/contracts.md``): ``pod_id, cpu_milli, memory_mib, num_gpu,
gpu_milli, gpu_spec, qos, phase, creation_s, deletion_s``, one pod a row in arrival order; it is
told from a job trace by its ``gpu_milli`` column. It may go on with the workload columns
(``workloads.WORKLOAD_COLUMNS``: ``kind, model, batch, priority, rate_rps, goal, work_s,
deadline_s``): what the pod runs, a service or a training job (``workloads``).
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from qosched.cluster.pods.workloads import (
    WORKLOAD_COLUMNS,
    WorkloadSpec,
    parse_workload,
    workload_cells,
)
from qosched.core.bounds import check_count, check_time
from qosched.core.csv_file import CsvRows, data_rows, header_columns, open_csv
from qosched.core.errors import InputError

ALIBABA_GPU_2023 = "alibaba-gpu-2023"
MILLI = 1000
#: The most GPUs one pod may ask for, and one node may carry (the trace's largest nodes).
MAX_GPUS = 8
#: CPU (milli-cores) and memory (MiB) beyond any machine: a larger request is a broken record.
MAX_CPU_MILLI = 10_000_000
MAX_MEMORY_MIB = 100_000_000
ALIBABA_COLUMNS = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
)
POD_TRACE_HEADER = (
    "pod_id",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "phase",
    "creation_s",
    "deletion_s",
)


@dataclass(frozen=True, slots=True)
class Pod:
    """One pod's request: ``num_gpu`` GPUs with ``gpu_milli`` thousandths of each (0 and 0 for a
    CPU-only pod); ``gpu_spec`` the GPU types it may use (empty: any)."""

    pod_id: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: tuple[str, ...] = ()
    qos: str = ""
    phase: str = ""
    creation_s: float = 0.0
    deletion_s: float | None = None
    #: What the pod runs (a service or a training job), None when the trace does not say.
    workload: WorkloadSpec | None = None

    @property
    def gpu_request_milli(self) -> int:
        """The pod's whole GPU request in thousandths of a GPU."""
        return self.num_gpu * self.gpu_milli

    @property
    def shares_gpu(self) -> bool:
        return self.num_gpu == 1 and self.gpu_milli < MILLI


def import_alibaba_gpu_2023(path: str | Path) -> list[Pod]:
    """The pods of an ``openb_pod_list_*.csv`` file, in the file's order, every field checked:
    a bad row is an InputError naming its line and field."""
    return _read_checked(Path(path), ALIBABA_COLUMNS, "no pod in the file")


def is_pod_trace(path: str | Path) -> bool:
    """Whether ``path`` is a pod trace (qosched's layout), judged by its header only."""
    with open_csv(path, "trace") as rows:
        header = next(rows, [])
    names = [name.strip() for name in header]
    return "gpu_milli" in names and "pod_id" in names


def read_pod_trace(path: str | Path) -> list[Pod]:
    """The pods of a qosched pod trace, checked as the importer checks Alibaba's; with the
    workload columns when its header has ``kind`` (then it must have them all)."""
    with open_csv(path, "trace") as rows:
        names = [name.strip() for name in next(rows, [])]
    header = (*POD_TRACE_HEADER, *WORKLOAD_COLUMNS) if "kind" in names else POD_TRACE_HEADER
    return _read_checked(Path(path), header, "no pod in the trace")


def _read_checked(path: Path, header: tuple[str, ...], empty: str) -> list[Pod]:
    """The pods of a file with ``header``, every row checked; ``empty``: the error for none."""
    with open_csv(path, "trace") as rows:
        columns = header_columns(rows, path, header)
        lines, pods = _read_pods(rows, path, columns, header)
    if not pods:
        raise InputError(empty, source=path)
    _refuse_repeated_names(pods, lines, path)
    return pods


def write_pod_trace(pods: Sequence[Pod], path: str | Path) -> None:
    """Write ``pods`` in qosched's pod-trace layout, with the workload columns when a pod runs
    a workload; reading it back gives the same pods."""
    with Path(path).open("w", newline="") as handle:
        writer = csv.writer(handle)
        # The workload columns only where a pod runs one: a plain trace keeps its layout.
        extended = any(pod.workload is not None for pod in pods)
        writer.writerow((*POD_TRACE_HEADER, *WORKLOAD_COLUMNS) if extended else POD_TRACE_HEADER)
        for pod in pods:
            writer.writerow(
                [
                    pod.pod_id,
                    pod.cpu_milli,
                    pod.memory_mib,
                    pod.num_gpu,
                    pod.gpu_milli,
                    "|".join(pod.gpu_spec),
                    pod.qos,
                    pod.phase,
                    _num(pod.creation_s),
                    "" if pod.deletion_s is None else _num(pod.deletion_s),
                ]
                + (workload_cells(pod.workload) if extended else [])
            )


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def _whole(text: str, field: str, path: Path, line: int, maximum: int) -> int:
    try:
        value: float | str = float(text)
    except ValueError:
        value = text
    return check_count(value, field=field, maximum=maximum, source=path, line=line)


def _time(text: str, field: str, path: Path, line: int) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(
            f"expected a time in seconds, got {text!r}", source=path, line=line, field=field
        ) from None
    return check_time(value, field=field, source=path, line=line)


def _pod(
    cells: list[str], columns: dict[str, int], path: Path, line: int, *, names: tuple[str, ...]
) -> Pod:
    """One row as a pod; ``names`` is the layout's header (Alibaba's or qosched's), whose
    positions 0, 7, 8, 9 name the id, phase, creation and deletion columns."""
    name_col, phase_col, created_col, deleted_col = names[0], names[7], names[8], names[9]

    def cell(column: str) -> str:
        return cells[columns[column]]

    pod_id = cell(name_col)
    if not pod_id:
        raise InputError(
            "expected the pod's name, got an empty cell", source=path, line=line, field=name_col
        )
    num_gpu = _whole(cell("num_gpu"), "num_gpu", path, line, MAX_GPUS)
    gpu_milli = _whole(cell("gpu_milli"), "gpu_milli", path, line, MILLI)
    if num_gpu == 0 and gpu_milli != 0:
        raise InputError(
            f"a pod with no GPU asks for {gpu_milli} thousandths of one; expected 0",
            source=path,
            line=line,
            field="gpu_milli",
        )
    if num_gpu > 0 and gpu_milli == 0:
        raise InputError(
            f"a pod of {num_gpu} GPU(s) asks for 0 thousandths of each; expected 1..1000",
            source=path,
            line=line,
            field="gpu_milli",
        )
    if num_gpu > 1 and gpu_milli != MILLI:
        # Only a one-GPU pod may share its GPU (the trace's README): a share of several GPUs
        # is no request a GPU-sharing device plugin can place.
        raise InputError(
            f"a pod of {num_gpu} GPUs asks for {gpu_milli} thousandths of each; only a one-GPU "
            "pod may ask for part of a GPU (expected 1000)",
            source=path,
            line=line,
            field="gpu_milli",
        )
    creation = _time(cell(created_col), created_col, path, line)
    deletion = None
    if cell(deleted_col):
        deletion = _time(cell(deleted_col), deleted_col, path, line)
        if deletion < creation:
            raise InputError(
                f"deleted at {deletion:g} s, before its creation at {creation:g} s",
                source=path,
                line=line,
                field=deleted_col,
            )
    workload = None
    if "kind" in columns:
        cells_of = {name: cell(name) for name in WORKLOAD_COLUMNS}
        workload = parse_workload(cells_of, created_s=creation, source=path, line=line)
        if workload is not None and num_gpu == 0:
            raise InputError(
                f"a {workload.kind} runs on a GPU; the pod asks for none",
                source=path,
                line=line,
                field="num_gpu",
            )
    return Pod(
        pod_id=pod_id,
        cpu_milli=_whole(cell("cpu_milli"), "cpu_milli", path, line, MAX_CPU_MILLI),
        memory_mib=_whole(cell("memory_mib"), "memory_mib", path, line, MAX_MEMORY_MIB),
        num_gpu=num_gpu,
        gpu_milli=gpu_milli,
        gpu_spec=tuple(kind for kind in cell("gpu_spec").split("|") if kind),
        qos=cell("qos"),
        phase=cell(phase_col),
        creation_s=creation,
        deletion_s=deletion,
        workload=workload,
    )


def _read_pods(
    rows: CsvRows, path: Path, columns: dict[str, int], names: tuple[str, ...]
) -> tuple[list[int], list[Pod]]:
    lines, pods = [], []
    for line, cells in data_rows(rows, path, columns):
        lines.append(line)
        pods.append(_pod(cells, columns, path, line, names=names))
    return lines, pods


def _refuse_repeated_names(pods: list[Pod], lines: list[int], path: Path) -> None:
    """Pods are told apart by name (placements, per-pod output): two rows of one name are a
    broken file."""
    first: dict[str, int] = {}
    for line, pod in zip(lines, pods, strict=True):
        if pod.pod_id in first:
            raise InputError(
                f"duplicate pod {pod.pod_id!r} (first on line {first[pod.pod_id]})",
                source=path,
                line=line,
            )
        first[pod.pod_id] = line
