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


# --- services and training over the trace's clock -------------------------------------------

WORKLOAD_HEADER = (
    "pod_id,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,phase,creation_s,deletion_s,"
    "kind,model,batch,priority,rate_rps,goal,work_s,deadline_s\n"
)
#: s1 (half a GPU, 25 requests/s, goal 1.5x) lives [0, 600); t1 (half a GPU, 100 s of work,
#: deadline 300) arrives at 120; c1 asks for no GPU.
WORKLOAD_ROWS = (
    "s1,1000,100,1,500,,LS,Running,0,600,service,resnet50,1,1,25,p99_slowdown=1.5,,\n"
    "t1,1000,100,1,500,,BE,Running,120,,training,resnet50,1,0,,,100,300\n"
    "c1,1000,100,0,0,,BE,Running,0,10,,,,,,,,\n"
)
TWO_NODES = "sn,cpu_milli,memory_mib,gpu,model\nn1,8000,1000,1,T4\nn2,8000,1000,1,T4\n"


@pytest.fixture
def known_costs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Models' costs without estimating them: 10 ms a request, for resnet50 only."""
    from qosched import colocate
    from qosched.cluster.pods.costs import ModelCost

    asked: list[str] = []

    def estimated(gpu: str):
        asked.append(gpu)

        def cost(model: str, batch: int) -> ModelCost:
            if model != "resnet50":
                raise KeyError(model)
            return ModelCost(0.010 * batch, 0.5, 0.3, 0.001)

        return cost

    monkeypatch.setattr(colocate, "estimated_costs", estimated)
    return asked


@pytest.fixture
def mixed(tmp_path: Path) -> tuple[Path, Path]:
    trace = tmp_path / "mixed.csv"
    trace.write_text(WORKLOAD_HEADER + WORKLOAD_ROWS)
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(TWO_NODES)
    return trace, nodes


def test_a_trace_with_workloads_reports_services_training_and_the_cluster(
    mixed: tuple[Path, Path], known_costs: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    trace, nodes = mixed
    payload = run_json(["sim", "cluster", "--trace", str(trace), "--cluster-spec", str(nodes),
                        "--policy", "best-fit", "--sharing", "time-slicing", "--gpu", "T4",
                        "--json"], capsys)  # fmt: skip
    assert_contract("sim-cluster-pods", payload)
    assert known_costs == ["T4"]
    # Best fit puts t1 beside s1; time-slicing slows both 2x: t1 runs 120..320 (deadline 300
    # missed), and s1 misses windows 2..5 of its 10.
    assert (payload["sharing"], payload["colocation"], payload["queue"], payload["window_s"]) == (
        "time-slicing", "any", "arrival", 60.0)  # fmt: skip
    assert payload["services"]["windows"] == 10
    assert payload["services"]["windows_met"] == 6
    assert payload["training"] == {"jobs": 1, "finished": 1, "deadline_jobs": 1,
                                   "deadline_met": 0, "deadline_satisfactory_ratio": 0.0,
                                   "avg_jct_s": 200.0}  # fmt: skip
    assert payload["cluster"]["peak_allocated_gpus"] == 1.0
    # The arrivals replay (no pod leaves) keeps its own keys.
    assert payload["placed"] == 3


def test_harvesting_reports_promises_and_evictions(
    mixed: tuple[Path, Path], known_costs: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # Time-slicing would slow s1 2x > 1.5x beside t1, so t1 goes to n2 alone at 120: it ends
    # at 220 by its deadline of 300 at that (pessimistic) speed, so it is promised, and met.
    trace, nodes = mixed
    payload = run_json(["sim", "cluster", "--trace", str(trace), "--cluster-spec", str(nodes),
                        "--policy", "best-fit", "--sharing", "time-slicing",
                        "--colocation", "harvest", "--queue", "priority", "--json"],
                       capsys)  # fmt: skip
    assert_contract("sim-cluster-pods", payload)
    assert payload["colocation"] == "harvest"
    assert payload["services"]["windows_met"] == 10
    assert payload["training"] == {"jobs": 1, "finished": 1, "deadline_jobs": 1,
                                   "deadline_met": 1, "deadline_satisfactory_ratio": 1.0,
                                   "avg_jct_s": 100.0, "guaranteed": 1, "guaranteed_met": 1,
                                   "best_effort_met": 0, "evictions": 0, "moves": 0,
                                   "lost_gpu_s": 0.0}  # fmt: skip


def test_keeping_services_apart_meets_the_deadline_and_every_window(
    mixed: tuple[Path, Path], known_costs: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    trace, nodes = mixed
    payload = run_json(["sim", "cluster", "--trace", str(trace), "--cluster-spec", str(nodes),
                        "--policy", "best-fit,fgd", "--sharing", "time-slicing",
                        "--colocation", "apart", "--queue", "priority", "--json"],
                       capsys)  # fmt: skip
    assert_contract("sim-cluster-pods", payload)
    for run in payload["runs"]:
        assert (run["colocation"], run["queue"]) == ("apart", "priority")
        assert run["services"]["windows_met"] == 10
        assert run["training"]["deadline_met"] == 1
        assert run["training"]["avg_jct_s"] == 100.0


def test_the_plot_draws_the_run_over_time(
    mixed: tuple[Path, Path], known_costs: list[str], tmp_path: Path
) -> None:
    trace, nodes = mixed
    out = tmp_path / "plots"
    assert main(["sim", "cluster", "--trace", str(trace), "--cluster-spec", str(nodes),
                 "--policy", "fgd,best-fit", "--plot", str(out)]) == 0  # fmt: skip
    assert (out / "pods_over_time.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_plain_pod_trace_has_no_replay(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    trace, nodes = files
    payload = run_json(["sim", "cluster", "--trace", str(trace), "--cluster-spec", str(nodes),
                        "--policy", "fgd", "--json"], capsys)  # fmt: skip
    assert [payload[k] for k in ("sharing", "colocation", "queue", "window_s", "services",
                                 "training", "cluster")] == [None] * 7  # fmt: skip


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--window-s", "30"], "--window-s applies to a pod trace with workloads only"),
        (["--plot", "plots"], "--plot applies to a pod trace with workloads only"),
    ],
)
def test_a_plain_pod_trace_refuses_the_replay_options(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    trace, nodes = files
    assert main(["sim", "cluster", "--trace", str(trace), "--cluster-spec", str(nodes),
                 *extra]) != 0  # fmt: skip
    assert message in capsys.readouterr().err


def test_the_import_gives_ls_pods_services_and_be_pods_training(
    tmp_path: Path, known_costs: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from qosched.cluster.pods import assign
    from qosched.cluster.pods.trace import read_pod_trace

    # Every model the rule draws is resnet50 here, the one the fake costs know.
    monkeypatch.setattr(assign, "SERVING_MODELS", ("resnet50",))
    monkeypatch.setattr(assign, "TRAINING_MODELS", ("resnet50",))
    source = tmp_path / "openb_pod_list.csv"
    source.write_text(PODS)
    out = tmp_path / "pods.csv"
    assert main(["trace", "import", "--from", "alibaba-gpu-2023", str(source), "--out",
                 str(out), "--workloads", "--seed", "4"]) == 0  # fmt: skip
    p1, p2, p3, p4 = read_pod_trace(out)
    assert known_costs == ["A100"]
    assert p1.workload.kind == "service" and p3.workload.kind == "service"
    # p1 asks for 600 of a GPU: alone it keeps it busy 0.2..0.8 x 0.6 of the time at 10 ms.
    assert 0.12 - 1e-3 <= p1.workload.rate.at(0) * 0.010 <= 0.48 + 1e-3
    assert p2.workload.kind == "training" and p2.workload.work_s == 50.0
    assert p4.workload is None


def test_the_job_trace_import_refuses_workloads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "x.csv"
    source.write_text("a\n")
    code = main(["trace", "import", "--from", "philly", str(source), "--out",
                 str(tmp_path / "o.csv"), "--workloads"])  # fmt: skip
    assert code != 0
    assert "--workloads applies to --from alibaba-gpu-2023 only" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--colocation", "goals"], "--colocation applies to a pod trace with workloads only"),
        (["--queue", "priority"], "--queue applies to a pod trace with workloads only"),
    ],
)
def test_a_job_trace_refuses_the_pod_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    trace = tmp_path / "jobs.csv"
    assert main(["trace", "generate", "--out", str(trace), "--jobs", "3", "--cluster-gpus", "4",
                 "--seed", "1"]) == 0  # fmt: skip
    capsys.readouterr()
    assert main(["sim", "cluster", "--trace", str(trace), "--nodes", "1", "--gpus-per-node",
                 "4", *extra]) != 0  # fmt: skip
    assert message in capsys.readouterr().err
