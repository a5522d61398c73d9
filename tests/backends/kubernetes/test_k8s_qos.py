"""The qos policy on Kubernetes: admission written on the job, progress reported by the pods
feeding the predictor, completion."""

from __future__ import annotations

import pytest
from fake_apiserver import FakeApiServer
from k8s_helpers import job_set, scheduler

from qosched.backends.kubernetes import jobs as J
from qosched.backends.kubernetes.kube import api_client
from qosched.backends.kubernetes.progress import ProgressReporter

RESNET = {J.MODEL: "resnet50", J.BATCH_SIZE: "64"}  # A100 table: 6.84 it/s on one GPU


@pytest.fixture
def api():
    with FakeApiServer() as server:
        server.add_node("g1", gpus=8, cpu="64", memory="256Gi")
        yield server


def admission(api, name: str) -> str:
    return api.get("statefulsets", f"ml/{name}")["metadata"]["annotations"].get(J.ADMISSION)


@pytest.mark.parametrize(
    ("iterations", "deadline", "best_effort", "expected", "replicas"),
    [
        # 10k iterations take 1461 s on one GPU: two hours is plenty.
        ("10000", "2h", "false", "guaranteed", None),
        # 10M iterations in a minute: no count of GPUs does it.
        ("10000000", "1m", "false", "declined", 0),
        ("10000000", "1m", "true", "best-effort", None),
    ],
    ids=["feasible", "impossible", "impossible-best-effort"],
)
def test_admission_is_written_on_the_job(
    api, iterations, deadline, best_effort, expected, replicas
):
    notes = {**RESNET, J.ITERATIONS: iterations, J.DEADLINE: deadline, J.BEST_EFFORT: best_effort}
    api.create("statefulsets", job_set("j", annotations=notes))
    sched = scheduler(api.url, policy="qos")
    sched.step()
    sched.step()
    assert admission(api, "j") == expected
    if replicas is not None:
        assert api.get("statefulsets", "ml/j")["spec"]["replicas"] == replicas
        assert not [p for p in api.list("pods") if p["spec"].get("nodeName")]


def test_progress_from_the_pods_reaches_the_predictor(api):
    notes = {**RESNET, J.ITERATIONS: "100000", J.DEADLINE: "10h"}
    api.create("statefulsets", job_set("j", annotations=notes))
    sched = scheduler(api.url, policy="qos")
    for _ in range(3):
        sched.step()
    pods = [p for p in api.list("pods") if p["spec"].get("nodeName")]
    assert pods, "the job runs"
    workers = sched._states["ml/j"].workers
    table_rate = sched._states["ml/j"].curve.rate(workers)
    reporter = ProgressReporter(
        api_client(api.url), pod_name=pods[0]["metadata"]["name"], namespace="ml"
    )
    measured_rate = 2.0 * table_rate  # the job runs twice as fast as its table says
    for active_s in (10.0, 110.0, 210.0):
        assert reporter.report(int(measured_rate * active_s), active_s, force=True)
        sched.step()
    state = sched._states["ml/j"]
    assert state.active_s == 210.0
    assert state.iterations_done == int(measured_rate * 210.0)
    predictor = sched.policy.predictor_of("ml/j")
    # From the job's start (0 iterations at 0 s, seen at admission) to its last report.
    assert predictor.observed_seconds == pytest.approx(210.0)
    predicted = predictor.predict(workers).rate
    assert abs(predicted - measured_rate) < abs(table_rate - measured_rate)


def test_a_job_that_reports_all_its_work_is_closed(api):
    api.create("statefulsets", job_set("j", annotations={**RESNET, J.ITERATIONS: "500"}))
    sched = scheduler(api.url, policy="qos")
    for _ in range(3):
        sched.step()
    api.patch(
        "pods",
        "ml/j-0",
        {"metadata": {"annotations": {J.PROGRESS: '{"iteration": 500, "active_s": 80}'}}},
    )
    report = sched.step()
    assert report.succeeded == ["ml/j"]
    sts = api.get("statefulsets", "ml/j")
    assert sts["metadata"]["annotations"][J.STATE] == J.SUCCEEDED
    assert sts["spec"]["replicas"] == 0
    assert not api.list("pods")
    assert sched.step().decision == {}  # a finished job is never scheduled again
