"""What the scheduler shows: Events on jobs and pods, PodScheduled=False with a reason on
pods that wait, Prometheus metrics, and the health endpoints the Deployment probes."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from k8s_helpers import SCRIPT, job_set, scheduler

from qosched.backends.kubernetes import jobs as J
from qosched.backends.kubernetes.observe import OUTCOMES, Heartbeat, Metrics, serve
from qosched.backends.kubernetes.round_report import StepReport

RESNET = {J.MODEL: "resnet50", J.BATCH_SIZE: "64"}


pytestmark = pytest.mark.apiserver(nodes={"g1": {"gpus": 4, "cpu": "32", "memory": "64Gi"}})


def events(api, name: str, reason: str) -> list[dict]:
    return [
        e
        for e in api.list("events")
        if e["involvedObject"]["name"] == name and e["reason"] == reason
    ]


def pod_scheduled(api, key: str) -> dict:
    conditions = api.get("pods", key)["status"].get("conditions") or []
    return next(c for c in conditions if c["type"] == "PodScheduled")


def test_bound_pods_get_a_scheduled_event(api):
    api.create("statefulsets", job_set("j", replicas=2))
    SCRIPT["ml/j"] = 2
    sched = scheduler(api.url)
    sched.step()
    sched.step()
    for pod in ("j-0", "j-1"):
        (event,) = events(api, pod, "Scheduled")
        assert event["type"] == "Normal" and "to g1" in event["message"]


def test_pods_waiting_for_their_gang_say_so(api):
    api.create("statefulsets", job_set("j", replicas=1))
    SCRIPT["ml/j"] = 3
    api.controller_paused = True  # the controller creates no more pods (a quota, say)
    sched = scheduler(api.url)
    sched.step()  # replicas 1 -> 3: the round that asked for them says nothing yet
    assert "conditions" not in api.get("pods", "ml/j-0")["status"]
    sched.step()  # still one pod of three
    condition = pod_scheduled(api, "ml/j-0")
    assert (condition["status"], condition["reason"]) == ("False", "WaitingForGang")
    assert "given 3 pods and 1 exist" in condition["message"]
    api.controller_paused = False
    api.patch("statefulsets", "ml/j", {"metadata": {"labels": {"nudge": "1"}}})  # reconciles
    sched.step()
    assert pod_scheduled(api, "ml/j-0")["status"] == "True"  # bound with the others


def test_a_gang_that_does_not_fit_is_reported(api):
    api.create("statefulsets", job_set("big", memory="40Gi", replicas=2))
    SCRIPT["ml/big"] = 2  # two 40Gi pods on a 64Gi node: never both
    sched = scheduler(api.url)
    sched.step()
    sched.step()
    (event,) = events(api, "big", "FailedScheduling")
    assert event["type"] == "Warning" and "do not all fit" in event["message"]
    for pod in ("ml/big-0", "ml/big-1"):
        assert pod_scheduled(api, pod)["reason"] == "Unschedulable"


def test_a_declined_job_is_told_why(api):
    notes = {**RESNET, J.ITERATIONS: "10000000", J.DEADLINE: "1m"}
    api.create("statefulsets", job_set("late", annotations=notes))
    sched = scheduler(api.url, policy="qos")
    report = sched.step()
    assert report.admitted == {"ml/late": "declined"}
    (event,) = events(api, "late", "Declined")
    assert "cannot guarantee its deadline" in event["message"] and J.BEST_EFFORT in event["message"]


def test_a_job_predicted_to_miss_its_deadline_is_at_risk(api):
    # 1000 iterations at the placeholder 1 it/s per worker on 1 worker: 1000 s, deadline 60 s.
    api.create("statefulsets", job_set("slow", annotations={J.DEADLINE: "1m"}))
    SCRIPT["ml/slow"] = 1
    sched = scheduler(api.url)
    report = sched.step()
    sts = api.get("statefulsets", "ml/slow")
    created = J.read_job(sts, "gpu").created_at
    assert report.slack["ml/slow"] == pytest.approx((created + 60) - (sched.clock() + 1000), abs=30)
    sched.step()
    (event,) = events(api, "slow", "DeadlineAtRisk")  # once, though both rounds saw it
    assert "predicted to finish at" in event["message"] and "1 workers" in event["message"]


def test_an_in_place_resize_is_reported(api):
    api.create("statefulsets", job_set("c", resource="cpu"))
    SCRIPT["ml/c"] = 2
    sched = scheduler(api.url, resource="cpu")
    for _ in range(3):
        sched.step()
    SCRIPT["ml/c"] = 4
    sched.step()
    (event,) = events(api, "c-0", "Resized")
    assert event["message"] == "resized in place from 2 to 4 cores"


def sample(metrics: Metrics, name: str, labels: dict | None = None) -> float | None:
    return metrics.registry.get_sample_value(name, labels or {})


def test_metrics_count_rounds_bindings_decisions_and_slack(api):
    api.create("statefulsets", job_set("j", replicas=2, annotations={J.DEADLINE: "10h"}))
    SCRIPT["ml/j"] = 2
    sched = scheduler(api.url)
    for _ in range(3):
        sched.step()
    m = sched.metrics
    assert sample(m, "qosched_rounds_total", {"role": "led"}) == 3
    assert sample(m, "qosched_bindings_total") == 2
    assert sample(m, "qosched_decisions_total", {"outcome": "best-effort"}) == 1
    assert sample(m, "qosched_leader") == 1
    assert sample(m, "qosched_round_duration_seconds_count") == 3
    slack = sample(m, "qosched_job_predicted_slack_seconds", {"job": "ml/j"})
    assert 0 < slack < 10 * 3600  # 500 s of work at 2 it/s, 10 h deadline
    SCRIPT["ml/j"] = 0
    api.delete("statefulsets", "ml/j")
    sched.step()
    assert sample(m, "qosched_job_predicted_slack_seconds", {"job": "ml/j"}) is None


def test_each_round_outcome_is_counted_from_its_report_field():
    report = StepReport(leading=True, scaled={"ml/a": 2, "ml/b": 1}, restarted=["ml/a-0"])
    report.invalid["ml/c"] = "bad annotation"
    report.stale["ml/d"] = "statefulset ml/d changed since it was read"
    metrics = Metrics()
    metrics.record(report, 0.1)
    counted = {o: sample(metrics, "qosched_decisions_total", {"outcome": o}) for o in OUTCOMES}
    assert counted == {
        "guaranteed": 0,
        "best-effort": 0,
        "declined": 0,
        "scaled": 2,
        "resized": 0,
        "restarted": 1,
        "released": 0,
        "invalid": 1,
        "succeeded": 0,
        "stale": 1,
    }


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


@pytest.mark.network
def test_health_endpoints_follow_the_loop_and_the_caches():
    now, ready = [0.0], [False]
    metrics, beat = Metrics(), Heartbeat(stall_s=60.0, clock=lambda: now[0])
    server = serve(0, metrics, healthy=beat.alive, ready=lambda: ready[0], host="127.0.0.1")
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert get(base + "/healthz")[0] == 200
        assert get(base + "/readyz")[0] == 503
        ready[0] = True
        assert get(base + "/readyz")[0] == 200
        now[0] = 61.0  # no round ended for longer than the stall limit: the loop hangs
        assert get(base + "/healthz")[0] == 503
        code, text = get(base + "/metrics")
        assert code == 200 and b"qosched_rounds_total" in text
    finally:
        server.shutdown()


def test_the_dashboard_queries_only_metrics_the_scheduler_exports():
    import json
    import re
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "deploy" / "grafana-dashboard.json"
    dashboard = json.loads(path.read_text())
    queried = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"qosched_[a-z_]+", target["expr"])
    }
    families = list(Metrics().registry.collect())
    exported = {f.name for f in families} | {s.name for f in families for s in f.samples}
    assert queried and queried <= exported, queried - exported
    assert {"qosched_leader", "qosched_job_predicted_slack_seconds"} <= queried


def test_health_fails_only_once_every_round_has_failed_for_the_stall_limit():
    now = [0.0]
    beat = Heartbeat(stall_s=60.0, clock=lambda: now[0])
    for t in (10.0, 30.0, 50.0):  # rounds that fail now and then: healthy
        now[0] = t
        beat.beat(ok=t != 30.0)
    assert beat.alive() and beat.failures == 0
    for t in (70.0, 90.0, 111.0):  # the loop turns, but every round fails
        now[0] = t
        beat.beat(ok=False)
    assert beat.failures == 3 and beat.last == 111.0
    assert not beat.alive()  # 61 s since the last round that succeeded
    beat.beat()
    assert beat.alive()


def test_a_finish_predicted_past_year_9999_is_shown_so_and_the_job_still_runs(api):
    # 2**53 - 1 iterations at the placeholder 1 it/s: a finish some 285 million years away.
    notes = {J.ITERATIONS: str(2**53 - 1), J.DEADLINE: "1h"}
    api.create("statefulsets", job_set("long", annotations=notes))
    SCRIPT["ml/long"] = 1
    sched = scheduler(api.url)
    reports = [sched.step() for _ in range(2)]
    assert all(r.invalid == {} and r.errors == [] for r in reports)
    assert api.get("pods", "ml/long-0")["spec"]["nodeName"] == "g1"  # not skipped: bound
    (event,) = events(api, "long", "DeadlineAtRisk")
    assert "predicted to finish after 9999-12-31T23:59:59Z with 1 workers" in event["message"]


def test_a_pod_cannot_report_more_compute_time_than_its_job_has_existed(api):
    api.create("statefulsets", job_set("j", annotations={J.DEADLINE: "10h"}))
    SCRIPT["ml/j"] = 1
    sched = scheduler(api.url)
    sched.step()
    report = '{"iteration": 1, "active_s": 200000000.0}'  # six years, on a job made just now
    api.patch("pods", "ml/j-0", {"metadata": {"annotations": {J.PROGRESS: report}}})
    step = sched.step()
    created = J.read_job(api.get("statefulsets", "ml/j"), "gpu").created_at
    assert step.invalid == {} and step.errors == []
    assert 0.0 <= sched._states["ml/j"].active_s <= sched.clock() - created


def test_progress_that_goes_back_is_told_once_per_pod_start(api):
    api.create("statefulsets", job_set("j", annotations={J.ITERATIONS: "100000"}))
    SCRIPT["ml/j"] = 1
    sched = scheduler(api.url)
    sched.step()

    def report(iteration: int, restarts: int = 0) -> None:
        progress = f'{{"iteration": {iteration}, "active_s": 1.0}}'
        statuses = [{"name": "train", "restartCount": restarts}]
        api.patch(
            "pods",
            "ml/j-0",
            {
                "metadata": {"annotations": {J.PROGRESS: progress}},
                "status": {"containerStatuses": statuses},
            },
        )
        sched.step()

    for iteration in (5000, 100, 50, 200):  # back twice in one start: one Event
        report(iteration)
    (event,) = events(api, "j-0", "ProgressWentBack")
    assert event["type"] == "Warning"
    assert "went back from iteration 5000 to 100" in event["message"]
    report(150, restarts=1)  # its container restarted, from behind its last report
    told = events(api, "j-0", "ProgressWentBack")
    assert len(told) == 2 and "from iteration 200 to 150" in told[1]["message"]
