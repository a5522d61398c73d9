"""The API's objects as one scheduling round sees them (:class:`ApiView`), the round's jobs
(:class:`RoundJob`), and what the scheduler reads off a pod.

The view is taken from the informers' caches at the start of a round (:mod:`.reader`) and
updated with the round's own writes (:mod:`.apply`, :mod:`.binding`), so that a later step of
the same round never decides on what an earlier step changed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from qosched.backends.kubernetes import jobs as J
from qosched.backends.kubernetes.fit import is_ended, pod_requests
from qosched.backends.kubernetes.kube import key_of
from qosched.cluster.state import JobState as ClusterJob


@dataclass(slots=True)
class RoundJob:
    """A job in this round: its description, its pods, and the policy's record of it."""

    spec: J.K8sJob
    pods: list[dict[str, Any]]
    state: ClusterJob | None = None

    @property
    def bound(self) -> list[dict[str, Any]]:
        return [p for p in self.pods if p["spec"].get("nodeName")]

    @property
    def pending(self) -> list[dict[str, Any]]:
        return [p for p in self.pods if not p["spec"].get("nodeName")]


@dataclass(slots=True)
class ApiView:
    """The caches as one round sees them (snapshots taken at its start), with the round's own
    writes; pods are also indexed by the job that owns them."""

    nodes: dict[str, dict[str, Any]]
    pods: dict[str, dict[str, Any]]
    sets: dict[str, dict[str, Any]]
    by_owner: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for key, pod in self.pods.items():
            owner = owner_of(pod)
            if owner is not None:
                self.by_owner.setdefault(owner, {})[key] = pod

    def put_pod(self, pod: dict[str, Any]) -> None:
        key, owner = key_of(pod), owner_of(pod)
        self.pods[key] = pod
        if owner is not None:
            self.by_owner.setdefault(owner, {})[key] = pod

    def forget_pod(self, key: str) -> None:
        pod = self.pods.pop(key, None)
        if pod is not None:
            self.by_owner.get(owner_of(pod) or "", {}).pop(key, None)

    def pods_of(self, spec: J.K8sJob) -> list[dict[str, Any]]:
        """The job's live pods (neither deleted nor ended) as the round sees them, by name."""
        return sorted(
            (
                p
                for p in self.by_owner.get(spec.key, {}).values()
                if not p["metadata"].get("deletionTimestamp") and not is_ended(p)
            ),
            key=lambda p: p["metadata"]["name"],
        )


def owner_of(pod: dict[str, Any]) -> str | None:
    """The job (``namespace/name``) a pod belongs to: its StatefulSet owner, when the pod's name
    is one of that StatefulSet's. A pod can patch its own owner references, not its name: a
    pod claiming another job is nobody's (it still takes room on its node)."""
    meta = pod["metadata"]
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == "StatefulSet":
            name = ref.get("name")
            if isinstance(name, str) and J.is_pod_of(meta.get("name", ""), name):
                return f"{meta.get('namespace', 'default')}/{name}"
            return None
    return None


def restarts(pod: dict[str, Any]) -> int:
    """How often the pod's containers restarted: each restart is a new start of its work."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return sum(
        c["restartCount"]
        for c in statuses
        if isinstance(c, dict) and isinstance(c.get("restartCount"), int)
    )


def resize_infeasible(pod: dict[str, Any]) -> bool:
    """The kubelet reports an in-place re-size it cannot do (condition ``PodResizePending``
    with reason ``Infeasible``, Kubernetes 1.33+)."""
    return any(
        c.get("type") == "PodResizePending" and c.get("reason") == "Infeasible"
        for c in pod.get("status", {}).get("conditions") or []
    )


def containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """A pod's containers, or a StatefulSet's pod template's."""
    spec = obj["spec"]
    return (spec.get("template", {}).get("spec") or spec).get("containers", [])


def training_cores(pod: dict[str, Any]) -> int:
    """The cores a CPU job's pod trains on: its first container's, the one qosched sizes. A
    sidecar's cores (a service mesh's proxy) are the pod's to place, not the job's workers: with
    them counted, the pod would never be the size asked and be restarted at every round."""
    first = {"spec": {"containers": containers(pod)[:1]}}
    return math.ceil(pod_requests(first).get("cpu", 0.0) - 1e-9)
