"""Tests for qosched.cluster.spec: the cluster-spec CSV and the CLI-flag constructor."""

from __future__ import annotations

from pathlib import Path

import pytest

from qosched.cluster.spec import ClusterSpec, read_cluster_spec
from qosched.core.errors import InputError

HEADER = "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node"


def write(tmp_path: Path, lines: list[str], name: str = "cluster.csv") -> Path:
    path = tmp_path / name
    path.write_text("".join(f"{line}\n" for line in lines))
    return path


def raises_at(path: Path, line: int | None, field: str | None = None) -> InputError:
    with pytest.raises(InputError) as caught:
        read_cluster_spec(path)
    message = str(caught.value)
    assert str(path) in message
    if line is not None:
        assert f"{path}:{line}:" in message
    if field is not None:
        assert f"field {field!r}" in message
    return caught.value


# --- reading ----------------------------------------------------------------------------------


def test_read_cluster_spec(tmp_path):
    spec = read_cluster_spec(write(tmp_path, [HEADER, "2,4,8,96,256"]))
    assert spec == ClusterSpec(
        num_switches=2,
        nodes_per_switch=4,
        workers_per_node=8,
        cpus_per_node=96,
        mem_per_node_bytes=256 * 2**30,
    )


@pytest.mark.parametrize(
    ("attribute", "expected"),
    [("num_nodes", 8), ("total_workers", 64), ("mem_per_node_bytes", 274_877_906_944)],
    ids=["2x4-nodes", "8x8-workers", "256-gib-in-bytes"],
)
def test_read_cluster_spec_derived_sizes(tmp_path, attribute, expected):
    spec = read_cluster_spec(write(tmp_path, [HEADER, "2,4,8,96,256"]))
    assert getattr(spec, attribute) == expected


def test_read_cluster_spec_columns_in_any_order(tmp_path):
    header = "mem_p_node,num_gpu_p_node,num_switch,num_cpu_p_node,num_node_p_switch"
    spec = read_cluster_spec(write(tmp_path, [header, "256,8,2,96,4"]))
    assert (spec.num_switches, spec.nodes_per_switch, spec.workers_per_node) == (2, 4, 8)


def test_read_cluster_spec_fractional_memory_in_gib(tmp_path):
    spec = read_cluster_spec(write(tmp_path, [HEADER, "1,1,8,0,0.5"]))
    assert spec.mem_per_node_bytes == 536_870_912


def test_read_cluster_spec_whole_floats_are_accepted(tmp_path):
    spec = read_cluster_spec(write(tmp_path, [HEADER, "2.0,4.0,8.0,96.0,256"]))
    assert spec.total_workers == 64


def test_read_cluster_spec_ignores_surrounding_blank_lines(tmp_path):
    spec = read_cluster_spec(write(tmp_path, ["", HEADER, "2,4,8,96,256", ""]))
    assert spec.total_workers == 64


# --- bad files --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "missing", ["num_switch", "num_node_p_switch", "num_gpu_p_node", "num_cpu_p_node", "mem_p_node"]
)
def test_missing_column_is_named_on_line_1(tmp_path, missing):
    names = [name for name in HEADER.split(",") if name != missing]
    path = write(tmp_path, [",".join(names), ",".join("1" for _ in names)])
    error = raises_at(path, 1)
    assert missing in str(error)


def test_two_data_rows_name_the_extra_line(tmp_path):
    path = write(tmp_path, [HEADER, "2,4,8,96,256", "1,1,8,96,256"])
    raises_at(path, 3)


def test_header_only_raises_naming_the_file(tmp_path):
    raises_at(write(tmp_path, [HEADER]), None)


def test_empty_file_raises_naming_the_file(tmp_path):
    raises_at(write(tmp_path, []), None)


def test_missing_file_raises_naming_the_file(tmp_path):
    raises_at(tmp_path / "absent.csv", None)


# (id, data row on line 2, field named in the error; None = whole row)
BAD_ROWS = [
    ("too-few-fields", "2,4,8,96", None),
    ("non-numeric-workers", "2,4,eight,96,256", "num_gpu_p_node"),
    ("zero-workers", "2,4,0,96,256", "num_gpu_p_node"),
    ("negative-workers", "2,4,-8,96,256", "num_gpu_p_node"),
    ("fractional-workers", "2,4,7.5,96,256", "num_gpu_p_node"),
    ("zero-switches", "0,4,8,96,256", "num_switch"),
    ("zero-nodes-per-switch", "2,0,8,96,256", "num_node_p_switch"),
    ("negative-cpus", "2,4,8,-1,256", "num_cpu_p_node"),
    ("negative-memory", "2,4,8,96,-1", "mem_p_node"),
    ("nan-memory", "2,4,8,96,nan", "mem_p_node"),
    ("memory-1e300-gib", "2,4,8,96,1e300", "mem_p_node"),
    ("memory-over-a-pebibyte", "2,4,8,96,1048577", "mem_p_node"),
    ("too-many-cpus", "2,4,8,100000,256", "num_cpu_p_node"),
    ("too-many-gpus", "2,4,65537,96,256", "num_gpu_p_node"),
    ("too-many-switches", "1048577,1,8,96,256", "num_switch"),
    ("too-many-nodes-per-switch", "1,1048577,8,96,256", "num_node_p_switch"),
    ("too-many-nodes-in-all", "1025,1024,8,96,256", "num_node_p_switch"),
]


@pytest.mark.parametrize(
    ("row", "field"), [case[1:] for case in BAD_ROWS], ids=[case[0] for case in BAD_ROWS]
)
def test_bad_row_names_file_line_and_field(tmp_path, row, field):
    raises_at(write(tmp_path, [HEADER, row]), 2, field)


def test_bad_row_after_a_blank_line_names_its_physical_line(tmp_path):
    raises_at(write(tmp_path, [HEADER, "", "2,4,0,96,256"]), 3, "num_gpu_p_node")


def test_the_largest_spec_is_accepted(tmp_path):
    spec = read_cluster_spec(write(tmp_path, [HEADER, "1024,1024,65536,65536,1048576"]))
    assert (spec.num_nodes, spec.workers_per_node, spec.mem_per_node_bytes) == (2**20, 2**16, 2**50)


def test_zero_cpus_and_memory_are_allowed(tmp_path):
    spec = read_cluster_spec(write(tmp_path, [HEADER, "1,2,4,0,0"]))
    assert (spec.cpus_per_node, spec.mem_per_node_bytes) == (0, 0)


# --- ClusterSpec ------------------------------------------------------------------------------


def test_from_flags_puts_every_node_under_one_switch():
    assert ClusterSpec.from_flags(nodes=4, workers_per_node=8, cpus_per_node=16) == ClusterSpec(
        num_switches=1, nodes_per_switch=4, workers_per_node=8, cpus_per_node=16
    )


@pytest.mark.parametrize(
    ("nodes", "workers_per_node", "total"),
    [(1, 1, 1), (4, 8, 32), (16, 4, 64)],
    ids=["1x1", "4x8", "16x4"],
)
def test_from_flags_sizes(nodes, workers_per_node, total):
    spec = ClusterSpec.from_flags(nodes, workers_per_node)
    assert (spec.num_nodes, spec.total_workers) == (nodes, total)


def test_from_flags_defaults_cpus_and_memory_to_zero():
    spec = ClusterSpec.from_flags(2, 8)
    assert (spec.cpus_per_node, spec.mem_per_node_bytes) == (0, 0)


@pytest.mark.parametrize(
    ("nodes", "workers_per_node", "cpus_per_node", "field"),
    [(0, 8, 0, "nodes_per_switch"), (2, 0, 0, "workers_per_node"), (2, 8, -1, "cpus_per_node"),
     (2**20 + 1, 8, 0, "nodes"), (2, 2**16 + 1, 0, "workers_per_node"),
     (2, 8, 2**16 + 1, "cpus_per_node")],
    ids=["zero-nodes", "zero-workers", "negative-cpus", "too-many-nodes", "too-many-workers",
         "too-many-cpus"],
)  # fmt: skip
def test_from_flags_rejects_bad_sizes(nodes, workers_per_node, cpus_per_node, field):
    with pytest.raises(InputError) as caught:
        ClusterSpec.from_flags(nodes, workers_per_node, cpus_per_node)
    assert caught.value.field == field


def test_memory_over_a_pebibyte_per_node_is_refused():
    with pytest.raises(InputError) as caught:
        ClusterSpec(1, 1, 8, mem_per_node_bytes=2**50 + 1)
    assert caught.value.field == "mem_per_node_bytes"


def test_the_largest_cluster_is_accepted():
    spec = ClusterSpec.from_flags(2**20, 2**16)
    assert spec.total_workers == 2**36


def test_describe():
    assert ClusterSpec(2, 4, 8).describe() == "8 nodes x 8 GPUs = 64 GPUs"


# --- mixed clusters: one row per GPU type ------------------------------------------------------

TYPED_HEADER = HEADER + ",gpu_type"


def test_mixed_cluster_has_one_group_per_row_in_row_order(tmp_path):
    spec = read_cluster_spec(
        write(tmp_path, [TYPED_HEADER, "2,4,8,96,256,A100", "1,4,8,96,256,T4"])
    )
    assert (spec.num_switches, spec.nodes_per_switch, spec.num_nodes) == (3, 4, 12)
    assert spec.gpu_types == (("A100", 8), ("T4", 4))
    assert spec.groups == (("A100", range(0, 8)), ("T4", range(8, 12)))
    assert spec.total_workers == 96
    assert spec.describe() == "12 nodes x 8 GPUs = 96 GPUs (64 A100, 32 T4)"


def test_one_typed_row_is_one_group(tmp_path):
    spec = read_cluster_spec(write(tmp_path, [TYPED_HEADER, "1,2,4,0,0,V100M32"]))
    assert spec.gpu_types == (("V100M32", 2),)


def test_untyped_file_has_no_groups(tmp_path):
    spec = read_cluster_spec(write(tmp_path, [HEADER, "2,4,8,96,256"]))
    assert spec.gpu_types == () and spec.groups == ()


def test_unknown_gpu_type_is_refused_naming_the_known_ones(tmp_path):
    path = write(tmp_path, [TYPED_HEADER, "1,1,8,0,0,A100", "1,1,8,0,0,P100"])
    error = raises_at(path, 3, "gpu_type")
    assert "unknown GPU type 'P100'" in str(error)
    assert "A100" in str(error) and "T4" in str(error) and "V100M16" in str(error)


def test_a_type_named_twice_is_refused(tmp_path):
    path = write(tmp_path, [TYPED_HEADER, "1,1,8,0,0,T4", "1,1,8,0,0,A100", "1,1,8,0,0,T4"])
    assert "line 2" in str(raises_at(path, 4, "gpu_type"))


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ("1,2,8,0,0,T4", "num_node_p_switch"),
        ("1,1,4,0,0,T4", "num_gpu_p_node"),
        ("1,1,8,8,0,T4", "num_cpu_p_node"),
        ("1,1,8,0,64,T4", "mem_p_node"),
    ],
    ids=["nodes-per-switch", "gpus-per-node", "cpus-per-node", "memory"],
)
def test_rows_of_a_mixed_cluster_differ_only_in_type_and_switches(tmp_path, row, field):
    path = write(tmp_path, [TYPED_HEADER, "1,1,8,0,0,A100", row])
    raises_at(path, 3, field)


def test_a_bad_field_of_a_typed_row_names_its_line(tmp_path):
    path = write(tmp_path, [TYPED_HEADER, "1,1,8,0,0,A100", "0,1,8,0,0,T4"])
    raises_at(path, 3, "num_switch")


def test_gpu_types_are_refused_on_a_cpu_cluster(tmp_path):
    path = write(tmp_path, [TYPED_HEADER, "1,1,0,8,0,A100"])
    with pytest.raises(InputError, match="GPU cluster"):
        read_cluster_spec(path, resource="cpu")


@pytest.mark.parametrize(
    ("gpu_types", "match"),
    [
        ((("A100", 1),), "add up to 1, the cluster has 2"),
        ((("A100", 1), ("B200", 1)), "unknown GPU type 'B200'"),
        ((("A100", 2), ("T4", 0)), "must have >= 1 node"),
        ((("T4", 1), ("T4", 1)), "T4 named more than once"),
    ],
    ids=["nodes-mismatch", "unknown-type", "empty-group", "repeated-type"],
)
def test_cluster_spec_checks_its_groups(gpu_types, match):
    with pytest.raises(InputError, match=match):
        ClusterSpec(1, 2, 8, gpu_types=gpu_types)
