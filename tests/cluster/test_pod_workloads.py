"""Services and training jobs in the pod trace: read, checked (bad cells refused by name),
written back; and the seeded rule that gives Alibaba's pods their workloads."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest

from qosched.cluster.pods.assign import LOAD, SERVING_MODELS, assign_workloads
from qosched.cluster.pods.trace import POD_TRACE_HEADER, Pod, read_pod_trace, write_pod_trace
from qosched.cluster.pods.workloads import (
    WORKLOAD_COLUMNS,
    RateSeries,
    ServiceSpec,
    TrainingSpec,
    parse_rate,
)
from qosched.core.errors import InputError
from qosched.core.goals import BEST_EFFORT, Goal

HEADER = ",".join((*POD_TRACE_HEADER, *WORKLOAD_COLUMNS)) + "\n"
POD = "p1,1000,100,1,500,,LS,Running,10,600"
GOOD = (
    "s1,1000,100,1,500,,LS,Running,0,600,service,resnet50,1,2,0:25|300:50,p99_latency_ms=40,,\n"
    "t1,1000,100,2,1000,,BE,Running,5,,training,hf:bert,8,0,,,3600,7200\n"
    "c1,1000,100,0,0,,BE,Running,5,9,,,,,,,,\n"
)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pods.csv"
    path.write_text(text)
    return path


def test_services_and_training_read_with_every_field(tmp_path: Path) -> None:
    s1, t1, c1 = read_pod_trace(write(tmp_path, HEADER + GOOD))
    assert s1.workload == ServiceSpec(
        "resnet50", RateSeries(((0.0, 25.0), (300.0, 50.0))), Goal("p99_latency", 0.040), 2, 1
    )
    assert t1.workload == TrainingSpec("hf:bert", 3600.0, 7200.0, 0, 8)
    assert t1.workload.goal == BEST_EFFORT
    assert c1.workload is None
    assert s1.workload.rate.at(299.9) == 25.0 and s1.workload.rate.at(300) == 50.0


def test_the_trace_reads_back_the_same_workloads(tmp_path: Path) -> None:
    pods = read_pod_trace(write(tmp_path, HEADER + GOOD))
    out = tmp_path / "out.csv"
    write_pod_trace(pods, out)
    assert read_pod_trace(out) == pods


def test_a_trace_without_workload_columns_reads_as_before(tmp_path: Path) -> None:
    (pod,) = read_pod_trace(write(tmp_path, ",".join(POD_TRACE_HEADER) + "\n" + POD + "\n"))
    assert pod.workload is None


@pytest.mark.parametrize(
    ("cells", "field", "message"),
    [
        ("service,resnet5,1,1,25,p99_slowdown=1.5,,", "model", "unknown model 'resnet5'"),
        ("service,pkg.mod:make,1,1,25,p99_slowdown=1.5,,", "model", "zoo name or hf:"),
        ("service,,1,1,25,p99_slowdown=1.5,,", "model", "needs a model"),
        ("serving,resnet50,1,1,25,p99_slowdown=1.5,,", "kind", "unknown kind 'serving'"),
        ("service,resnet50,1,1,0,p99_slowdown=1.5,,", "rate_rps", r"> 0 and <= 1e\+06"),
        ("service,resnet50,1,1,2e6,p99_slowdown=1.5,,", "rate_rps", r"got 2e6"),
        ("service,resnet50,1,1,,p99_slowdown=1.5,,", "rate_rps", "needs a request rate"),
        ("service,resnet50,1,1,0:5|0:6,p99_slowdown=1.5,,", "rate_rps", "must increase"),
        ("service,resnet50,1,1,10:5,p99_slowdown=1.5,,", "rate_rps", "starts at time 0"),
        ("service,resnet50,1,1,25,p99_slowdown=0.5,,", "goal", r"\[1, 1e\+06\]"),
        ("service,resnet50,1,1,25,p99_latency_ms=0,,", "goal", "> 0"),
        ("service,resnet50,1,1,25,p95_latency_ms=5,,", "goal", "unknown goal 'p95_latency_ms'"),
        ("service,resnet50,1,1,25,fast,,", "goal", "key=value"),
        ("service,resnet50,1,1,25,,,", "goal", "needs a goal"),
        ("service,resnet50,1,1,25,best_effort,60,", "work_s", "leave the cell empty"),
        ("service,resnet50,1,-1,25,best_effort,,", "priority", ">= 0"),
        ("service,resnet50,0,1,25,best_effort,,", "batch", ">= 1"),
        ("training,resnet50,1,0,25,,60,", "rate_rps", "no rate_rps"),
        ("training,resnet50,1,0,,,0,", "work_s", "> 0"),
        ("training,resnet50,1,0,,,60,5", "deadline_s", "not after the pod's creation"),
        (",resnet50,,,,,,", "model", "leave the cell empty"),
    ],
    ids=[
        "unknown-model",
        "factory-model",
        "no-model",
        "unknown-kind",
        "zero-rate",
        "rate-beyond-bound",
        "no-rate",
        "rate-times-not-increasing",
        "rate-not-from-zero",
        "slowdown-below-one",
        "zero-latency",
        "unknown-goal-key",
        "goal-not-key-value",
        "no-goal",
        "service-with-work",
        "negative-priority",
        "zero-batch",
        "training-with-rate",
        "no-work",
        "deadline-before-creation",
        "workload-cells-without-kind",
    ],
)
def test_a_bad_workload_cell_names_its_line_and_field(
    tmp_path: Path, cells: str, field: str, message: str
) -> None:
    path = write(tmp_path, HEADER + GOOD + f"{POD},{cells}\n")
    with pytest.raises(InputError, match=message) as caught:
        read_pod_trace(path)
    assert (caught.value.line, caught.value.field) == (5, field)


def test_a_workload_on_a_pod_without_a_gpu_is_refused(tmp_path: Path) -> None:
    row = "g,1000,100,0,0,,LS,Running,0,5,service,resnet50,1,1,25,best_effort,,\n"
    with pytest.raises(InputError, match="runs on a GPU") as caught:
        read_pod_trace(write(tmp_path, HEADER + row))
    assert caught.value.field == "num_gpu"


def test_a_rate_series_reads_its_steps() -> None:
    assert parse_rate("120") == RateSeries.constant(120)
    assert parse_rate("0:1|60:2.5").steps == ((0.0, 1.0), (60.0, 2.5))
    assert parse_rate("0:1|60:2.5").text() == "0:1|60:2.5"


REQUEST_S = {"resnet50": 0.002, "bert_base": 0.004, "mobilenet": 0.0002, "resnet": 0.0006,
             "bert": 0.0005, "mlp": 0.00003}  # fmt: skip


def request_time(model: str, batch: int) -> float:
    return REQUEST_S[model] * batch


def alibaba_pods() -> list[Pod]:
    return [
        Pod("ls-shared", 6000, 1000, 1, 460, qos="LS", creation_s=10, deletion_s=500),
        Pod("ls-two", 6000, 1000, 2, 1000, qos="LS", creation_s=20, deletion_s=900),
        Pod("be", 6000, 1000, 1, 1000, qos="BE", creation_s=30, deletion_s=330),
        Pod("be-instant", 6000, 1000, 1, 1000, qos="BE", creation_s=30, deletion_s=30),
        Pod("cpu", 6000, 1000, 0, 0, qos="LS", creation_s=40, deletion_s=50),
        Pod("burstable", 6000, 1000, 1, 1000, qos="Burstable", creation_s=40, deletion_s=50),
    ]


def test_alibaba_pods_get_workloads_by_the_stated_rule() -> None:
    shared, two, be, instant, cpu, burstable = assign_workloads(alibaba_pods(), request_time, 3)
    for pod in (shared, two):
        w = pod.workload
        assert isinstance(w, ServiceSpec) and w.model in SERVING_MODELS
        assert (w.priority, w.batch, w.goal.kind) == (1, 1, "p99_slowdown")
        # Each GPU is kept busy alone u x gpu_milli / 1000 of the time, u in LOAD.
        duty = w.rate.at(0) / pod.num_gpu * REQUEST_S[w.model]
        low, high = (bound * pod.gpu_milli / 1000 for bound in LOAD)
        assert low - 1e-3 <= duty <= high + 1e-3
    assert isinstance(be.workload, TrainingSpec)
    assert (be.workload.work_s, be.workload.deadline_s, be.workload.batch) == (300.0, None, 8)
    assert instant.workload is cpu.workload is burstable.workload is None


def test_a_pods_workload_depends_on_the_seed_and_its_name_only() -> None:
    pods = alibaba_pods()
    first = {p.pod_id: p.workload for p in assign_workloads(pods, request_time, 3)}
    shuffled = pods[:]
    random.Random(1).shuffle(shuffled)
    shuffled.append(replace(pods[0], pod_id="another"))
    again = {p.pod_id: p.workload for p in assign_workloads(shuffled, request_time, 3)}
    assert all(again[name] == workload for name, workload in first.items())
    drawn = {seed: assign_workloads(pods[:1], request_time, seed)[0].workload for seed in range(8)}
    assert len(set(drawn.values())) > 1
