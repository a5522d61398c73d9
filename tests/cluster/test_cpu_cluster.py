"""CPU clusters: one worker per core, the bundled CPU tables, the same policies and CLI."""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path

import pytest

from json_contracts import assert_contract
from qosched.cli.main import main
from qosched.cluster.generate import GeneratorConfig, generate_trace
from qosched.cluster.job import JobSpec
from qosched.cluster.metrics import summarize
from qosched.cluster.policies import create_policy
from qosched.cluster.simulator import simulate
from qosched.cluster.spec import ClusterSpec, read_cluster_spec
from qosched.cluster.throughput import ThroughputModel, read_table
from qosched.core.errors import InputError

CPU_TABLES = resources.files("qosched") / "data" / "throughputs" / "CPU"
SPEC_HEADER = "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node"


@pytest.fixture(scope="module")
def cpu_tables() -> ThroughputModel:
    return ThroughputModel.bundled("CPU")


# --- the cluster ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "total", "text"),
    [
        (ClusterSpec.cpu(4, 32), 128, "4 nodes x 32 CPU cores = 128 CPU cores"),
        (
            ClusterSpec.from_flags(3, 16, resource="cpu"),
            48,
            "3 nodes x 16 CPU cores = 48 CPU cores",
        ),
        (ClusterSpec.cpu(1, 1), 1, "1 node x 1 CPU core = 1 CPU core"),
        (ClusterSpec.from_flags(2, 8), 16, "2 nodes x 8 GPUs = 16 GPUs"),
    ],
    ids=["4x32-cores", "3x16-cores-from-flags", "one-core", "gpu-default"],
)
def test_cluster_from_flags_counts_workers_in_its_unit(spec, total, text):
    assert (spec.total_workers, spec.describe()) == (total, text)


def test_cpu_cluster_names_its_unit_and_counts_cores_as_cpus():
    spec = ClusterSpec.cpu(4, 32)
    assert (spec.resource, spec.unit_name, spec.unit_plural) == ("cpu", "CPU core", "CPU cores")
    assert (spec.workers_per_node, spec.cpus_per_node) == (32, 32)


def test_unknown_resource_raises():
    with pytest.raises(InputError, match=r"resource.*'tpu'"):
        ClusterSpec(1, 1, 8, resource="tpu")


@pytest.mark.parametrize(
    ("row", "resource", "nodes", "per_node", "total"),
    [
        ("2,4,0,48,256", "cpu", 8, 48, 384),  # a CPU-only cluster: no GPUs per node
        ("1,2,8,64,256", "cpu", 2, 64, 128),  # the GPUs of a GPU cluster's row are ignored
        ("1,2,8,64,256", "gpu", 2, 8, 16),
    ],
    ids=["cpu-only-nodes", "cores-of-gpu-nodes", "gpus-of-the-same-row"],
)
def test_elasticflow_cluster_spec_gives_cores_or_gpus(
    tmp_path, row, resource, nodes, per_node, total
):
    path = tmp_path / "cluster.csv"
    path.write_text(f"{SPEC_HEADER}\n{row}\n")
    spec = read_cluster_spec(path, resource=resource)
    assert (spec.resource, spec.num_nodes, spec.workers_per_node, spec.total_workers) == (
        resource,
        nodes,
        per_node,
        total,
    )


@pytest.mark.parametrize(
    ("row", "resource", "field"),
    [("2,4,0,48,256", "gpu", "num_gpu_p_node"), ("2,4,8,0,256", "cpu", "num_cpu_p_node")],
    ids=["gpu-cluster-without-gpus", "cpu-cluster-without-cores"],
)
def test_cluster_spec_without_workers_per_node_raises(tmp_path, row, resource, field):
    path = tmp_path / "cluster.csv"
    path.write_text(f"{SPEC_HEADER}\n{row}\n")
    with pytest.raises(InputError, match=field):
        read_cluster_spec(path, resource=resource)


# --- the CPU tables ------------------------------------------------------------------------------


def test_cpu_tables_hold_the_built_in_workloads(cpu_tables):
    assert cpu_tables.models == ("cnn", "transformer")
    assert (
        cpu_tables.batch_sizes("cnn") == cpu_tables.batch_sizes("transformer") == (32, 64, 128, 256)
    )


@pytest.mark.parametrize("model", ["cnn", "transformer"])
def test_every_cpu_table_cell_is_a_positive_speed_up_to_one_sample_per_core(model):
    with resources.as_file(CPU_TABLES / f"{model}.csv") as path:
        table = read_table(Path(path))
    for batch, speeds in table.items():
        assert speeds, batch
        for cores, speed in speeds.items():
            # A cell is empty exactly where a core would get less than one sample.
            assert (speed > 0.0) == (cores <= batch), (batch, cores)


def measured_one_core_ms() -> dict[tuple[str, int], float]:
    """(workload, global batch) -> the one-core milliseconds in the tables' README."""
    readme = (CPU_TABLES / "README.md").read_text()
    rows = re.findall(r"^\| (cnn|transformer) \| (\d+) \| [\d,]+ \| ([\d.]+) \|", readme, re.M)
    return {(model, int(batch)): float(ms) for model, batch, ms in rows}


def test_one_core_speed_is_the_readme_measurement(cpu_tables):
    measured = measured_one_core_ms()
    assert len(measured) == 8
    for (model, batch), ms in measured.items():
        assert cpu_tables.curve(model, batch).rate(1) == pytest.approx(1000.0 / ms, rel=1e-3)


# --- policies on a CPU cluster -------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["qos", "fifo"])
def test_policy_runs_a_generated_trace_on_a_cpu_cluster(cpu_tables, policy):
    cluster = ClusterSpec.cpu(4, 32)
    trace = generate_trace(
        GeneratorConfig(jobs=40, load=1.5, cluster_workers=cluster.total_workers, seed=3),
        cpu_tables,
    )
    # The simulator raises if a decision ever exceeds the cluster; the timeline confirms it.
    result = simulate(cluster, cpu_tables, create_policy(policy), trace)
    assert max(workers for _, workers in result.allocation_timeline) <= cluster.total_workers
    assert all(o.declined or o.finish_s is not None for o in result.outcomes)
    assert summarize(result).jobs == 40


def test_qos_sizes_jobs_elastically_where_fifo_keeps_the_request(cpu_tables):
    """One node of 8 cores, two cnn jobs each asking for one core, each 1000 s of work on one
    core, deadline 500 s. fifo runs each on its one core: 1000 s, both late. qos may give each 4
    cores; the table's 4-core speed is over twice the 1-core speed, so each finishes in under
    500 s: both in time."""
    curve = cpu_tables.curve("cnn", 256)
    assert curve.rate(4) > 2.2 * curve.rate(1)  # the precondition of the hand computation
    iterations = round(1000 * curve.rate(1))
    jobs = [JobSpec(name, 0.0, "cnn", 256, iterations, 500.0, 1) for name in ("a", "b")]
    cluster = ClusterSpec.cpu(1, 8)
    met = {
        name: summarize(simulate(cluster, cpu_tables, create_policy(name), jobs)).deadline_met
        for name in ("qos", "fifo")
    }
    assert met == {"qos": 2, "fifo": 0}


# --- the command line ----------------------------------------------------------------------------


@pytest.fixture
def cpu_trace(tmp_path: Path) -> Path:
    path = tmp_path / "trace.csv"
    args = ["trace", "generate", "--out", str(path), "--jobs", "20", "--load", "1.0"]
    args += ["--throughputs", "CPU", "--cluster-workers", "64", "--seed", "2"]
    assert main(args) == 0
    return path


SIM_CPU = ["--resource", "cpu", "--nodes", "2", "--cpus-per-node", "32", "--throughputs", "CPU"]


def test_cli_simulates_a_cpu_cluster_in_cpu_cores(cpu_trace, capsys):
    assert main(["sim", "cluster", "--trace", str(cpu_trace), *SIM_CPU, "--policy", "qos"]) == 0
    out = capsys.readouterr().out
    assert "2 nodes x 32 CPU cores = 64 CPU cores" in out
    assert "CPU core util" in out


def test_cli_json_keys_do_not_depend_on_the_resource(cpu_trace, capsys):
    trace = ["sim", "cluster", "--trace", str(cpu_trace), "--policy", "qos", "--json"]
    assert main([*trace, *SIM_CPU]) == 0
    cpu = json.loads(capsys.readouterr().out)
    gpu_flags = ["--nodes", "2", "--gpus-per-node", "32", "--throughputs", "CPU"]
    assert main([*trace, *gpu_flags]) == 0
    gpu = json.loads(capsys.readouterr().out)
    assert_contract("sim-cluster", cpu)
    assert cpu.keys() == gpu.keys()
    # Same speeds and counts: only the name of the unit differs, so the numbers agree.
    assert cpu["deadline_satisfactory_ratio"] == gpu["deadline_satisfactory_ratio"]


def test_cli_cpu_cluster_from_a_cluster_spec(cpu_trace, tmp_path, capsys):
    spec = tmp_path / "cluster.csv"
    spec.write_text(f"{SPEC_HEADER}\n1,2,0,32,128\n")
    args = ["sim", "cluster", "--trace", str(cpu_trace), "--cluster-spec", str(spec)]
    assert main([*args, "--resource", "cpu", "--throughputs", "CPU"]) == 0
    assert "2 nodes x 32 CPU cores = 64 CPU cores" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--nodes", "2", "--cpus-per-node", "8"], "--cpus-per-node.*add --resource cpu"),
        (["--resource", "cpu", "--nodes", "2", "--gpus-per-node", "8"], "--gpus-per-node"),
        (["--resource", "cpu", "--nodes", "2"], "--cpus-per-node"),
    ],
    ids=["cores-on-a-gpu-cluster", "gpus-on-a-cpu-cluster", "cpu-cluster-without-cores"],
)
def test_cli_per_node_flag_must_match_the_resource(cpu_trace, capsys, flags, message):
    assert main(["sim", "cluster", "--trace", str(cpu_trace), *flags]) == 2
    assert re.search(message, capsys.readouterr().err)
