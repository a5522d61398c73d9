"""The scheduler against the in-process API server, through the real client: gang binding,
node accounting, elastic replicas, in-place resize and its fallback, restarts."""

from __future__ import annotations

import pytest
from k8s_helpers import SCRIPT, bindings, gpus_on, job_set, made_ago, scheduler

from qosched.backends.kubernetes import jobs as J
from qosched.backends.kubernetes.fit import node_rooms


def run(sched, rounds: int = 4):
    return [sched.step() for _ in range(rounds)]


def foreign_pod(name: str, node: str, gpus: int) -> dict:
    """A pod of another scheduler, already running: its GPUs are not qosched's to give."""
    return {
        "metadata": {"name": name, "namespace": "other"},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": "Running"},
    }


def test_gang_is_bound_within_what_nodes_have_left(api):
    api.add_node("n1", gpus=4)
    api.add_node("n2", gpus=2)
    api.create("pods", foreign_pod("busy", "n1", 3))  # n1 has 1 GPU left, n2 has 2
    api.create("statefulsets", job_set("a"))
    SCRIPT["ml/a"] = 3
    run(scheduler(api.url))
    pods = [p for p in api.list("pods") if p["metadata"]["namespace"] == "ml"]
    assert len(pods) == 3 and all(p["spec"].get("nodeName") for p in pods)
    assert gpus_on(api, "n1") == 4 and gpus_on(api, "n2") == 2  # full, never over
    assert len(bindings(api)) == 3  # each pod bound once, later rounds bind nothing


def test_a_gang_that_does_not_fit_binds_no_pod(api):
    # Room for 4 GPUs in all, but each node's memory holds one 6Gi pod: 2 of the 4 would fit.
    api.add_node("n1", gpus=4, memory="8Gi")
    api.add_node("n2", gpus=4, memory="8Gi")
    api.create("statefulsets", job_set("big", memory="6Gi"))
    SCRIPT["ml/big"] = 4
    run(scheduler(api.url))
    pods = [p for p in api.list("pods") if p["metadata"]["namespace"] == "ml"]
    assert len(pods) == 4
    assert not any(p["spec"].get("nodeName") for p in pods)
    assert bindings(api) == []


def test_the_policy_sees_the_workers_nodes_can_give(api):
    api.add_node("n1", gpus=8)
    api.add_node("n2", gpus=4)
    api.create("pods", foreign_pod("busy", "n1", 2))
    api.create("statefulsets", job_set("a"))
    sched = scheduler(api.url)
    sched.step()
    cluster = sched.reader.cluster(
        sched.applier.view,
        node_rooms(sched.nodes.snapshot().values(), sched.pods.snapshot().values()),
        {},
    )
    # 6 + 4 free GPUs: the largest node gives 6, so the policy plans on 1 node of 6 (10 // 6),
    # never on more workers than exist.
    assert (cluster.workers_per_node, cluster.num_nodes) == (6, 1)


def test_elastic_replicas_grow_shrink_and_preempt_with_progress_kept(api):
    api.add_node("n1", gpus=4)
    api.create("statefulsets", made_ago(job_set("a", replicas=1), 3600))
    sched = scheduler(api.url)
    SCRIPT["ml/a"] = 2
    run(sched, 3)
    assert api.get("statefulsets", "ml/a")["spec"]["replicas"] == 2
    assert gpus_on(api, "n1") == 2
    SCRIPT["ml/a"] = 4
    run(sched, 3)
    assert gpus_on(api, "n1") == 4
    api.patch(
        "pods",
        "ml/a-0",
        {"metadata": {"annotations": {J.PROGRESS: '{"iteration": 300, "active_s": 60.0}'}}},
    )
    SCRIPT["ml/a"] = 0  # pre-empted: scaled to zero, its progress kept on the StatefulSet
    run(sched, 2)
    sts = api.get("statefulsets", "ml/a")
    assert sts["spec"]["replicas"] == 0
    assert J.parse_progress(sts["metadata"]["annotations"][J.PROGRESS], source="t") == J.Progress(
        300, 60.0
    )
    assert gpus_on(api, "n1") == 0


def test_a_restarted_scheduler_rebuilds_from_the_api_and_changes_nothing(api):
    api.add_node("n1", gpus=4)
    api.add_node("n2", gpus=4)
    api.create("statefulsets", job_set("a"))
    api.create("statefulsets", job_set("b"))
    SCRIPT.update({"ml/a": 4, "ml/b": 2})
    first = scheduler(api.url, identity="same")
    run(first)
    placed = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in api.list("pods")}
    writes = [r for r in api.requests if r[0] in ("POST", "PATCH", "DELETE")]
    second = scheduler(api.url, identity="same")  # a new process: nothing in memory
    reports = run(second)
    assert {p["metadata"]["name"]: p["spec"]["nodeName"] for p in api.list("pods")} == placed
    assert [r for r in api.requests if r[0] in ("POST", "PATCH", "DELETE")] == writes
    assert reports[-1].decision == {"ml/a": 4, "ml/b": 2}
    assert second._states["ml/a"].workers == 4  # held workers read back from bound pods


def test_a_cache_that_missed_a_binding_never_double_binds(api):
    api.add_node("n1", gpus=4)
    api.add_node("n2", gpus=4)
    api.create("statefulsets", job_set("a"))
    SCRIPT["ml/a"] = 1
    sched = scheduler(api.url)
    run(sched, 2)
    bound = api.get("pods", "ml/a-0")
    stale = {**bound, "spec": {**bound["spec"], "nodeName": None}}
    sched.pods.stop()  # the cache stops updating, with the pod shown unbound
    sched.pods.put(stale)
    report = sched.step()
    assert api.get("pods", "ml/a-0")["spec"]["nodeName"] == bound["spec"]["nodeName"]
    assert any("already bound" in e for e in report.errors)  # the API's 409, answered
    assert report.bound == {}


def test_a_failed_binding_releases_the_rest_of_the_gang_then_retries(api):
    api.add_node("n1", gpus=4)
    api.create("statefulsets", job_set("a"))
    SCRIPT["ml/a"] = 2
    sched = scheduler(api.url)
    sched.step()  # scales to 2
    api.fail("POST", r"/pods/a-1/binding$", 500, times=3)
    report = sched.step()  # sees both pods, binds a-0, fails a-1 three times
    assert report.released == ["ml/a-0"] and report.bound == {"ml/a-0": "n1"}
    assert gpus_on(api, "n1") == 0  # nothing half-bound is left holding GPUs
    run(sched, 3)
    assert gpus_on(api, "n1") == 2


def test_cpu_job_is_resized_in_place(api):
    api.add_node("c1", cpu="8")
    api.create("statefulsets", job_set("c", resource="cpu"))
    SCRIPT["ml/c"] = 2
    sched = scheduler(api.url, resource="cpu")
    run(sched, 3)
    pod = api.get("pods", "ml/c-0")
    assert pod["spec"]["nodeName"] == "c1"
    assert pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "2"
    uid = pod["metadata"]["uid"]
    SCRIPT["ml/c"] = 6
    reports = run(sched, 2)
    pod = api.get("pods", "ml/c-0")
    assert pod["metadata"]["uid"] == uid  # the same pod: no restart
    assert pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "6"
    assert reports[0].resized == {"ml/c-0": 6}
    assert ("PATCH", "/api/v1/namespaces/ml/pods/c-0/resize") in api.requests


def test_a_cpu_job_with_a_sidecar_is_sized_by_its_training_container(api):
    """An injected proxy's core is the pod's, not the job's: counted as the job's, the pod was
    never the size asked and was deleted and made again at every round."""
    api.add_node("c1", cpu="8")
    sts = job_set("c", resource="cpu")
    sidecar = {"name": "proxy", "image": "x", "resources": {"requests": {"cpu": "1"}}}
    sts["spec"]["template"]["spec"]["containers"].append(sidecar)
    api.create("statefulsets", sts)
    SCRIPT["ml/c"] = 3
    reports = run(scheduler(api.url, resource="cpu"), 5)
    pod = api.get("pods", "ml/c-0")
    assert pod["spec"]["nodeName"] == "c1"
    assert pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "3"
    assert [r.restarted for r in reports[1:]] == [[], [], [], []]  # sized once, then left


def test_cpu_job_restarts_at_its_new_size_without_the_resize_subresource(api):
    api.resize_supported = False  # a cluster before Kubernetes 1.33
    api.add_node("c1", cpu="8")
    api.create("statefulsets", job_set("c", resource="cpu"))
    SCRIPT["ml/c"] = 2
    sched = scheduler(api.url, resource="cpu")
    run(sched, 3)
    uid = api.get("pods", "ml/c-0")["metadata"]["uid"]
    SCRIPT["ml/c"] = 6
    reports = run(sched, 3)
    pod = api.get("pods", "ml/c-0")
    assert sched.applier.resize_supported is False
    assert pod["metadata"]["uid"] != uid  # checkpoint-restart: a new pod at the new size
    assert pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "6"
    assert pod["spec"]["nodeName"] == "c1"
    assert "ml/c-0" in reports[0].restarted


def test_a_cpu_job_never_gets_more_cores_than_one_node_has(api):
    api.add_node("c1", cpu="4")
    api.add_node("c2", cpu="6")
    api.create("statefulsets", job_set("c", resource="cpu"))
    sched = scheduler(api.url, resource="cpu")
    sched.step()
    assert sched._states["ml/c"].curve.max_workers == 6  # one pod: one node's cores at most


def test_only_labelled_statefulsets_of_this_scheduler_are_jobs(api):
    api.add_node("n1", gpus=4)
    unlabelled = job_set("plain")
    del unlabelled["metadata"]["labels"]
    other = job_set("other")
    other["spec"]["template"]["spec"]["schedulerName"] = "default-scheduler"
    for sts in (unlabelled, other, job_set("mine")):
        api.create("statefulsets", sts)
    SCRIPT.update({"ml/plain": 1, "ml/other": 1, "ml/mine": 1})
    reports = run(scheduler(api.url), 2)
    assert reports[-1].decision == {"ml/mine": 1}
    assert {p["metadata"]["name"] for p in api.list("pods") if p["spec"].get("nodeName")} == {
        "mine-0"
    }


def test_a_job_with_a_bad_annotation_is_reported_and_skipped(api):
    api.add_node("n1", gpus=4)
    api.create("statefulsets", job_set("bad", annotations={J.DEADLINE: "tomorrow"}))
    api.create("statefulsets", job_set("good"))
    SCRIPT.update({"ml/bad": 1, "ml/good": 1})
    report = scheduler(api.url).step()
    assert report.decision == {"ml/good": 1}
    assert any("statefulset/ml/bad" in e and J.DEADLINE in e for e in report.errors)


def test_a_resize_the_kubelet_finds_infeasible_becomes_a_restart(api):
    api.add_node("c1", cpu="8")
    api.create("statefulsets", job_set("c", resource="cpu"))
    SCRIPT["ml/c"] = 4
    sched = scheduler(api.url, resource="cpu")
    run(sched, 3)
    SCRIPT["ml/c"] = 6
    sched.step()  # asks for 6 cores in place
    uid = api.get("pods", "ml/c-0")["metadata"]["uid"]
    api.patch(
        "pods",
        "ml/c-0",
        {
            "status": {
                "conditions": [
                    {
                        "type": "PodResizePending",
                        "status": "True",
                        "reason": "Infeasible",
                        "message": "Node didn't have enough capacity",
                    }
                ]
            }
        },
    )
    reports = run(sched, 3)
    assert "ml/c-0" in [p for r in reports for p in r.restarted]
    pod = api.get("pods", "ml/c-0")
    assert pod["metadata"]["uid"] != uid
    assert pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "6"
    assert pod["spec"]["nodeName"] == "c1"


def odd_node(name: str, status) -> dict:
    return {"metadata": {"name": name}, "spec": {}, "status": status}


def ready_with(allocatable) -> dict:
    return {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": "True"}]}


@pytest.mark.parametrize(
    "status",
    [
        ready_with({"cpu": "8", "nvidia.com/gpu": "1e400"}),
        ready_with({"cpu": "8", "nvidia.com/gpu": "1e300"}),
        ready_with({"cpu": "8", "nvidia.com/gpu": "abc"}),
        ready_with({"cpu": "8", "nvidia.com/gpu": "nan"}),
        ready_with({"cpu": "8", "nvidia.com/gpu": "-4"}),
        ready_with({"cpu": "8", "nvidia.com/gpu": "9" * 100}),
        ready_with(["nvidia.com/gpu"]),
        None,
        ["Ready"],
    ],
    ids=[
        "gpus-1e400",
        "gpus-past-2**53",
        "gpus-abc",
        "gpus-nan",
        "gpus-negative",
        "gpus-100-digits",
        "allocatable-list",
        "status-null",
        "status-list",
    ],
)
def test_a_node_whose_room_cannot_be_read_is_left_out_and_the_rest_go_on(api, status, caplog):
    api.add_node("n1", gpus=4)
    api.create("nodes", odd_node("odd", status))
    api.create("statefulsets", job_set("a"))
    SCRIPT["ml/a"] = 2
    sched = scheduler(api.url)
    reports = run(sched, 3)
    assert all(not r.failed and set(r.left_out) == {"odd"} for r in reports)
    assert "node/odd" in reports[0].left_out["odd"]
    assert gpus_on(api, "n1") == 2  # the job runs on the readable node
    assert sched.metrics.registry.get_sample_value("qosched_nodes_left_out") == 1
    logged = [r for r in caplog.records if "left out of the cluster" in r.getMessage()]
    assert len(logged) == 1  # once per node, not once per round


@pytest.mark.parametrize(
    ("resource", "allocatable"),
    [("gpu", {"cpu": "64", "nvidia.com/gpu": "70000"}), ("cpu", {"cpu": "100000"})],
    ids=["gpus-70000", "cores-100000"],
)
def test_a_node_larger_than_the_policies_plan_on_is_capped(api, resource, allocatable):
    api.create(
        "nodes", odd_node("huge", ready_with({**allocatable, "memory": "4Ti", "pods": "110"}))
    )
    api.create("statefulsets", job_set("a", resource=resource))
    SCRIPT["ml/a"] = 2
    sched = scheduler(api.url, resource=resource)
    reports = run(sched, 3)
    assert not any(r.failed or r.left_out for r in reports)
    cluster = sched.reader.cluster(
        sched.applier.view,
        node_rooms(sched.nodes.snapshot().values(), sched.pods.snapshot().values()),
        {},
    )
    assert (cluster.num_nodes, cluster.workers_per_node) == (1, 65_536)
    assert api.get("pods", "ml/a-0")["spec"]["nodeName"] == "huge"


def test_a_round_that_raises_is_counted_beats_the_heartbeat_and_the_next_goes_on(api):
    api.add_node("n1", gpus=4)
    api.create("statefulsets", job_set("a"))
    SCRIPT["ml/a"] = 1
    sched = scheduler(api.url)
    read_jobs = sched._read_jobs

    def broken(*_args):
        raise RuntimeError("a bug")

    sched._read_jobs = broken
    before = sched.heartbeat.last
    report = sched.step()  # does not raise
    assert report.failed and any("RuntimeError: a bug" in e for e in report.errors)
    assert sched.heartbeat.last > before and sched.heartbeat.failures == 1
    assert sched.metrics.registry.get_sample_value("qosched_round_errors_total") == 1
    sched._read_jobs = read_jobs
    reports = run(sched, 2)
    assert not reports[-1].failed and sched.heartbeat.failures == 0
    assert gpus_on(api, "n1") == 1


QOSCHED = {"schedulerName": "qosched"}


@pytest.mark.parametrize(
    "broken",
    [
        {"metadata": {"namespace": "ml"}, "spec": {"template": {"spec": QOSCHED}}},
        {"metadata": {"name": "x", "namespace": "ml"}, "spec": None},
        {"metadata": {"name": "x", "namespace": "ml"}},
    ],
    ids=["no-name", "spec-null", "no-spec"],
)
def test_a_statefulset_the_cache_cannot_describe_skips_only_itself(api, broken):
    api.add_node("n1", gpus=4)
    api.create("statefulsets", job_set("good"))
    SCRIPT["ml/good"] = 1
    sched = scheduler(api.url)
    sched.step()  # the term's first round lists every cache afresh
    sched.sets.stop()  # frozen, so the odd object below stays in the cache
    with sched.sets._lock:
        sched.sets._objects["ml/x"] = broken
    report = sched.step()
    assert not report.failed and report.decision == {"ml/good": 1}
    assert "ml/x" in report.invalid and "statefulset/ml/x" in report.invalid["ml/x"]


def test_a_pod_naming_qosched_outside_its_jobs_is_told_why_it_waits(api):
    api.add_node("n1", gpus=4)
    api.create(
        "pods",
        {
            "metadata": {"name": "bare", "namespace": "ml"},
            "spec": {
                "schedulerName": "qosched",
                "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}],
            },
            "status": {"phase": "Pending"},
        },
    )
    api.create("pods", foreign_pod("theirs", "n1", 1))  # another scheduler's: left alone
    run(scheduler(api.url), rounds=3)
    bare = api.get("pods", "ml/bare")
    (condition,) = [c for c in bare["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert (condition["status"], condition["reason"]) == ("False", "NotAJob")
    assert "qosched.io/job" in condition["message"]
    assert not bare["spec"].get("nodeName")
    assert "conditions" not in api.get("pods", "other/theirs")["status"]


def test_a_new_job_is_admitted_and_scaled_in_one_patch(api):
    api.add_node("n1", gpus=8)
    api.create("statefulsets", job_set("a"))
    SCRIPT["ml/a"] = 3
    report = scheduler(api.url).step()
    patches = [w for w in api.writes if w.method == "PATCH" and "/statefulsets/a" in w.path]
    assert len(patches) == 1  # one write where two were made: a burst's first round is shorter
    sts = api.get("statefulsets", "ml/a")
    assert sts["metadata"]["annotations"][J.ADMISSION] == "best-effort"
    assert J.ADMISSION_SEAL in sts["metadata"]["annotations"]
    assert sts["spec"]["replicas"] == 3
    assert report.admitted == {"ml/a": "best-effort"} and report.scaled == {"ml/a": 3}


def test_a_job_whose_admission_was_not_written_is_not_bound(api):
    api.add_node("n1", gpus=8)
    api.create("statefulsets", job_set("a"))
    SCRIPT["ml/a"] = 1  # its one pod exists: it could be bound at once
    sched = scheduler(api.url)
    api.fail("PATCH", r"/statefulsets/a$", 500)
    report = sched.step()
    assert report.admitted == {} and report.bound == {} and bindings(api) == []
    report = sched.step()  # written the next round, and bound
    assert report.admitted == {"ml/a": "best-effort"} and report.bound == {"ml/a-0": "n1"}
