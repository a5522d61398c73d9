"""Shared pieces of the Kubernetes backend tests: job StatefulSets, a scripted policy, and a
scheduler pointed at the fake API server through the real client."""

from __future__ import annotations

from collections.abc import Mapping

from qosched.backends.kubernetes import jobs as J
from qosched.backends.kubernetes.kube import api_client
from qosched.backends.kubernetes.scheduler import K8sScheduler, SchedulerConfig
from qosched.cluster.policies.base import Policy
from qosched.cluster.state import ClusterView, Decision

#: What the scripted policy gives each job (by namespace/name); tests set it.
SCRIPT: dict[str, int] = {}


class Scripted(Policy):
    """Gives each job the count in ``SCRIPT`` (0 when absent): tests drive the backend's
    mechanism without depending on a real policy's choices. Not registered, so the registry's
    own tests and ``--policy all`` never see it."""

    name = "scripted"

    def allocate(self, view: ClusterView) -> Decision:
        return Decision({j.job_id: SCRIPT[j.job_id] for j in view.jobs if SCRIPT.get(j.job_id)})


class Clock:
    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def job_set(
    name: str,
    *,
    namespace: str = "ml",
    replicas: int = 1,
    gpus: int = 1,
    cpu: str = "1",
    memory: str = "1Gi",
    annotations: Mapping[str, str] | None = None,
    resource: str = "gpu",
) -> dict:
    """A job StatefulSet as ``qosched k8s job`` writes one (Parallel, OnDelete)."""
    requests = {"cpu": cpu, "memory": memory}
    if resource == "gpu":
        requests["nvidia.com/gpu"] = str(gpus)
    notes = {J.ITERATIONS: "1000"}
    notes.update(annotations or {})
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {J.JOB_LABEL: name},
            "annotations": notes,
        },
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "OnDelete"},
            "selector": {"matchLabels": {J.JOB_LABEL: name}},
            "template": {
                "metadata": {"labels": {J.JOB_LABEL: name}},
                "spec": {
                    "schedulerName": "qosched",
                    "containers": [
                        {
                            "name": "train",
                            "image": "trainer:1",
                            "resources": {"requests": requests, "limits": dict(requests)},
                        }
                    ],
                },
            },
        },
    }


def scheduler(url: str, *, clock=None, identity: str = "a", **config) -> K8sScheduler:
    options = {"policy": "scripted", "tick_s": 1.0, "watch_timeout_s": 1}
    options.update(config)
    cfg = SchedulerConfig(identity=identity, **options)
    extra: dict = {"clock": clock} if clock is not None else {}
    if cfg.policy == "scripted":
        extra["make_policy"] = Scripted
    return K8sScheduler(api_client(url), cfg, **extra)


def gpus_on(api, node: str) -> float:
    """GPUs requested by the pods bound to ``node`` (every scheduler's), from the server."""
    total = 0.0
    for pod in api.list("pods"):
        if pod["spec"].get("nodeName") == node:
            for c in pod["spec"]["containers"]:
                total += float(c["resources"]["requests"].get("nvidia.com/gpu", 0))
    return total


def bindings(api) -> list[str]:
    return [path for method, path in api.requests if method == "POST" and path.endswith("/binding")]
