"""One bad job never stops the others: out-of-bounds annotations are skipped and reported on
the job (an Event, a pod condition); writes made from a stale cache never reach a pod
recreated under the same name (the binding's uid, the delete's precondition); no job's pods can
report progress for another."""

from __future__ import annotations

import pytest
from k8s_helpers import SCRIPT, Scripted, job_set, scheduler, trainer_client

from qosched.backends.kubernetes import jobs as J
from qosched.backends.kubernetes.kube import require

RESNET = {J.MODEL: "resnet50", J.BATCH_SIZE: "64"}
NINES = "9" * 400


pytestmark = pytest.mark.apiserver(nodes={"g1": {"gpus": 8, "cpu": "64", "memory": "256Gi"}})


def events_on(api, name: str, reason: str) -> list[dict]:
    return [
        e
        for e in api.list("events")
        if e["involvedObject"]["name"] == name and e["reason"] == reason
    ]


def pod_scheduled(pod: dict) -> dict | None:
    for condition in pod.get("status", {}).get("conditions") or []:
        if condition["type"] == "PodScheduled":
            return condition
    return None


@pytest.mark.parametrize(
    "annotations",
    [
        {J.PROGRESS: '{"iteration": Infinity, "active_s": 1}'},
        {J.PROGRESS: '{"iteration": 1e400, "active_s": 1}'},
        {J.DEADLINE: NINES + "s"},
        {J.ITERATIONS: "1" * 401},
    ],
    ids=["progress-infinity", "progress-1e400", "deadline-400-nines", "iterations-401-digits"],
)
def test_a_job_with_bad_annotations_is_skipped_and_the_others_scheduled(api, annotations):
    api.create("statefulsets", job_set("good", annotations={**RESNET, J.DEADLINE: "10h"}))
    api.create("statefulsets", job_set("bad", annotations={**RESNET, **annotations}))
    sched = scheduler(api.url, policy="qos")
    reports = [sched.step() for _ in range(3)]
    assert all("ml/bad" in r.invalid for r in reports)
    assert [p for p in api.list("pods") if p["metadata"]["name"].startswith("good-")]
    assert all(
        p["spec"].get("nodeName") for p in api.list("pods") if p["metadata"]["name"] == "good-0"
    )
    (event,) = events_on(api, "bad", "InvalidJob")  # posted once, not once per round
    assert event["type"] == "Warning" and event["involvedObject"]["kind"] == "StatefulSet"
    bad_pod = api.get("pods", "ml/bad-0")
    assert not bad_pod["spec"].get("nodeName")
    condition = pod_scheduled(bad_pod)
    assert condition["status"] == "False" and condition["reason"] == "InvalidJob"


def test_a_bad_progress_report_on_a_pod_is_ignored_and_reported(api):
    api.create("statefulsets", job_set("j"))
    SCRIPT["ml/j"] = 1
    sched = scheduler(api.url)
    sched.step()
    api.patch(
        "pods",
        "ml/j-0",
        {"metadata": {"annotations": {J.PROGRESS: '{"iteration": Infinity, "active_s": 1}'}}},
    )
    report = sched.step()
    assert report.decision == {"ml/j": 1} and not report.invalid
    assert api.get("pods", "ml/j-0")["spec"]["nodeName"] == "g1"
    assert len(events_on(api, "j-0", "InvalidProgress")) == 1


def test_a_binding_from_a_stale_cache_never_binds_the_recreated_pod(api):
    api.create("statefulsets", job_set("j"))
    SCRIPT["ml/j"] = 1
    api.fail("POST", r"/binding$", 422)
    sched = scheduler(api.url)
    sched.step()  # the binding failed: the cache holds pending pod j-0
    stale = api.get("pods", "ml/j-0")
    sched.pods.stop()  # the cache misses what follows
    api.delete("pods", "ml/j-0")  # the controller recreates it: same name, another uid
    fresh_uid = api.get("pods", "ml/j-0")["metadata"]["uid"]
    assert fresh_uid != stale["metadata"]["uid"]
    assert sched.pods.get("ml/j-0") == stale
    report = sched.step()
    assert report.bound == {}
    pod = api.get("pods", "ml/j-0")
    assert pod["metadata"]["uid"] == fresh_uid and not pod["spec"].get("nodeName")


def test_a_delete_from_a_stale_cache_never_deletes_the_recreated_pod(api):
    api.add_node("c1", cpu="8")
    api.create("statefulsets", job_set("c", resource="cpu"))
    SCRIPT["ml/c"] = 1
    api.fail("POST", r"/binding$", 422)
    sched = scheduler(api.url, resource="cpu")
    sched.step()  # the binding failed: pending c-0 at 1 core in the cache
    stale = api.get("pods", "ml/c-0")
    sched.pods.stop()  # the cache misses what follows
    api.delete("pods", "ml/c-0")
    fresh_uid = api.get("pods", "ml/c-0")["metadata"]["uid"]
    assert sched.pods.get("ml/c-0") == stale
    SCRIPT["ml/c"] = 2  # a new size: the pending pod (as the cache shows it) is restarted
    report = sched.step()
    assert report.restarted == []
    assert api.get("pods", "ml/c-0")["metadata"]["uid"] == fresh_uid


class AdmitFails(Scripted):
    """A policy with a bug that shows on one job only."""

    def admit(self, job, view):
        if job.job_id == "ml/bad":
            raise ZeroDivisionError("a policy bug")
        return super().admit(job, view)


def test_a_job_whose_handling_fails_is_skipped_and_the_others_scheduled(api):
    api.create("statefulsets", job_set("good"))
    api.create("statefulsets", job_set("bad"))
    SCRIPT.update({"ml/good": 1, "ml/bad": 1})
    sched = scheduler(api.url)
    sched.make_policy = AdmitFails
    report = sched.step()
    assert "ml/bad" in report.invalid and "ZeroDivisionError" in report.invalid["ml/bad"]
    assert report.decision == {"ml/good": 1} and report.bound == {"ml/good-0": "g1"}
    assert len(events_on(api, "bad", "InvalidJob")) == 1
    assert pod_scheduled(api.get("pods", "ml/bad-0"))["reason"] == "InvalidJob"


DONE = {"metadata": {"annotations": {J.PROGRESS: '{"iteration": 1000, "active_s": 80}'}}}


def test_a_pod_that_claims_another_job_is_not_that_jobs_pod(api):
    # A job's trainer may patch its first pod, owner references included: pointing them at
    # another job must not make its report (all of the other job's work) count for that job.
    api.create("statefulsets", job_set("j"))
    api.create("statefulsets", job_set("k"))
    SCRIPT.update({"ml/j": 1, "ml/k": 1})
    sched = scheduler(api.url)
    sched.step()
    owner = api.get("pods", "ml/k-0")["metadata"]["ownerReferences"]
    forged = [{**ref, "name": "j"} for ref in owner]
    trainer = require().client.CoreV1Api(trainer_client(api.url, "ml", "k"))
    trainer.patch_namespaced_pod(
        "k-0", "ml", {"metadata": {"ownerReferences": forged, **DONE["metadata"]}}
    )
    assert api.get("pods", "ml/k-0")["metadata"]["ownerReferences"][0]["name"] == "j"
    report = sched.step()
    assert report.succeeded == []
    assert J.STATE not in api.get("statefulsets", "ml/j")["metadata"]["annotations"]
    assert api.get("pods", "ml/j-0")["spec"]["nodeName"] == "g1"  # j runs on


def test_only_the_jobs_first_pod_reports_its_progress(api):
    api.create("statefulsets", job_set("j", replicas=2))
    SCRIPT["ml/j"] = 2
    sched = scheduler(api.url)
    sched.step()
    api.patch("pods", "ml/j-1", DONE)  # no trainer may write there (its Role names j-0)
    assert sched.step().succeeded == []
    api.patch("pods", "ml/j-0", DONE)
    assert sched.step().succeeded == ["ml/j"]
