"""``trace import --from alibaba-gpu-2023`` and ``sim cluster`` on a pod trace, through the CLI:
the JSON contract (docs/contracts.md, sim-cluster-pods.schema.json) and values by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from json_contracts import assert_contract, schema
from qosched.cli.main import main

PODS = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time\n"
    "p1,1000,100,1,600,,LS,Running,0,50,0\n"
    "p2,1000,100,1,600,,BE,Running,10,60,10\n"
    "p3,1000,100,2,1000,,LS,Pending,20,30,\n"
    "p4,1000,100,0,0,,BE,Running,30,40,30\n"
)
NODES = "sn,cpu_milli,memory_mib,gpu,model\nn1,8000,1000,2,T4\nn2,8000,1000,1,T4\n"


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    source = tmp_path / "openb_pod_list.csv"
    source.write_text(PODS)
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(NODES)
    trace = tmp_path / "pods.csv"
    assert main(["trace", "import", "--from", "alibaba-gpu-2023", str(source), "--out",
                 str(trace)]) == 0  # fmt: skip
    return trace, nodes


def run_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    capsys.readouterr()
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    return json.loads(out)


def test_several_policies_hold_to_the_contract(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    trace, nodes = files
    payload = run_json(["sim", "cluster", "--trace", str(trace), "--cluster-spec", str(nodes),
                        "--policy", "fgd,best-fit", "--json"], capsys)  # fmt: skip
    assert_contract("sim-cluster-pods", payload)
    assert [run["policy"] for run in payload["runs"]] == ["fgd", "best-fit"]
    best_fit = payload["runs"][1]
    assert list(best_fit) == list(schema("sim-cluster-pods")["$defs"]["run"]["properties"])
    # By hand: p1 -> n2 (best fit), p2 -> n1, p3 (2 whole GPUs) fits nowhere, p4 placed.
    assert best_fit["cluster_gpus"] == 3
    assert (best_fit["placed"], best_fit["failed"], best_fit["first_failure"]) == (3, 1, 2)
    assert best_fit["arrived_gpus"] == pytest.approx(3.2)
    assert best_fit["unallocated_gpus"] == pytest.approx(1.8)
    assert best_fit["unallocated_gpus_at_first_failure"] == pytest.approx(1.8)


def test_one_policy_prints_one_run(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    trace, nodes = files
    payload = run_json(["sim", "cluster", "--trace", str(trace), "--cluster-spec", str(nodes),
                        "--policy", "random-fit", "--json"], capsys)  # fmt: skip
    assert_contract("sim-cluster-pods", payload)
    assert payload["policy"] == "random-fit"


def test_the_imported_trace_keeps_every_pod(files: tuple[Path, Path]) -> None:
    trace, _ = files
    lines = trace.read_text().splitlines()
    assert lines[0] == (
        "pod_id,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,phase,creation_s,deletion_s"
    )
    assert lines[1:] == [
        "p1,1000,100,1,600,,LS,Running,0,50",
        "p2,1000,100,1,600,,BE,Running,10,60",
        "p3,1000,100,2,1000,,LS,Pending,20,30",
        "p4,1000,100,0,0,,BE,Running,30,40",
    ]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--policy", "qos"], "unknown pod placement policy 'qos'; known policies: fgd"),
        (["--nodes", "2"], "--nodes does not apply to a pod trace"),
    ],
)
def test_a_pod_trace_refuses_what_does_not_apply(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    trace, nodes = files
    assert (
        main(["sim", "cluster", "--trace", str(trace), "--cluster-spec", str(nodes), *extra]) != 0
    )
    assert message in capsys.readouterr().err
