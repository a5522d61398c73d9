"""The qos policy on Kubernetes: admission written on the job, progress reported by the pods
feeding the predictor, completion."""

from __future__ import annotations

import json

import pytest
from fake_apiserver import FakeApiServer
from k8s_helpers import gpus_on, job_set, made_ago, scheduler, trainer_client

from qosched.backends.kubernetes import jobs as J
from qosched.backends.kubernetes.progress import ProgressReporter

RESNET = {J.MODEL: "resnet50", J.BATCH_SIZE: "64"}  # A100 table: 6.84 it/s on one GPU


pytestmark = pytest.mark.apiserver(nodes={"g1": {"gpus": 8, "cpu": "64", "memory": "256Gi"}})


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
    api.create("statefulsets", made_ago(job_set("j", annotations=notes), 3600))
    sched = scheduler(api.url, policy="qos")
    for _ in range(3):
        sched.step()
    pods = [p for p in api.list("pods") if p["spec"].get("nodeName")]
    assert pods, "the job runs"
    workers = sched._states["ml/j"].workers
    table_rate = sched._states["ml/j"].curve.rate(workers)
    reporter = ProgressReporter(
        trainer_client(api.url, "ml", "j"), pod_name=pods[0]["metadata"]["name"], namespace="ml"
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


@pytest.mark.network
@pytest.mark.slow
@pytest.mark.parametrize("policy", ["qos", "fifo"])
def test_policies_decide_and_the_cluster_never_overflows(policy):
    """Real policies on unequal nodes, with pods reporting progress: every round stays within
    each node's GPUs, and once a decision holds, each job holds what it was given."""
    with FakeApiServer() as api:
        api.add_node("g1", gpus=8, cpu="64", memory="256Gi")
        api.add_node("g2", gpus=4, cpu="32", memory="128Gi")
        api.add_node("g3", gpus=2, cpu="16", memory="64Gi")
        jobs = {
            "a": ("20000", "3h"),
            "b": ("40000", "2h"),
            "c": ("5000", None),
            "d": ("8000", "1h"),
        }
        for name, (iterations, deadline) in jobs.items():
            notes = {**RESNET, J.ITERATIONS: iterations, J.REQUESTED_WORKERS: "2"}
            if deadline:
                notes[J.DEADLINE] = deadline
            api.create("statefulsets", job_set(name, annotations=notes))
        sched = scheduler(api.url, policy=policy)
        done = dict.fromkeys(jobs, 0)
        decisions = []
        for round_ in range(12):
            report = sched.step()
            decisions.append(report.decision)
            assert not [e for e in report.errors if "already bound" in e]
            for node, gpus in (("g1", 8), ("g2", 4), ("g3", 2)):
                assert gpus_on(api, node) <= gpus
            for pod in api.list("pods"):
                if pod["spec"].get("nodeName") and pod["metadata"]["name"].endswith("-0"):
                    name = pod["metadata"]["name"][:-2]
                    done[name] += 50
                    api.patch(
                        "pods",
                        pod["metadata"]["namespace"] + "/" + pod["metadata"]["name"],
                        {
                            "metadata": {
                                "annotations": {
                                    J.PROGRESS: json.dumps(
                                        {"iteration": done[name], "active_s": 10.0 * round_}
                                    )
                                }
                            }
                        },
                    )
        assert decisions[-1], "jobs run"
        assert decisions[-1] == decisions[-2], "the decision settles"
        for key, workers in decisions[-1].items():
            name = key.split("/")[1]
            bound = [
                p
                for p in api.list("pods")
                if p["metadata"]["name"].startswith(name + "-") and p["spec"].get("nodeName")
            ]
            assert len(bound) == workers, key
        # the policy plans on 1 node of 8 GPUs: the largest node, as 8 + 4 + 2 = 14 < 2 x 8
        assert sum(decisions[-1].values()) <= 8


IMPOSSIBLE = {**RESNET, J.ITERATIONS: "10000000", J.DEADLINE: "1m"}  # no count of GPUs does it
FEASIBLE = {**RESNET, J.ITERATIONS: "10000", J.DEADLINE: "2h"}


def not_trusted(api, name: str) -> list[str]:
    return [
        e["message"]
        for e in api.list("events")
        if e["reason"] == "AdmissionNotTrusted" and e["involvedObject"]["name"] == name
    ]


def sealed(api, name: str) -> dict[str, str]:
    notes = api.get("statefulsets", f"ml/{name}")["metadata"]["annotations"]
    return {k: notes[k] for k in (J.ADMISSION, J.ADMISSION_SEAL) if k in notes}


@pytest.mark.parametrize("forgery", ["written", "copied", "terms-changed"])
def test_an_admission_the_scheduler_did_not_seal_is_decided_again(api, forgery):
    sched = scheduler(api.url, policy="qos")
    if forgery == "written":  # the user grants the impossible job a guarantee
        api.create(
            "statefulsets", job_set("j", annotations={**IMPOSSIBLE, J.ADMISSION: "guaranteed"})
        )
    elif forgery == "copied":  # the seal of another job's guarantee, copied onto this one
        api.create("statefulsets", job_set("ok", annotations=FEASIBLE))
        sched.step()
        assert sealed(api, "ok")[J.ADMISSION] == "guaranteed"
        api.create("statefulsets", job_set("j", annotations={**IMPOSSIBLE, **sealed(api, "ok")}))
    else:  # guaranteed for a feasible job, whose terms are then made impossible
        api.create("statefulsets", job_set("j", annotations=FEASIBLE))
        sched.step()
        sched.step()
        assert admission(api, "j") == "guaranteed"
        assert api.get("pods", "ml/j-0")["spec"].get("nodeName")
        api.patch("statefulsets", "ml/j", {"metadata": {"annotations": IMPOSSIBLE}})
    for _ in range(3):
        sched.step()
    assert admission(api, "j") == "declined"  # the policy's own answer for the impossible job
    assert api.get("statefulsets", "ml/j")["spec"]["replicas"] == 0
    assert not [
        p for p in api.list("pods") if p["metadata"]["name"] == "j-0" and p["spec"].get("nodeName")
    ]
    (message,) = not_trusted(api, "j")
    assert "guaranteed" in message and "ignored" in message


def test_a_sealed_admission_is_trusted_by_the_next_leader(api):
    api.create("statefulsets", job_set("j", annotations=FEASIBLE))
    first = scheduler(api.url, policy="qos")
    first.step()
    first.step()
    before = sealed(api, "j")
    assert before[J.ADMISSION] == "guaranteed" and len(before[J.ADMISSION_SEAL]) == 64
    # A new replica reads the key its predecessor made and trusts its predecessor's seal.
    later = scheduler(api.url, policy="qos")
    for _ in range(2):
        later.step()
    assert later.applier.seal == first.applier.seal
    assert sealed(api, "j") == before
    assert not_trusted(api, "j") == []
    assert [m for m, p in api.requests if "secrets" in p and m == "POST"] == ["POST"]
