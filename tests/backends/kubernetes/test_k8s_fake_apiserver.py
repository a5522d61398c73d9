"""The fake API server refuses what a real one refuses, so the backend's tests can fail the way
a cluster would: RBAC from the manifests, optimistic concurrency, the resize subresource's
validation, UID and resourceVersion preconditions, watches that stay open."""

from __future__ import annotations

import time

import pytest
from k8s_helpers import client, job_set, trainer_client

from qosched.backends.kubernetes.kube import api_client, require, status_of

GUARANTEED = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}


pytestmark = pytest.mark.apiserver(
    nodes={"n1": {"cpu": "8", "gpus": 2}},
    objects=[
        ("statefulsets", job_set("j")),
        ("leases", {"metadata": {"name": "l", "namespace": "qosched"}, "spec": {}}),
    ],
)


def core(api, kind: str = "scheduler"):
    clients = {
        "scheduler": lambda: client(api.url),
        "trainer": lambda: trainer_client(api.url, "ml", "j"),
        "anonymous": lambda: api_client(api.url),
    }
    return require().client.CoreV1Api(clients[kind]())


def coordination(api):
    return require().client.CoordinationV1Api(client(api.url))


def status(call) -> int:
    try:
        call()
    except Exception as exc:
        return status_of(exc)
    return 200


def resize(api, containers: list[dict]):
    return lambda: core(api).patch_namespaced_pod_resize(
        "j-0",
        "ml",
        {"spec": {"containers": containers}},
        _content_type="application/strategic-merge-patch+json",
    )


def container(resources: dict) -> list[dict]:
    return [{"name": "train", "resources": resources}]


def cpu_job_pod(api) -> None:
    """Make j-0 a Guaranteed CPU pod (1 core, 1Gi), as CPU jobs are."""
    api.delete("statefulsets", "ml/j")
    for pod in api.list("pods"):
        api.delete("pods", f"ml/{pod['metadata']['name']}")
    api.create("statefulsets", job_set("j", resource="cpu", cpu="1", memory="1Gi"))


REFUSED = [
    ("anonymous", lambda api: core(api, "anonymous").list_pod_for_all_namespaces(), 401),
    ("scheduler-lists-leases", lambda api: coordination(api).list_namespaced_lease("qosched"), 403),
    ("scheduler-deletes-nodes", lambda api: core(api).delete_node("n1"), 403),
    (
        "scheduler-patches-pods",
        lambda api: core(api).patch_namespaced_pod("j-0", "ml", {"metadata": {"labels": {}}}),
        403,
    ),
    (
        "scheduler-lease-elsewhere",
        lambda api: coordination(api).read_namespaced_lease("l", "default"),
        403,
    ),
    (
        "trainer-deletes-pods",
        lambda api: core(api, "trainer").delete_namespaced_pod("j-0", "ml"),
        403,
    ),
    (
        "trainer-patches-pods-elsewhere",
        lambda api: core(api, "trainer").patch_namespaced_pod("x", "other", {}),
        403,
    ),
    # A job's pods write its progress on its first pod, and on no other job's pods.
    (
        "trainer-patches-another-jobs-pod",
        lambda api: core(api, "trainer").patch_namespaced_pod("k-0", "ml", {}),
        403,
    ),
    (
        "trainer-patches-its-second-pod",
        lambda api: core(api, "trainer").patch_namespaced_pod("j-1", "ml", {}),
        403,
    ),
    ("trainer-lists-pods", lambda api: core(api, "trainer").list_namespaced_pod("ml"), 403),
]


@pytest.mark.slow
@pytest.mark.parametrize(("call", "code"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_rbac_is_enforced_from_the_manifests(api, call, code):
    assert status(lambda: call(api)) == code


def test_a_jobs_trainer_may_patch_its_reporting_pod(api):
    body = {"metadata": {"annotations": {"qosched.io/progress": '{"iteration": 1, "active_s": 1}'}}}
    assert status(lambda: core(api, "trainer").patch_namespaced_pod("j-0", "ml", body)) == 200


def test_a_pod_spec_cannot_change_through_the_pod(api):
    resources = {"requests": {"cpu": "2"}, "limits": {"cpu": "2"}}
    patch = {"spec": {"containers": [{"name": "train", "resources": resources}]}}
    call = lambda: core(api, "trainer").patch_namespaced_pod("j-0", "ml", patch)  # noqa: E731
    assert status(call) == 422


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"metadata": {"name": "l", "namespace": "qosched"}, "spec": {}}, 422),
        ({"metadata": {"name": "l", "namespace": "qosched", "resourceVersion": "1"}}, 409),
    ],
    ids=["without-version", "stale-version"],
)
def test_updates_need_the_current_resource_version(api, body, code):
    call = lambda: coordination(api).replace_namespaced_lease("l", "qosched", body)  # noqa: E731
    assert status(call) == code


@pytest.mark.parametrize(
    ("containers", "code"),
    [
        (container({"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"cpu": "2"}}), 200),
        (container({"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}}), 422),
        (container({"requests": {"cpu": "2"}, "limits": {"cpu": "3"}}), 422),
        (container({"requests": {"memory": "512Mi"}, "limits": {"memory": "512Mi"}}), 422),
        ([{"name": "other", "resources": GUARANTEED}], 422),
        ([{"name": "train", "image": "x"}], 422),
    ],
    ids=["cpu-up", "gpu", "qos-class-change", "memory-limit-down", "unknown-container", "image"],
)
def test_resize_validates_as_the_api_does(api, containers, code):
    cpu_job_pod(api)
    assert status(resize(api, containers)) == code


def test_resize_is_absent_before_1_33(api):
    cpu_job_pod(api)
    api.resize_supported = False
    assert status(resize(api, container({"requests": {"cpu": "2"}}))) == 404


def binding(uid: str) -> dict:
    return {
        "metadata": {"name": "j-0", "namespace": "ml", "uid": uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"},
    }


def test_a_binding_for_another_uid_or_a_bound_pod_is_refused(api):
    uid = api.get("pods", "ml/j-0")["metadata"]["uid"]
    api_ = core(api)

    def bind(name, namespace, body):
        api_.create_namespaced_pod_binding(name, namespace, body, _preload_content=False)

    assert status(lambda: bind("j-0", "ml", binding("uid-0"))) == 409
    assert status(lambda: bind("j-0", "ml", binding(uid))) == 200
    assert status(lambda: bind("j-0", "ml", binding(uid))) == 409
    assert api.get("pods", "ml/j-0")["spec"]["nodeName"] == "n1"


def test_a_delete_for_another_uid_is_refused(api):
    options = {"preconditions": {"uid": "uid-0"}}
    call = lambda: core(api).delete_namespaced_pod("j-0", "ml", body=options)  # noqa: E731
    assert status(call) == 409
    assert api.get("pods", "ml/j-0") is not None


def test_a_delete_or_binding_of_a_stale_version_is_refused(api):
    seen = api.get("pods", "ml/j-0")["metadata"]
    api.patch("pods", "ml/j-0", {"metadata": {"annotations": {"x": "1"}}})  # written since
    options = {"preconditions": {"uid": seen["uid"], "resourceVersion": seen["resourceVersion"]}}
    call = lambda: core(api).delete_namespaced_pod("j-0", "ml", body=options)  # noqa: E731
    assert status(call) == 409
    binding = {
        "metadata": {"name": "j-0", "uid": seen["uid"], "resourceVersion": seen["resourceVersion"]},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"},
    }
    call = lambda: core(api).create_namespaced_pod_binding("j-0", "ml", binding)  # noqa: E731
    assert status(call) == 409
    pod = api.get("pods", "ml/j-0")
    assert pod is not None and not pod["spec"].get("nodeName")


def test_a_watch_stays_open_until_its_timeout(api):
    started = time.monotonic()
    response = core(api).list_node(
        watch=True, timeout_seconds=1, resource_version=str(api.rv), _preload_content=False
    )
    assert response.read() == b""  # no event, and no early end
    assert time.monotonic() - started >= 1.0


def test_a_patch_with_a_stale_version_is_refused(api):
    stale = api.get("statefulsets", "ml/j")["metadata"]["resourceVersion"]
    api.patch("statefulsets", "ml/j", {"spec": {"replicas": 2}})
    patch = {"metadata": {"resourceVersion": stale}, "spec": {"replicas": 3}}
    apps = require().client.AppsV1Api(client(api.url))
    call = lambda: apps.patch_namespaced_stateful_set("j", "ml", patch)  # noqa: E731
    assert status(call) == 409
    assert api.get("statefulsets", "ml/j")["spec"]["replicas"] == 2
