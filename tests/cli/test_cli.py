"""The ``qosched`` command: the JSON contract of docs/contracts.md, errors as exit code 2 with
context."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

import qosched
from json_contracts import assert_contract
from qosched.cli.main import main
from qosched.cluster.traces import read_trace


@pytest.fixture
def small_trace(tmp_path: Path) -> Path:
    path = tmp_path / "trace.csv"
    assert (
        main(
            [
                "trace",
                "generate",
                "--out",
                str(path),
                "--jobs",
                "40",
                "--load",
                "1.5",
                "--cluster-gpus",
                "16",
                "--seed",
                "5",
                "--format",
                "elasticflow",
            ]
        )
        == 0
    )
    return path


def test_sim_cluster_json_has_the_contract_fields(small_trace, capsys):
    code = main(
        [
            "sim",
            "cluster",
            "--trace",
            str(small_trace),
            "--nodes",
            "2",
            "--gpus-per-node",
            "8",
            "--policy",
            "edf",
            "--json",
        ]
    )
    assert code == 0
    payload = json.loads(capsys.readouterr().out)
    assert_contract("sim-cluster", payload)
    assert payload["policy"] == "edf"
    assert payload["jobs"] == 40
    assert payload["accepted"] + payload["declined"] == 40
    assert 0.0 <= payload["deadline_satisfactory_ratio"] <= 1.0


def test_several_policies_give_one_object_with_runs(small_trace, capsys):
    code = main(
        [
            "sim",
            "cluster",
            "--trace",
            str(small_trace),
            "--nodes",
            "2",
            "--gpus-per-node",
            "8",
            "--policy",
            "fifo,elasticflow",
            "--json",
        ]
    )
    assert code == 0
    payload = json.loads(capsys.readouterr().out)
    assert [run["policy"] for run in payload["runs"]] == ["fifo", "elasticflow"]


def test_several_policies_compare_jct_over_the_jobs_all_of_them_finished(
    small_trace, tmp_path, capsys
):
    out = tmp_path / "jobs"
    command = ["sim", "cluster", "--trace", str(small_trace), "--nodes", "2"]
    command += ["--gpus-per-node", "8", "--policy", "edf,elasticflow", "--json"]
    assert main([*command, "--jobs-csv", str(out)]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    # The common set and its means, read back from the per-job CSVs.
    rows = {}
    for name in ("edf", "elasticflow"):
        with (out / f"jobs_{name}.csv").open(newline="") as handle:
            rows[name] = {r["job_id"]: r for r in csv.DictReader(handle)}
    common = [j for j in rows["edf"] if all(rows[n][j]["finish_s"] for n in rows)]
    declined = sum(run["declined"] for run in runs)
    assert declined and 0 < len(common) < 40  # elasticflow declines some: the sets differ
    for run in runs:
        own = rows[run["policy"]]
        jcts = [float(own[j]["jct_s"]) for j in common]
        best_effort = [float(own[j]["jct_s"]) for j in common if not own[j]["deadline_s"]]
        assert run["common_jobs"] == len(common)
        assert run["common_jct_s"] == pytest.approx(sum(jcts) / len(jcts))
        assert run["best_effort_jct_s"] == (
            pytest.approx(sum(best_effort) / len(best_effort)) if best_effort else None
        )
    assert_contract("sim-cluster", {"runs": runs})


@pytest.mark.parametrize("order", ["best_effort_first", "completion"])
def test_qos_spare_order_reaches_the_policy(small_trace, capsys, monkeypatch, order):
    import qosched.cluster.fidelity as fidelity

    made = []
    real = fidelity.create_policy

    def recording(name, **options):
        made.append((name, options))
        return real(name, **options)

    monkeypatch.setattr(fidelity, "create_policy", recording)
    command = ["sim", "cluster", "--trace", str(small_trace), "--nodes", "2"]
    command += ["--gpus-per-node", "8", "--policy", "qos,edf", "--json"]
    assert main([*command, "--qos-spare-order", order]) == 0
    assert_contract("sim-cluster", json.loads(capsys.readouterr().out))
    assert made == [("qos", {"spare_order": order}), ("edf", {})]


@pytest.mark.slow
def test_cluster_spec_file_and_plots(small_trace, tmp_path, capsys):
    spec = tmp_path / "cluster.csv"
    spec.write_text(
        "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n1,2,8,64,256\n"
    )
    out = tmp_path / "out"
    code = main(
        [
            "sim",
            "cluster",
            "--trace",
            str(small_trace),
            "--cluster-spec",
            str(spec),
            "--policy",
            "all",
            "--plot",
            str(out),
            "--jobs-csv",
            str(out),
        ]
    )
    assert code == 0
    table = capsys.readouterr().out
    for name in ("fifo", "edf", "srtf", "las", "elasticflow"):
        assert name in table
        rows = (out / f"jobs_{name}.csv").read_text().splitlines()
        assert len(rows) == 41  # header + one row per job
    assert (out / "cluster_summary.png").stat().st_size > 10_000


MIXED_SPEC = (
    "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node,gpu_type\n"
    "1,1,8,96,256,A100\n1,1,8,96,256,T4\n"
)


def test_mixed_cluster_spec_runs_and_names_each_job_s_gpu_type(small_trace, tmp_path, capsys):
    spec = tmp_path / "mixed.csv"
    spec.write_text(MIXED_SPEC)
    out = tmp_path / "out"
    args = ["sim", "cluster", "--trace", str(small_trace), "--cluster-spec", str(spec)]
    assert main([*args, "--policy", "qos,fifo", "--json", "--jobs-csv", str(out)]) == 0
    assert len(json.loads(capsys.readouterr().out)["runs"]) == 2
    for name in ("qos", "fifo"):
        with (out / f"jobs_{name}.csv").open() as handle:
            rows = list(csv.DictReader(handle))
        assert len(rows) == 40
        types = {row["gpu_type"] for row in rows if row["declined"] == "0"}
        assert types <= {"A100", "T4", "A100+T4", "T4+A100"} and "A100" in types


def test_mixed_cluster_needs_a_bundled_gpu_table_set(small_trace, tmp_path, capsys):
    spec = tmp_path / "mixed.csv"
    spec.write_text(MIXED_SPEC)
    # The A100 tables themselves, read from a directory, which names no GPU type.
    tables = tmp_path / "tables"
    shutil.copytree(Path(qosched.__file__).parent / "data" / "throughputs" / "A100", tables)
    args = ["sim", "cluster", "--trace", str(small_trace), "--cluster-spec", str(spec)]
    assert main([*args, "--throughputs", "A100", "--policy", "fifo"]) == 0
    capsys.readouterr()
    # A directory of tables says nothing of the GPU type they were measured on.
    assert main([*args, "--throughputs", str(tables), "--policy", "fifo"]) == 2
    assert "tables of a known GPU type" in capsys.readouterr().err


def test_generated_trace_reads_back_in_both_layouts(tmp_path):
    paths = {}
    for layout in ("qosched", "elasticflow"):
        paths[layout] = tmp_path / f"{layout}.csv"
        assert (
            main(
                [
                    "trace",
                    "generate",
                    "--out",
                    str(paths[layout]),
                    "--jobs",
                    "25",
                    "--best-effort-fraction",
                    "0.3",
                    "--seed",
                    "9",
                    "--format",
                    layout,
                ]
            )
            == 0
        )
    assert read_trace(paths["qosched"]).jobs == read_trace(paths["elasticflow"]).jobs


NODES = ["--nodes", "1", "--gpus-per-node", "8"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nodes", "1", "--gpus-per-node", "8", "--policy", "nope"], "known policies: "),
        (["--policy", "edf"], "give --cluster-spec PATH, or both --nodes N"),
        ([*NODES, "--cross-node-factor", "0.05"], "field '--cross-node-factor': must be in [0.1"),
        ([*NODES, "--restart-pause-s", "nan"], "field '--restart-pause-s'"),
    ],
    ids=["unknown-policy", "no-cluster", "cross-node-factor", "restart-pause"],
)
def test_bad_flags_exit_2_with_a_clear_message(small_trace, capsys, args, message):
    assert main(["sim", "cluster", "--trace", str(small_trace), *args]) == 2
    assert message in capsys.readouterr().err


def test_bad_trace_row_names_file_line_and_field(tmp_path, capsys):
    trace = tmp_path / "bad.csv"
    trace.write_text(
        "job_id,submit_time,iteration,model_name,ddl,batch_size,num_gpu,duration\n"
        "a,0,100,resnet50,500,64,1,100\n"
        "b,10,100,resnet50,500,63,1,100\n"
    )
    code = main(
        [
            "sim",
            "cluster",
            "--trace",
            str(trace),
            "--nodes",
            "1",
            "--gpus-per-node",
            "8",
            "--policy",
            "edf",
        ]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "bad.csv:3" in err and "batch_size" in err and "63" in err


@pytest.mark.slow
def test_demo_prints_every_policy_and_writes_plots(tmp_path, capsys):
    assert main(["demo", "--simulate", "--out", str(tmp_path)]) == 0
    table = capsys.readouterr().out
    for name in ("fifo", "edf", "srtf", "las", "elasticflow"):
        assert name in table
    assert (tmp_path / "cluster_summary.png").exists()


def test_hidden_speeds_are_seeded_and_change_the_outcome(small_trace, capsys):
    def run(*extra: str) -> dict:
        assert (
            main(
                [
                    "sim",
                    "cluster",
                    "--trace",
                    str(small_trace),
                    "--nodes",
                    "2",
                    "--gpus-per-node",
                    "8",
                    "--policy",
                    "qos",
                    "--json",
                    *extra,
                ]
            )
            == 0
        )
        payload = json.loads(capsys.readouterr().out)
        payload.pop("wall_s")
        return payload

    hidden = ["--speed-sigma", "0.3", "--noise", "0.05"]
    assert run(*hidden, "--seed", "4") == run(*hidden, "--seed", "4")
    assert run(*hidden, "--seed", "4")["avg_jct_s"] != run()["avg_jct_s"]


def test_out_of_range_hidden_speed_is_a_clear_error(small_trace, capsys):
    code = main(
        [
            "sim",
            "cluster",
            "--trace",
            str(small_trace),
            "--nodes",
            "2",
            "--gpus-per-node",
            "8",
            "--policy",
            "edf",
            "--speed-sigma",
            "1.5",
        ]
    )
    assert code == 2
    assert "field '--speed-sigma': must be in [0, 1)" in capsys.readouterr().err
