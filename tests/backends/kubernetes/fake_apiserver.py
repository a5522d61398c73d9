"""An in-process Kubernetes API server for tests, as strict as a real one where qosched could
get it wrong: the endpoints the scheduler and the trainer use, with the real wire format, so a
real ``kubernetes.client.ApiClient`` talks to it.

- **Watches** stay open until ``timeoutSeconds`` (30-60 min when absent, as the real server
  picks), send ``BOOKMARK`` events every ``bookmark_every_s`` when asked, and answer ``ERROR``
  410 ``Expired`` for a version older than the history kept (``history`` events, or everything
  before :meth:`compact`), also to a watcher that fell behind. :meth:`drop_watches` ends every
  open stream at once, as a restarted API server or a broken connection does.
- **Optimistic concurrency**: a ``PUT`` must carry the current ``resourceVersion`` (422 when
  absent, 409 when stale); a patch that carries one is refused 409 when it is stale.
- **RBAC** from the very Role/ClusterRole objects and bindings of the manifests
  (:mod:`fake_rbac`): every HTTP request needs a ServiceAccount's bearer token (401 without)
  and a grant for its group, resource, subresource, verb and namespace (403 without). Calls
  made in-process (``api.create(...)``) stand for the cluster's own components and pass.
- **Pods**: ``spec`` is immutable through the pod itself; ``nodeName`` is set only by the
  ``binding`` subresource (409 for a pod bound already or of another ``uid``); ``resize``
  changes only the CPU and memory of existing containers, keeps the pod's QoS class, never
  lowers a memory limit in place (422 otherwise; 404 when switched off, as before 1.33);
  ``status`` takes conditions. Deletes honour ``uid`` and ``resourceVersion`` preconditions
  (409).
- **StatefulSets**: a small controller (``Parallel`` pods ``<set>-<ordinal>``, ``OnDelete``
  template updates, a deleted pod recreated with a new ``uid``) that also writes the set's
  ``status``, as the real one does, so every write of the set races with it.
- **Leases** get, create (409 when it exists), replace; **Events** create; **Secrets** get,
  create (409 when it exists).

Every request waits ``latency_s`` first; :meth:`fail` and :meth:`disturb` inject errors and
latency. The server logs what tests check invariants on: every accepted write with the
User-Agent that made it and the server's time (``writes``), every accepted Lease record
(``lease_log``), every pod bound (``bound_uids``) and every binding that left a node over
its allocatable (``overcommits``).
"""

from __future__ import annotations

import bisect
import copy
import json
import random
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from fake_rbac import Authorizer, verb_of

from qosched.backends.kubernetes import manifests
from qosched.backends.kubernetes.fit import pod_requests
from qosched.backends.kubernetes.kube import parse_time, quantity

KINDS = {
    "pods": ("v1", "Pod"),
    "nodes": ("v1", "Node"),
    "statefulsets": ("apps/v1", "StatefulSet"),
    "leases": ("coordination.k8s.io/v1", "Lease"),
    "events": ("v1", "Event"),
    "secrets": ("v1", "Secret"),
}
#: The running servers by URL, so test helpers handed a URL can reach the server's state.
SERVERS: dict[str, FakeApiServer] = {}
#: What a StatefulSet's spec may change (the API server refuses any other field).
STS_MUTABLE = {
    "replicas",
    "template",
    "updateStrategy",
    "minReadySeconds",
    "persistentVolumeClaimRetentionPolicy",
    "ordinals",
}


def now_text() -> str:
    return datetime.now(tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge(target: dict, patch: dict) -> dict:
    """JSON merge patch, with lists of named items (containers) merged by name and conditions
    by type, as strategic merge patch does for them."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge(target[key], value)
        elif (
            isinstance(value, list)
            and isinstance(target.get(key), list)
            and (merge_key := _merge_key(value)) is not None
        ):
            by_name = {item.get(merge_key): item for item in target[key]}
            for item in value:
                if item[merge_key] in by_name:
                    merge(by_name[item[merge_key]], item)
                else:
                    target[key].append(_copy(item))
        else:
            target[key] = _copy(value)
    return target


def _merge_key(items: list) -> str | None:
    """The strategic-merge key of a list: owner references merge by ``uid``, containers by
    ``name``, conditions by ``type``."""
    for key in ("uid", "name", "type"):
        if items and all(isinstance(v, dict) and key in v for v in items):
            return key
    return None


def selects(selector: str | None, obj: dict) -> bool:
    """Equality and existence label selectors: ``a=b,c`` (all that qosched uses)."""
    labels = obj["metadata"].get("labels") or {}
    for term in (selector or "").split(","):
        if not term:
            continue
        key, _, value = term.partition("=")
        if key not in labels or (value and labels[key] != value):
            return False
    return True


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message

    def status(self) -> dict:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }


def invalid(message: str) -> ApiError:
    return ApiError(422, "Invalid", message)


def _copy(obj: Any) -> Any:
    """A deep copy of JSON data (dicts, lists, scalars), as ``copy.deepcopy`` makes one, at a
    third of its CPU: the store copies every object it takes, gives, stores and emits, and a
    burst's thousands of writes ran this server's share of a shared interpreter mostly in
    ``deepcopy``. Anything else is copied by ``deepcopy``."""
    kind = type(obj)
    if kind is dict:
        return {key: _copy(value) for key, value in obj.items()}
    if kind is list:
        return [_copy(value) for value in obj]
    if kind is str or kind is int or kind is float or kind is bool or obj is None:
        return obj
    return copy.deepcopy(obj)


@dataclass(frozen=True)
class Write:
    """One write the server accepted."""

    at: float  # the server's monotonic clock
    agent: str  # the client's User-Agent
    method: str
    path: str
    #: What the write was conditioned on (``rv=``/``uid=`` it sent), empty for none.
    precondition: str = ""


@dataclass(frozen=True)
class LeaseRecord:
    """One Lease record the server accepted: who holds it, from ``at`` for ``duration_s``."""

    at: float
    holder: str | None
    duration_s: float
    renew_time: float | None


class FakeApiServer:
    """The store, the event log and the HTTP server; use as a context manager."""

    def __init__(
        self,
        *,
        rbac: list[dict] | None = None,
        bookmark_every_s: float = 1.0,
        history: int = 100_000,
        latency_s: float = 0.001,
    ) -> None:
        self.lock = threading.Condition()
        self.objects: dict[str, dict[str, dict]] = {kind: {} for kind in KINDS}
        self.events: list[tuple[int, str, str, dict]] = []  # (rv, kind, type, object)
        self._event_rvs: list[int] = []
        self.rv = 100
        self.compacted_rv = 0  # watches from below this version get 410
        self.history = history
        self.bookmark_every_s = bookmark_every_s
        self.latency_s = latency_s
        self.resize_supported = True
        self.controller_paused = False  # the StatefulSet controller creates no pod (quota)
        self.requests: list[tuple[str, str]] = []  # (method, path) of every request
        self.writes: list[Write] = []
        self.lease_log: list[LeaseRecord] = []
        self.overcommits: list[str] = []  # "pod -> node" bindings that overfilled the node
        self.bound_uids: list[str] = []  # the uid of every pod each accepted binding bound
        self.open_watches = 0
        self.connections = 0  # TCP connections accepted: a client that reuses none opens many
        self.authorizer = Authorizer()
        self.authorizer.apply(manifests.deployment() if rbac is None else rbac)
        self._faults: list[list[Any]] = []  # [method, path regex, code, times left]
        self._noise: tuple[float, float, random.Random] | None = None
        self._epoch = 0  # drop_watches() ends the streams of older epochs
        self._closed = False
        self._uid = 0
        self._owned: dict[str, set[str]] = {}  # set key -> its pods' keys
        self._on_node: dict[str, set[str]] = {}  # node name -> keys of the pods bound there
        handler = type("Handler", (_Handler,), {"api": self})
        self.httpd = _Server(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        # A short poll: shutdown() waits for it, and every test shuts a server down.
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.stopping: list[Callable[[], None]] = []  # clients to stop before the server

    def __enter__(self) -> FakeApiServer:
        self._thread.start()
        SERVERS[self.url] = self
        return self

    def __exit__(self, *exc: object) -> None:
        for stop in reversed(self.stopping):
            stop()
        SERVERS.pop(self.url, None)
        with self.lock:
            self._closed = True
            self.lock.notify_all()
        self.httpd.shutdown()
        self.httpd.server_close()

    # -- test controls ------------------------------------------------------------------------

    def fail(self, method: str, path_pattern: str, code: int, times: int = 1) -> None:
        """Answer the next ``times`` requests matching with an error status."""
        with self.lock:
            self._faults.append([method, re.compile(path_pattern), code, times])

    def disturb(self, *, error_rate: float, max_latency_s: float, seed: int) -> None:
        """From now on, answer a share of requests (watches included) with a 500 or a 429, and
        delay each by up to ``max_latency_s`` more; ``error_rate`` 0 stops the errors."""
        with self.lock:
            self._noise = (error_rate, max_latency_s, random.Random(seed))

    def compact(self) -> None:
        """Forget the event history: every watch from an older version gets 410 Expired."""
        with self.lock:
            self.compacted_rv = self.rv
            self.events.clear()
            self._event_rvs.clear()
            self.lock.notify_all()

    def drop_watches(self) -> None:
        """End every open watch stream now."""
        with self.lock:
            self._epoch += 1
            self.lock.notify_all()

    def allow(self, objects: list[dict]) -> None:
        """Apply more RBAC objects (a job's manifests grant its trainer)."""
        with self.lock:
            self.authorizer.apply(objects)

    def add_node(self, name: str, *, cpu: str = "8", memory: str = "32Gi", gpus: int = 0) -> None:
        allocatable = {"cpu": cpu, "memory": memory, "pods": "110"}
        if gpus:
            allocatable["nvidia.com/gpu"] = str(gpus)
        self.create(
            "nodes",
            {
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                "spec": {},
                "status": {
                    "allocatable": allocatable,
                    "capacity": dict(allocatable),
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            },
        )

    def create(self, kind: str, obj: dict) -> dict:
        with self.lock:
            return self._create(kind, _copy(obj))

    def get(self, kind: str, key: str) -> dict | None:
        with self.lock:
            obj = self.objects[kind].get(key)
            return _copy(obj) if obj is not None else None

    def list(self, kind: str) -> list[dict]:
        with self.lock:
            return [_copy(o) for o in self.objects[kind].values()]

    def versions(self, kind: str) -> dict[str, str]:
        """``key -> resourceVersion`` of every object of ``kind``: what a synced cache holds."""
        with self.lock:
            return {k: o["metadata"]["resourceVersion"] for k, o in self.objects[kind].items()}

    def patch(self, kind: str, key: str, patch: dict) -> dict:
        """A change made by a cluster component (a kubelet, a training pod, kubectl)."""
        with self.lock:
            return self._patch(kind, key, patch)

    def delete(self, kind: str, key: str) -> None:
        with self.lock:
            self._delete(kind, key)

    def set_pod_phase(self, key: str, phase: str) -> None:
        self.patch("pods", key, {"status": {"phase": phase}})

    # -- the store ----------------------------------------------------------------------------

    def _emit(self, kind: str, type_: str, obj: dict) -> None:
        self.events.append((self.rv, kind, type_, _copy(obj)))
        self._event_rvs.append(self.rv)
        if len(self.events) > self.history:
            drop = len(self.events) - self.history
            self.compacted_rv = self._event_rvs[drop - 1]
            del self.events[:drop], self._event_rvs[:drop]
        self.lock.notify_all()

    def _create(self, kind: str, obj: dict) -> dict:
        api_version, kind_name = KINDS[kind]
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{self._uid + 1:05x}"
        key = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
        if key in self.objects[kind]:
            raise ApiError(409, "AlreadyExists", f'{kind} "{meta["name"]}" already exists')
        self.rv += 1
        self._uid += 1
        obj["apiVersion"], obj["kind"] = api_version, kind_name
        meta["resourceVersion"] = str(self.rv)
        meta["uid"] = f"uid-{self._uid}"
        meta["generation"] = 1
        meta.setdefault("creationTimestamp", now_text())
        if kind == "pods":
            obj.setdefault("status", {"phase": "Pending"})
        self.objects[kind][key] = obj
        self._index(kind, key, None, obj)
        self._emit(kind, "ADDED", obj)
        if kind == "statefulsets":
            self._reconcile(key)
        return _copy(obj)

    def _require(self, kind: str, key: str) -> dict:
        obj = self.objects[kind].get(key)
        if obj is None:
            raise ApiError(404, "NotFound", f'{kind} "{key}" not found')
        return obj

    def _write(self, kind: str, key: str, obj: dict) -> dict:
        old = self.objects[kind].get(key)
        if old is not None and old.get("spec") != obj.get("spec"):
            obj["metadata"]["generation"] = int(old["metadata"].get("generation", 1)) + 1
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.objects[kind][key] = obj
        self._index(kind, key, old, obj)
        self._emit(kind, "MODIFIED", obj)
        return _copy(obj)

    def _patch(self, kind: str, key: str, patch: dict) -> dict:
        obj = _copy(self._require(kind, key))
        merge(obj, patch)
        result = self._write(kind, key, obj)
        if kind == "statefulsets":
            self._reconcile(key)
        return result

    def _delete(self, kind: str, key: str) -> dict:
        obj = self.objects[kind].pop(key, None)
        if obj is None:
            raise ApiError(404, "NotFound", f'{kind} "{key}" not found')
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self._index(kind, key, obj, None)
        self._emit(kind, "DELETED", obj)
        owner = self._owner(obj)
        if owner is not None and owner in self.objects["statefulsets"]:
            self._reconcile(owner)  # the controller replaces a deleted pod
        return _copy(obj)

    def _index(self, kind: str, key: str, old: dict | None, new: dict | None) -> None:
        """Pods by owning set and by node, so the controller and the room check need not scan
        every pod."""
        if kind != "pods":
            return
        for obj, add in ((old, False), (new, True)):
            if obj is None:
                continue
            owner, node = self._owner(obj), obj["spec"].get("nodeName")
            for index, name in ((self._owned, owner), (self._on_node, node)):
                if name is not None:
                    keys = index.setdefault(name, set())
                    if add:
                        keys.add(key)
                    else:
                        keys.discard(key)

    @staticmethod
    def _owner(pod: dict) -> str | None:
        for ref in pod["metadata"].get("ownerReferences", []):
            if ref.get("kind") == "StatefulSet":
                return f"{pod['metadata']['namespace']}/{ref['name']}"
        return None

    def _reconcile(self, key: str) -> None:
        """The StatefulSet controller: pods ``<name>-0..replicas-1``, Parallel, OnDelete; then
        the set's ``status``."""
        sts = self.objects["statefulsets"][key]
        namespace, name = key.split("/")
        replicas = int(sts["spec"].get("replicas", 1))
        for pod_key in sorted(self._owned.get(key, ())):
            ordinal = int(pod_key.rsplit("-", 1)[1])
            # A delete reconciles the set again, which may have deleted this pod already.
            if ordinal >= replicas and pod_key in self.objects["pods"]:
                self._delete("pods", pod_key)
        for ordinal in range(replicas):
            pod_key = f"{namespace}/{name}-{ordinal}"
            if pod_key in self.objects["pods"] or self.controller_paused:
                continue
            template = _copy(sts["spec"]["template"])
            meta = template.get("metadata", {})
            meta.update(
                name=f"{name}-{ordinal}",
                namespace=namespace,
                ownerReferences=[
                    {
                        "apiVersion": "apps/v1",
                        "kind": "StatefulSet",
                        "name": name,
                        "uid": sts["metadata"]["uid"],
                        "controller": True,
                    }
                ],
            )
            self._create("pods", {"metadata": meta, "spec": template["spec"]})
        sts = self.objects["statefulsets"].get(key)
        if sts is None:
            return
        pods = [self.objects["pods"][k] for k in self._owned.get(key, ())]
        status = {
            "observedGeneration": sts["metadata"].get("generation", 1),
            "replicas": len(pods),
            "availableReplicas": sum(1 for p in pods if p["spec"].get("nodeName")),
        }
        if sts.get("status") != status:
            updated = _copy(sts)
            updated["status"] = status
            self._write("statefulsets", key, updated)

    # -- request handling ---------------------------------------------------------------------

    def delay(self) -> float:
        """Seconds this request waits before it is served (outside the lock)."""
        with self.lock:
            extra = self._noise[2].uniform(0.0, self._noise[1]) if self._noise else 0.0
        return self.latency_s + extra

    def admit(self, method: str, path: str, token: str | None, *, watch: bool) -> tuple:
        """Faults, authentication and authorization of one request; its route."""
        self.requests.append(("WATCH" if watch else method, path))
        self.check_fault("WATCH" if watch else method, path)
        found = route(path)
        if found is None:
            raise ApiError(404, "NotFound", f"the server could not find {path}")
        if token is None:
            raise ApiError(401, "Unauthorized", "Unauthorized")
        kind, namespace, name, sub = found
        resource = kind + (f"/{sub}" if sub else "")
        verb = verb_of(method, named=name is not None, watch=watch)
        if not self.authorizer.allows(token, namespace, resource, verb, name):
            raise ApiError(
                403,
                "Forbidden",
                f'{kind} is forbidden: User "{token}" cannot {verb} resource "{resource}" '
                f'in namespace "{namespace}"',
            )
        return found

    def check_fault(self, method: str, path: str) -> None:
        for fault in self._faults:
            if fault[0] == method and fault[1].search(path) and fault[3] > 0:
                fault[3] -= 1
                raise ApiError(
                    fault[2],
                    "InternalError" if fault[2] >= 500 else "Injected",
                    f"injected {fault[2]}",
                )
        if self._noise is not None and self._noise[2].random() < self._noise[0]:
            code = self._noise[2].choice((500, 429))
            raise ApiError(code, "InternalError" if code == 500 else "TooManyRequests", "noise")

    def handle(
        self, method: str, path: str, query: dict, body: Any, token: str | None, agent: str
    ) -> tuple[int, Any]:
        """One non-watch request: (status, JSON body)."""
        with self.lock:
            kind, namespace, name, sub = self.admit(method, path, token, watch=False)
            code, result = self._serve(method, kind, namespace, name, sub, query, body)
            if method != "GET":
                self.writes.append(
                    Write(time.monotonic(), agent, method, path, _precondition_of(method, body))
                )
                if kind == "leases":
                    spec = result.get("spec") or {}
                    self.lease_log.append(
                        LeaseRecord(
                            time.monotonic(),
                            spec.get("holderIdentity"),
                            float(spec.get("leaseDurationSeconds") or 0),
                            parse_time(spec.get("renewTime")),
                        )
                    )
            return code, result

    def _serve(
        self,
        method: str,
        kind: str,
        namespace: str | None,
        name: str | None,
        sub: str | None,
        query: dict,
        body: Any,
    ) -> tuple[int, Any]:
        key = f"{namespace}/{name}" if namespace else name
        if name is None and method == "GET":
            selector = query.get("labelSelector")
            items = [
                _copy(o)
                for k, o in self.objects[kind].items()
                if (namespace is None or k.startswith(namespace + "/")) and selects(selector, o)
            ]
            api_version, kind_name = KINDS[kind]
            return 200, {
                "kind": kind_name + "List",
                "apiVersion": api_version,
                "metadata": {"resourceVersion": str(self.rv)},
                "items": items,
            }
        if name is None and method == "POST":
            body.setdefault("metadata", {})["namespace"] = namespace
            body["metadata"].pop("resourceVersion", None)
            return 201, self._create(kind, body)
        if sub == "binding" and method == "POST":
            return 201, self._bind(key, body)
        if sub == "resize" and method == "PATCH" and kind == "pods":
            if not self.resize_supported:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return 200, self._resize(key, body)
        if sub == "status" and method == "PATCH" and kind == "pods":
            self._precondition(kind, key, body)
            return 200, self._patch(kind, key, {"status": body.get("status") or {}})
        if sub is not None:
            raise ApiError(404, "NotFound", f"no subresource {sub} of {kind}")
        if method == "GET":
            return 200, _copy(self._require(kind, key))
        if method == "PATCH":
            self._precondition(kind, key, body)
            current = self._require(kind, key)
            patched = merge(_copy(current), body)
            patched["status"] = _copy(current.get("status"))  # status: its subresource
            if patched.get("status") is None:
                patched.pop("status", None)
            self._validate_update(kind, current, patched)
            result = self._write(kind, key, patched)
            if kind == "statefulsets":
                self._reconcile(key)
            return 200, result
        if method == "PUT":
            current = self._require(kind, key)
            sent = (body.get("metadata") or {}).get("resourceVersion")
            if not sent:
                raise invalid(
                    f'{kind} "{name}" is invalid: metadata.resourceVersion: Invalid value: 0x0: '
                    "must be specified for an update"
                )
            self._precondition(kind, key, body)
            body["metadata"] = {**current["metadata"], **body["metadata"]}
            body["metadata"]["uid"] = current["metadata"]["uid"]
            body["apiVersion"], body["kind"] = KINDS[kind]
            self._validate_update(kind, current, body)
            return 200, self._write(kind, key, body)
        if method == "DELETE":
            preconditions = (body or {}).get("preconditions") or {}
            _check_uid(self._require(kind, key), preconditions.get("uid"))
            self._precondition(kind, key, {"metadata": preconditions})
            return 200, self._delete(kind, key)
        raise ApiError(405, "MethodNotAllowed", f"{method} not allowed on {kind}")

    def _precondition(self, kind: str, key: str, body: dict) -> None:
        """A write that names a ``resourceVersion`` applies only to that version."""
        sent = ((body or {}).get("metadata") or {}).get("resourceVersion")
        current = self._require(kind, key)
        if sent is not None and sent != current["metadata"]["resourceVersion"]:
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {kind} "{current["metadata"]["name"]}": the '
                "object has been modified; please apply your changes to the latest version and "
                "try again",
            )

    @staticmethod
    def _validate_update(kind: str, current: dict, updated: dict) -> None:
        if kind == "pods":
            before, after = _copy(current["spec"]), _copy(updated.get("spec"))
            for spec in (before, after):
                for container in (spec or {}).get("containers", []):
                    container.pop("image", None)
            if before != after:
                raise invalid(
                    f'Pod "{current["metadata"]["name"]}" is invalid: spec: Forbidden: pod '
                    "updates may not change fields other than `spec.containers[*].image`, "
                    "`spec.activeDeadlineSeconds`, `spec.tolerations` (only additions)"
                )
        if kind == "statefulsets":
            changed = {
                k
                for k in set(current["spec"]) | set(updated.get("spec") or {})
                if current["spec"].get(k) != (updated.get("spec") or {}).get(k)
            }
            if changed - STS_MUTABLE:
                raise invalid(
                    f'StatefulSet "{current["metadata"]["name"]}" is invalid: spec: Forbidden: '
                    f"updates to statefulset spec for fields other than {sorted(STS_MUTABLE)} "
                    f"are forbidden (changed: {sorted(changed - STS_MUTABLE)})"
                )

    def _resize(self, key: str, body: dict) -> dict:
        """The ``resize`` subresource with the API's validation (Kubernetes 1.33)."""
        self._precondition("pods", key, body)
        pod = self._require("pods", key)
        name = pod["metadata"]["name"]
        sent = (body.get("spec") or {}).get("containers")
        if set(body) - {"spec", "metadata"} or set(body.get("spec") or {}) - {"containers"}:
            raise invalid(f'Pod "{name}" is invalid: spec: Forbidden: only resources may change')
        current = {c["name"]: c for c in pod["spec"]["containers"]}
        updated = _copy(pod)
        by_name = {c["name"]: c for c in updated["spec"]["containers"]}
        for container in sent or []:
            if container.get("name") not in current:
                raise invalid(f'Pod "{name}" is invalid: no container {container.get("name")!r}')
            if set(container) - {"name", "resources", "resizePolicy"}:
                raise invalid(
                    f'Pod "{name}" is invalid: spec.containers: Forbidden: only resources and '
                    "resizePolicy may change in a resize"
                )
            merge(by_name[container["name"]], container)
        for cname, old in current.items():
            new_resources = by_name[cname].get("resources") or {}
            old_resources = old.get("resources") or {}
            for part in ("requests", "limits"):
                before, after = old_resources.get(part) or {}, new_resources.get(part) or {}
                for resource in set(before) | set(after):
                    if resource in ("cpu", "memory"):
                        if resource in before and resource not in after:
                            raise invalid(
                                f'Pod "{name}" is invalid: {part}.{resource}: Forbidden: '
                                "resource requests and limits cannot be removed"
                            )
                    elif quantity(before.get(resource)) != quantity(after.get(resource)):
                        raise invalid(
                            f'Pod "{name}" is invalid: {resource}: Forbidden: only cpu and '
                            "memory resources are mutable"
                        )
            old_limit = (old_resources.get("limits") or {}).get("memory")
            new_limit = (new_resources.get("limits") or {}).get("memory")
            if old_limit is not None and quantity(new_limit) < quantity(old_limit):
                policy = {
                    p.get("resourceName"): p.get("restartPolicy")
                    for p in by_name[cname].get("resizePolicy") or []
                }
                if policy.get("memory", "NotRequired") == "NotRequired":
                    raise invalid(
                        f'Pod "{name}" is invalid: memory limits cannot be decreased unless '
                        "resizePolicy is RestartContainer"
                    )
        if _qos_class(pod) != _qos_class(updated):
            raise invalid(
                f'Pod "{name}" is invalid: metadata: Invalid value: "{_qos_class(updated)}": '
                "Pod QOS Class may not change as a result of resizing"
            )
        return self._write("pods", key, updated)

    def _bind(self, key: str, binding: dict) -> dict:
        pod = self._require("pods", key)
        node = binding["target"]["name"]
        _check_uid(pod, (binding.get("metadata") or {}).get("uid"))
        self._precondition("pods", key, binding)  # a Binding's resourceVersion is one too
        if pod["spec"].get("nodeName"):
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on pods/binding "{pod["metadata"]["name"]}": '
                f"pod {pod['metadata']['name']} is already assigned to node "
                f'"{pod["spec"]["nodeName"]}"',
            )
        target = self._require("nodes", node)
        pod = _copy(pod)
        pod["spec"]["nodeName"] = node
        pod["status"] = {
            "phase": "Running",
            "conditions": [{"type": "PodScheduled", "status": "True"}],
        }
        self._write("pods", key, pod)
        self.bound_uids.append(pod["metadata"]["uid"])
        self._check_room(target, key)
        owner = self._owner(pod)
        if owner is not None and owner in self.objects["statefulsets"]:
            self._reconcile(owner)
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "code": 201,
        }

    def _check_room(self, node: dict, pod_key: str) -> None:
        """Record a binding that left its node over its allocatable (the API server accepts
        it; the kubelet would refuse to run the pod)."""
        name = node["metadata"]["name"]
        used: dict[str, float] = {}
        for pod in (self.objects["pods"][k] for k in self._on_node.get(name, ())):
            if pod["status"].get("phase") not in (
                "Succeeded",
                "Failed",
            ):
                for resource, value in pod_requests(pod).items():
                    used[resource] = used.get(resource, 0.0) + value
        allocatable = node["status"]["allocatable"]
        for resource, value in used.items():
            if value > quantity(allocatable.get(resource)) + 1e-9:
                self.overcommits.append(f"{pod_key} -> {name} ({resource})")

    def watch_events(
        self,
        kind: str,
        namespace: str | None,
        since: int,
        timeout_s: float,
        selector: str | None = None,
        bookmarks: bool = False,
    ):
        """Events after ``since`` as they come, until ``timeout_s`` passed, the watch is
        dropped or the server stops."""
        now = time.monotonic()
        end = now + timeout_s
        next_bookmark = now + self.bookmark_every_s
        sent = since
        with self.lock:
            epoch = self._epoch
            self.open_watches += 1
        try:
            while True:
                with self.lock:
                    if self._closed or self._epoch != epoch:
                        return
                    if sent < self.compacted_rv:
                        yield {
                            "type": "ERROR",
                            "object": ApiError(
                                410,
                                "Expired",
                                f"too old resource version: {sent} ({self.compacted_rv})",
                            ).status(),
                        }
                        return
                    start = bisect.bisect_right(self._event_rvs, sent)
                    batch = [
                        (rv, t, o)
                        for rv, k, t, o in self.events[start:]
                        if k == kind
                        and (namespace is None or o["metadata"].get("namespace") == namespace)
                        and selects(selector, o)
                    ]
                    latest = self.rv
                    if not batch:
                        sent = max(sent, latest)  # nothing of this kind up to here
                        now = time.monotonic()
                        if now >= end:
                            return
                        if bookmarks and now >= next_bookmark:
                            next_bookmark = now + self.bookmark_every_s
                            api_version, kind_name = KINDS[kind]
                            yield {
                                "type": "BOOKMARK",
                                "object": {
                                    "kind": kind_name,
                                    "apiVersion": api_version,
                                    "metadata": {"resourceVersion": str(sent)},
                                },
                            }
                            continue
                        wake = min(end, next_bookmark if bookmarks else end)
                        self.lock.wait(max(0.0, wake - now))
                        continue
                for _rv, type_, obj in batch:
                    yield {"type": type_, "object": obj}  # a copy made at emit, never changed
                sent = max(batch[-1][0], sent)
        finally:
            with self.lock:
                self.open_watches -= 1


def _qos_class(pod: dict) -> str:
    """The pod's QoS class, as the kubelet computes it (CPU and memory)."""
    requests_any, guaranteed = False, True
    for container in pod["spec"].get("containers", []):
        resources = container.get("resources") or {}
        requests = dict(resources.get("limits") or {})
        requests.update(resources.get("requests") or {})
        limits = resources.get("limits") or {}
        for resource in ("cpu", "memory"):
            if resource in requests or resource in limits:
                requests_any = True
            if resource not in limits or quantity(requests.get(resource)) != quantity(
                limits[resource]
            ):
                guaranteed = False
    if guaranteed:
        return "Guaranteed"
    return "Burstable" if requests_any else "BestEffort"


def _precondition_of(method: str, body: Any) -> str:
    """What a write was conditioned on: the ``resourceVersion`` of a PATCH or PUT (in its
    ``metadata``), the ``uid`` of a binding, the ``preconditions`` of a DELETE."""
    body = body if isinstance(body, dict) else {}
    found = dict(body.get("preconditions") or {}) if method == "DELETE" else {}
    meta = body.get("metadata") or {}
    if method in ("PATCH", "PUT") and meta.get("resourceVersion"):
        found["resourceVersion"] = meta["resourceVersion"]
    if method == "POST" and body.get("target") and meta.get("uid"):  # a binding
        found["uid"] = meta["uid"]
    return ",".join(f"{k}={v}" for k, v in sorted(found.items()) if v)


def _check_uid(obj: dict, uid: str | None) -> None:
    """The API server's UID precondition (bindings, deletes): 409 for another object."""
    if uid is not None and uid != obj["metadata"]["uid"]:
        raise ApiError(
            409,
            "Conflict",
            f"Precondition failed: UID in precondition: {uid}, "
            f"UID in object meta: {obj['metadata']['uid']}",
        )


_PATH = re.compile(
    r"^/(?:api/v1|apis/apps/v1|apis/coordination\.k8s\.io/v1)"
    r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<kind>pods|nodes|statefulsets|leases|events|secrets)"
    r"(?:/(?P<name>[^/]+))?(?:/(?P<sub>[^/]+))?$"
)


def route(path: str) -> tuple[str, str | None, str | None, str | None] | None:
    """(kind, namespace, name, subresource) of an API path; None for one the server lacks."""
    match = _PATH.match(path)
    if match is None:
        return None
    return match["kind"], match["ns"], match["name"], match["sub"]


class _Server(ThreadingHTTPServer):
    # Go's net/http listens with the system's backlog; http.server's 5 would reset the
    # connections of a client with more than 5 requests in flight, which no API server does.
    request_queue_size = socket.SOMAXCONN

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # clients that hang up (a watch the scheduler stopped reading) are normal


class _Handler(BaseHTTPRequestHandler):
    api: FakeApiServer
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def setup(self) -> None:
        super().setup()
        with self.api.lock:
            self.api.connections += 1
        # As Go's net/http does: without it, headers and body sent apart meet the client's
        # delayed ACK and every answer waits 40 ms.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _send(self, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _dispatch(self, method: str) -> None:
        url = urlparse(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        auth = self.headers.get("Authorization") or ""
        token = auth.removeprefix("Bearer ").strip() or None
        agent = self.headers.get("User-Agent") or ""
        time.sleep(self.api.delay())
        try:
            if method == "GET" and query.get("watch") in ("true", "1"):
                self._watch(url.path, query, token)
                return
            code, result = self.api.handle(method, url.path, query, body, token, agent)
        except ApiError as exc:
            code, result = exc.code, exc.status()
        self._send(code, result)

    def _watch(self, path: str, query: dict, token: str | None) -> None:
        with self.api.lock:
            kind, namespace, _, _ = self.api.admit("GET", path, token, watch=True)
            since = int(query.get("resourceVersion") or self.api.rv)
        # Without timeoutSeconds the real server closes the stream after 30 to 60 minutes.
        timeout_s = float(query.get("timeoutSeconds") or random.uniform(1800, 3600))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        events = self.api.watch_events(
            kind,
            namespace,
            since,
            timeout_s,
            query.get("labelSelector"),
            bookmarks=query.get("allowWatchBookmarks") in ("true", "1"),
        )
        try:
            for event in events:
                line = json.dumps(event).encode() + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            pass  # the client went away
        finally:
            events.close()
        self.close_connection = True

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")
