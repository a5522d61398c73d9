"""Node accounting and gang placement on real, unequal Kubernetes nodes (pure functions).

A node's room is its ``allocatable`` minus the requests of the pods bound to it that have not
ended. Nodes that are cordoned or not Ready have no room. Placement puts all pods of a gang or
none: each pod goes on a node already hosting the job when one has room, else on the node with
the most room in the scheduler's resource (few nodes per job), all checked on a scratch copy
before anything is bound.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from qosched.backends.kubernetes.kube import key_of, quantity

Room = dict[str, float]
#: The resources placement checks; ``pods`` is the node's pod-count limit.
CHECKED = ("cpu", "memory", "nvidia.com/gpu", "pods")


def pod_requests(pod: Mapping[str, Any]) -> Room:
    """What a pod reserves on its node, as the scheduler framework counts it: the sum over its
    containers (limits where a container states no request) and one pod slot."""
    total: Room = {"pods": 1.0}
    for container in pod.get("spec", {}).get("containers", []):
        resources = container.get("resources") or {}
        requests = dict(resources.get("limits") or {})
        requests.update(resources.get("requests") or {})
        for name, value in requests.items():
            total[name] = total.get(name, 0.0) + quantity(value)
    return total


def is_ended(pod: Mapping[str, Any]) -> bool:
    return pod.get("status", {}).get("phase") in ("Succeeded", "Failed")


def is_schedulable(node: Mapping[str, Any]) -> bool:
    if node.get("spec", {}).get("unschedulable"):
        return False
    conditions = node.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def node_rooms(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    *,
    count: Any = None,
) -> dict[str, Room]:
    """Free resources per schedulable node; ``count(pod)`` says which bound pods to subtract
    (default: all that have not ended)."""
    rooms: dict[str, Room] = {}
    for node in nodes:
        if is_schedulable(node):
            allocatable = node.get("status", {}).get("allocatable") or {}
            rooms[node["metadata"]["name"]] = {k: quantity(v) for k, v in allocatable.items()}
    for pod in pods:
        node_name = pod.get("spec", {}).get("nodeName")
        if node_name not in rooms or is_ended(pod) or (count is not None and not count(pod)):
            continue
        room = rooms[node_name]
        for name, value in pod_requests(pod).items():
            room[name] = room.get(name, 0.0) - value
    return rooms


def fits(room: Mapping[str, float], request: Mapping[str, float]) -> bool:
    # A resource the node does not list has none (a GPU request on a CPU node).
    return all(
        request.get(name, 0.0) <= room.get(name, 0.0) + 1e-9
        for name in CHECKED
        if request.get(name, 0.0) > 0
    )


def take(room: Room, request: Mapping[str, float], sign: float = 1.0) -> None:
    for name, value in request.items():
        room[name] = room.get(name, 0.0) - sign * value


def worker_capacity(rooms: Mapping[str, Room], resource: str) -> dict[str, int]:
    """Whole workers of ``resource`` (``cpu`` cores or GPUs) each node can still give."""
    return {
        name: max(0, math.floor(room.get(resource, 0.0) + 1e-9)) for name, room in rooms.items()
    }


def place_gang(
    pods: Sequence[Mapping[str, Any]],
    rooms: Mapping[str, Room],
    resource: str,
    prefer: Iterable[str] = (),
) -> dict[str, str] | None:
    """Nodes for all ``pods`` (pod key -> node name), or None when they do not all fit.
    ``rooms`` is not changed; the caller takes the room once the pods are bound."""
    scratch = {name: dict(room) for name, room in rooms.items()}
    preferred = set(prefer)
    result: dict[str, str] = {}
    for pod in pods:
        request = pod_requests(pod)
        candidates = sorted(
            (name for name, room in scratch.items() if fits(room, request)),
            key=lambda n: (n not in preferred, -scratch[n].get(resource, 0.0), n),
        )
        if not candidates:
            return None
        node = candidates[0]
        take(scratch[node], request)
        preferred.add(node)  # the gang's next pods join it there while it has room
        result[key_of(pod)] = node
    return result
