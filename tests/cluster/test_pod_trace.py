"""Alibaba's GPU-sharing trace (cluster-trace-gpu-v2023) read and checked; qosched's pod trace
written and read back; the node list read as it is."""

from __future__ import annotations

from pathlib import Path

import pytest

from qosched.cluster.pods.nodes import read_node_list
from qosched.cluster.pods.trace import (
    Pod,
    import_alibaba_gpu_2023,
    is_pod_trace,
    read_pod_trace,
    write_pod_trace,
)
from qosched.core.errors import InputError

HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time\n"
)
ROWS = (
    "openb-pod-0000,12000,16384,1,1000,,LS,Running,0,12537496,0\n"
    "openb-pod-0001,6000,12288,1,460,,LS,Running,427061,12902960,427061\n"
    "openb-pod-0002,88000,327680,8,1000,V100M16|V100M32,Burstable,Succeeded,9437497,10769854,\n"
    "openb-pod-0003,4000,8192,0,0,,BE,Failed,10,20,\n"
)


def write(tmp_path: Path, text: str, name: str = "pods.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_import_reads_every_field(tmp_path: Path) -> None:
    pods = import_alibaba_gpu_2023(write(tmp_path, HEADER + ROWS))
    assert pods[1] == Pod(
        "openb-pod-0001", 6000, 12288, 1, 460, (), "LS", "Running", 427061.0, 12902960.0
    )
    assert pods[2].gpu_spec == ("V100M16", "V100M32")
    assert pods[2].gpu_request_milli == 8000
    assert [p.shares_gpu for p in pods] == [False, True, False, False]


def test_the_pod_trace_reads_back_the_same_pods(tmp_path: Path) -> None:
    pods = import_alibaba_gpu_2023(write(tmp_path, HEADER + ROWS))
    out = tmp_path / "out.csv"
    write_pod_trace(pods, out)
    assert is_pod_trace(out)
    assert not is_pod_trace(write(tmp_path, HEADER + ROWS, "alibaba.csv"))
    assert read_pod_trace(out) == pods


@pytest.mark.parametrize(
    ("row", "field", "message"),
    [
        ("p,1000,10,1,1001,,LS,Running,0,5,", "gpu_milli", "<= 1000"),
        ("p,1000,10,9,1000,,LS,Running,0,5,", "num_gpu", "<= 8"),
        ("p,1000,10,2,500,,LS,Running,0,5,", "gpu_milli", "only a one-GPU pod"),
        ("p,1000,10,0,100,,LS,Running,0,5,", "gpu_milli", "no GPU"),
        ("p,1000,10,1,0,,LS,Running,0,5,", "gpu_milli", "expected 1..1000"),
        ("p,1000,10,1,500,,LS,Running,-1,5,", "creation_time", r"in \[0, "),
        ("p,1000,10,1,500,,LS,Running,10,5,", "deletion_time", "before its creation"),
        ("p,x,10,1,500,,LS,Running,0,5,", "cpu_milli", "got 'x'"),
        ("p,1000,10,1,0.5,,LS,Running,0,5,", "gpu_milli", "whole number"),
        (",1000,10,1,500,,LS,Running,0,5,", "name", "pod's name"),
    ],
    ids=[
        "share-over-1000",
        "nine-gpus",
        "share-of-two-gpus",
        "share-without-gpu",
        "gpu-without-share",
        "negative-time",
        "deleted-before-created",
        "not-a-number",
        "fractional-thousandths",
        "no-name",
    ],
)
def test_a_bad_row_names_its_line_and_field(
    tmp_path: Path, row: str, field: str, message: str
) -> None:
    path = write(tmp_path, HEADER + ROWS + row + "\n")
    with pytest.raises(InputError, match=message) as caught:
        import_alibaba_gpu_2023(path)
    assert caught.value.line == 6
    assert caught.value.field == field


def test_a_missing_column_and_a_repeated_pod_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"missing column.*gpu_milli") as caught:
        import_alibaba_gpu_2023(write(tmp_path, "name,cpu_milli,memory_mib,num_gpu\np,1,1,0\n"))
    assert caught.value.line == 1
    with pytest.raises(InputError, match=r"duplicate pod 'openb-pod-0001' \(first on line 3") as c:
        import_alibaba_gpu_2023(write(tmp_path, HEADER + ROWS + ROWS.splitlines()[1] + "\n"))
    assert c.value.line == 6


NODES = (
    "sn,cpu_milli,memory_mib,gpu,model\n"
    "n0,96000,393216,8,G2\n"
    "n1,104000,524288,2,T4\n"
    "n2,32000,262144,0,\n"
    "n3,8000,61440,1,P100\n"
)


def test_the_node_list_keeps_each_node_and_its_gpu_type(tmp_path: Path) -> None:
    cluster = read_node_list(write(tmp_path, NODES, "nodes.csv"))
    assert [(n.name, n.gpus, n.model) for n in cluster.nodes] == [
        ("n0", 8, "G2"),
        ("n1", 2, "T4"),
        ("n2", 0, ""),
        ("n3", 1, "P100"),
    ]
    assert cluster.gpus == 11
    assert cluster.gpu_types() == {"G2": 8, "T4": 2, "P100": 1}
    assert cluster.describe() == "4 nodes, 11 GPUs (8 G2, 2 T4, 1 P100)"


@pytest.mark.parametrize(
    ("row", "field", "message"),
    [
        ("n9,1000,10,9,G2", "gpu", "<= 8"),
        ("n9,1000,10,2,", "model", "names no GPU type"),
        ("n9,1000,10,0,T4", "model", "no GPU"),
        ("n9,0,10,1,T4", "cpu_milli", r"in \[1, "),
        ("n0,1000,10,1,T4", "sn", "duplicate node 'n0'"),
    ],
    ids=["nine-gpus", "gpus-without-type", "type-without-gpus", "no-cpu", "repeated"],
)
def test_a_bad_node_names_its_line_and_field(
    tmp_path: Path, row: str, field: str, message: str
) -> None:
    with pytest.raises(InputError, match=message) as caught:
        read_node_list(write(tmp_path, NODES + row + "\n", "nodes.csv"))
    assert (caught.value.line, caught.value.field) == (6, field)
