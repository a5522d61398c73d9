"""Node accounting and gang placement on real, unequal Kubernetes nodes (pure functions).

A node's room is its ``allocatable`` minus the requests of the pods bound to it that have not
ended. Nodes that are cordoned or not Ready have no room, nor have nodes whose ``allocatable``
cannot be read or lies out of bounds (:func:`unreadable_nodes` says why). Placement puts all
pods of a gang or none: each pod goes on a node already hosting the job when one has room, else
on the node with the most room in the scheduler's resource (few nodes per job), all checked on a
scratch copy before anything is bound.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from qosched.backends.kubernetes.kube import key_of, quantity
from qosched.cluster.spec import MAX_WORKERS_PER_NODE
from qosched.core.bounds import COUNT_LIMIT, show_value
from qosched.core.errors import InputError

Room = dict[str, float]
#: The resources placement checks; ``pods`` is the node's pod-count limit.
CHECKED = ("cpu", "memory", "nvidia.com/gpu", "pods")
#: Longer quantities are refused before parsing: the API server writes none near this.
MAX_QUANTITY_TEXT = 64


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
    if _mapping(node.get("spec")).get("unschedulable"):
        return False
    conditions = _mapping(node.get("status")).get("conditions")
    return isinstance(conditions, list) and any(
        isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True"
        for c in conditions
    )


def node_allocatable(node: Mapping[str, Any]) -> Room:
    """A node's ``status.allocatable``; ``InputError`` naming the node and the resource when it
    cannot be read or a quantity lies out of bounds (negative, not finite, 2**53 or more). One
    such node must not stop the cluster's scheduling: the caller leaves it out."""
    source = f"node/{_name(node)}"
    status = node.get("status")
    if not isinstance(status, dict):
        raise InputError(
            f"expected a mapping, got {show_value(status)}", source=source, field="status"
        )
    allocatable = status.get("allocatable") or {}
    if not isinstance(allocatable, dict):
        raise InputError(
            f"expected a mapping, got {show_value(allocatable)}",
            source=source,
            field="status.allocatable",
        )
    room: Room = {}
    for name, value in allocatable.items():
        field = f"status.allocatable.{name}"
        text = str(value)
        if len(text) > MAX_QUANTITY_TEXT:
            raise InputError(
                f"expected a quantity of at most {MAX_QUANTITY_TEXT} characters, got {len(text)}",
                source=source,
                field=field,
            )
        try:
            amount = quantity(value)
        except (ArithmeticError, ValueError):
            amount = math.nan
        if not 0.0 <= amount < COUNT_LIMIT:  # NaN fails this too
            raise InputError(
                f"expected a quantity in [0, 2**53), got {text!r}", source=source, field=field
            )
        room[str(name)] = amount
    return room


def unreadable_nodes(nodes: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Why each node whose room cannot be read is left out, by cache key (see
    :func:`node_allocatable`). A cordoned or not Ready node has no room to read; its
    ``allocatable`` is checked once it can be scheduled on."""
    why: dict[str, str] = {}
    for key, node in nodes.items():
        if not isinstance(node.get("metadata"), dict) or not isinstance(
            node["metadata"].get("name"), str
        ):
            why[key] = f"node {key}: no metadata.name"
            continue
        try:
            if not isinstance(node.get("status"), dict) or is_schedulable(node):
                node_allocatable(node)
        except InputError as exc:
            why[key] = str(exc)
    return why


def node_rooms(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    *,
    count: Any = None,
) -> dict[str, Room]:
    """Free resources per schedulable node; ``count(pod)`` says which bound pods to subtract
    (default: all that have not ended). A node whose room cannot be read has none."""
    rooms: dict[str, Room] = {}
    for node in nodes:
        if is_schedulable(node):
            try:
                rooms[node["metadata"]["name"]] = node_allocatable(node)
            except (InputError, KeyError, TypeError):
                continue
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
    """Whole workers of ``resource`` (``cpu`` cores or GPUs) each node can still give, at most
    ``MAX_WORKERS_PER_NODE``: the policies plan on no larger node, and a larger one still gives
    them that many."""
    return {name: _whole_workers(room.get(resource, 0.0)) for name, room in rooms.items()}


def _whole_workers(free: float) -> int:
    if not free > 0:  # none left, or NaN from a pod's unreadable request
        return 0
    return math.floor(min(free, float(MAX_WORKERS_PER_NODE)) + 1e-9)


def place_gang(
    pods: Sequence[Mapping[str, Any]],
    rooms: Mapping[str, Room],
    resource: str,
    prefer: Iterable[str] = (),
) -> dict[str, str] | None:
    """Nodes for all ``pods`` (pod key -> node name), or None when they do not all fit.
    ``rooms`` is not changed; the caller takes the room once the pods are bound. One gang;
    a round that places many keeps a :class:`Placer`."""
    return Placer(rooms, resource).place(pods, prefer)


class Placer:
    """Gang placement over one round's ``rooms`` (:func:`place_gang`'s rule), with the nodes
    kept in order of free ``resource``, so that placing a pod looks at the nodes that would be
    chosen first instead of at every node: a burst places a gang per job on hundreds of nodes.

    Every change to ``rooms`` while the placer is in use goes through :meth:`take`, which keeps
    the order. A node whose free ``resource`` is not a number (a pod's unreadable request)
    comes last; it can hold no pod that asks for ``resource``."""

    def __init__(self, rooms: Mapping[str, Room], resource: str) -> None:
        self.rooms = rooms
        self.resource = resource
        self._order = sorted(self._key(name) for name in rooms)  # (-free, name), roomiest first

    def _key(self, name: str) -> tuple[float, str]:
        free = self.rooms[name].get(self.resource, 0.0)
        return (-free if free == free else math.inf, name)

    def take(self, node: str, request: Mapping[str, float], sign: float = 1.0) -> None:
        """:func:`take` on ``node``'s room, its place in the order kept."""
        old = self._key(node)
        take(self.rooms[node], request, sign)
        new = self._key(node)
        if new == old:
            return
        at = bisect.bisect_left(self._order, old)
        if at < len(self._order) and self._order[at] == old:
            del self._order[at]
            bisect.insort(self._order, new)
        else:  # the room changed behind the placer's back: the order is rebuilt, never wrong
            self._order = sorted(self._key(name) for name in self.rooms)

    def place(
        self, pods: Sequence[Mapping[str, Any]], prefer: Iterable[str] = ()
    ) -> dict[str, str] | None:
        """Nodes for all ``pods`` (pod key -> node name), or None when they do not all fit:
        each pod on the preferred node (one that hosts the job, or took an earlier pod of the
        gang) with the most free ``resource`` that fits it, else on the roomiest node that
        fits it, ties to the first name. ``rooms`` is not changed."""
        # The rooms the gang changed, copied; every such node is preferred from then on, so
        # the nodes walked in order are exactly those the gang has not changed.
        taken: dict[str, Room] = {}
        preferred = {name for name in prefer if name in self.rooms}
        result: dict[str, str] = {}
        for pod in pods:
            request = pod_requests(pod)
            needs = [(name, request[name]) for name in CHECKED if request.get(name, 0.0) > 0]
            node = self._best_preferred(preferred, taken, needs) or self._first_fit(
                preferred, needs
            )
            if node is None:
                return None
            if node not in taken:
                taken[node] = dict(self.rooms[node])
            take(taken[node], request)
            preferred.add(node)  # the gang's next pods join it there while it has room
            result[key_of(pod)] = node
        return result

    def _best_preferred(
        self, preferred: set[str], taken: dict[str, Room], needs: list[tuple[str, float]]
    ) -> str | None:
        best: tuple[float, str] | None = None
        for name in preferred:
            room = taken[name] if name in taken else self.rooms[name]
            free = room.get(self.resource, 0.0)
            key = (-free if free == free else math.inf, name)
            if (best is None or key < best) and _fits(room, needs):
                best = key
        return None if best is None else best[1]

    def _first_fit(self, preferred: set[str], needs: list[tuple[str, float]]) -> str | None:
        rooms = self.rooms
        for _, name in self._order:
            if name not in preferred and _fits(rooms[name], needs):
                return name
        return None


def _fits(room: Room, needs: list[tuple[str, float]]) -> bool:
    return all(value <= room.get(need, 0.0) + 1e-9 for need, value in needs)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _name(node: Mapping[str, Any]) -> str:
    return str(_mapping(node.get("metadata")).get("name", "?"))
