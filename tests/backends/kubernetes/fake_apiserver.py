"""An in-process Kubernetes API server for tests: the handful of endpoints qosched's scheduler
uses, with the real wire format, so a real ``kubernetes.client.ApiClient`` talks to it.

Implemented: list and watch (chunked ``{"type", "object"}`` lines, ``resourceVersion``,
``timeoutSeconds``, bookmarks ignored, 410 ``Expired`` for a compacted version) of pods, nodes
and StatefulSets; get, merge/strategic-merge patch and delete of pods; the pod ``binding``
(409 when already bound) and ``resize`` (404 when switched off, as on a cluster before 1.33)
subresources; get and patch of StatefulSets with a small controller (``Parallel`` pods named
``<set>-<ordinal>``, ``OnDelete`` template updates, a deleted pod recreated); Leases get,
create (409 when it exists) and replace (409 on a stale ``resourceVersion``). Deleted pods go
at once (no grace period). ``fail(...)`` injects error responses.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

KINDS = {
    "pods": ("v1", "Pod"),
    "nodes": ("v1", "Node"),
    "statefulsets": ("apps/v1", "StatefulSet"),
    "leases": ("coordination.k8s.io/v1", "Lease"),
    "events": ("v1", "Event"),
}


def now_text() -> str:
    return datetime.now(tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge(target: dict, patch: dict) -> dict:
    """JSON merge patch, with lists of named items (containers) merged by name, as strategic
    merge patch does for them."""
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
                    target[key].append(copy.deepcopy(item))
        else:
            target[key] = copy.deepcopy(value)
    return target


def _merge_key(items: list) -> str | None:
    """The strategic-merge key of a list: containers merge by ``name``, conditions by ``type``."""
    for key in ("name", "type"):
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


class FakeApiServer:
    """The store, the event log and the HTTP server; use as a context manager."""

    def __init__(self, *, watch_idle_close_s: float = 0.02) -> None:
        self.lock = threading.Condition()
        self.objects: dict[str, dict[str, dict]] = {kind: {} for kind in KINDS}
        self.events: list[tuple[int, str, str, dict]] = []  # (rv, kind, type, object)
        self.rv = 100
        self.compacted_rv = 0  # watches from below this version get 410
        self.watch_idle_close_s = watch_idle_close_s
        self.resize_supported = True
        self.requests: list[tuple[str, str]] = []  # (method, path) of every request
        self._faults: list[list[Any]] = []  # [method, path regex, code, times left]
        self._uid = 0
        handler = type("Handler", (_Handler,), {"api": self})
        self.httpd = _Server(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeApiServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # -- test controls ------------------------------------------------------------------------

    def fail(self, method: str, path_pattern: str, code: int, times: int = 1) -> None:
        """Answer the next ``times`` requests matching with an error status."""
        with self.lock:
            self._faults.append([method, re.compile(path_pattern), code, times])

    def compact(self) -> None:
        """Forget the event history: every watch from an older version gets 410 Expired."""
        with self.lock:
            self.compacted_rv = self.rv + 1
            self.events.clear()

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
            return self._create(kind, copy.deepcopy(obj))

    def get(self, kind: str, key: str) -> dict | None:
        with self.lock:
            obj = self.objects[kind].get(key)
            return copy.deepcopy(obj) if obj is not None else None

    def list(self, kind: str) -> list[dict]:
        with self.lock:
            return [copy.deepcopy(o) for o in self.objects[kind].values()]

    def patch(self, kind: str, key: str, patch: dict) -> dict:
        """A change made by someone else (a training pod reporting progress, kubectl)."""
        with self.lock:
            return self._patch(kind, key, patch)

    def delete(self, kind: str, key: str) -> None:
        with self.lock:
            self._delete(kind, key)

    def set_pod_phase(self, key: str, phase: str) -> None:
        self.patch("pods", key, {"status": {"phase": phase}})

    # -- the store ----------------------------------------------------------------------------

    def _emit(self, kind: str, type_: str, obj: dict) -> None:
        self.events.append((self.rv, kind, type_, copy.deepcopy(obj)))
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
        meta.setdefault("uid", f"uid-{self._uid}")
        meta.setdefault("creationTimestamp", now_text())
        if kind == "pods":
            obj.setdefault("status", {"phase": "Pending"})
        self.objects[kind][key] = obj
        self._emit(kind, "ADDED", obj)
        if kind == "statefulsets":
            self._reconcile(key)
        return copy.deepcopy(obj)

    def _require(self, kind: str, key: str) -> dict:
        obj = self.objects[kind].get(key)
        if obj is None:
            raise ApiError(404, "NotFound", f'{kind} "{key}" not found')
        return obj

    def _write(self, kind: str, key: str, obj: dict) -> dict:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.objects[kind][key] = obj
        self._emit(kind, "MODIFIED", obj)
        return copy.deepcopy(obj)

    def _patch(self, kind: str, key: str, patch: dict) -> dict:
        obj = copy.deepcopy(self._require(kind, key))
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
        self._emit(kind, "DELETED", obj)
        owner = self._owner(obj)
        if owner is not None and owner in self.objects["statefulsets"]:
            self._reconcile(owner)  # the controller replaces a deleted pod
        return copy.deepcopy(obj)

    @staticmethod
    def _owner(pod: dict) -> str | None:
        for ref in pod["metadata"].get("ownerReferences", []):
            if ref.get("kind") == "StatefulSet":
                return f"{pod['metadata']['namespace']}/{ref['name']}"
        return None

    def _reconcile(self, key: str) -> None:
        """The StatefulSet controller: pods ``<name>-0..replicas-1``, Parallel, OnDelete."""
        sts = self.objects["statefulsets"][key]
        namespace, name = key.split("/")
        replicas = int(sts["spec"].get("replicas", 1))
        for pod_key in [k for k, p in self.objects["pods"].items() if self._owner(p) == key]:
            ordinal = int(pod_key.rsplit("-", 1)[1])
            if ordinal >= replicas:
                self._delete("pods", pod_key)
        for ordinal in range(replicas):
            pod_key = f"{namespace}/{name}-{ordinal}"
            if pod_key in self.objects["pods"]:
                continue
            template = copy.deepcopy(sts["spec"]["template"])
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

    # -- request handling ---------------------------------------------------------------------

    def check_fault(self, method: str, path: str) -> None:
        for fault in self._faults:
            if fault[0] == method and fault[1].search(path) and fault[3] > 0:
                fault[3] -= 1
                raise ApiError(
                    fault[2],
                    "InternalError" if fault[2] >= 500 else "Injected",
                    f"injected {fault[2]}",
                )

    def handle(self, method: str, path: str, query: dict, body: Any) -> tuple[int, Any]:
        """One non-watch request: (status, JSON body)."""
        with self.lock:
            self.requests.append((method, path))
            self.check_fault(method, path)
            route = _route(path)
            if route is None:
                raise ApiError(404, "NotFound", f"the server could not find {path}")
            kind, namespace, name, sub = route
            key = f"{namespace}/{name}" if namespace else name
            if name is None and method == "GET":
                selector = query.get("labelSelector")
                items = [
                    copy.deepcopy(o)
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
                return 201, self._create(kind, body)
            if sub == "binding" and method == "POST":
                return 201, self._bind(key, body)
            if sub == "status" and method == "PATCH" and kind == "pods":
                return 200, self._patch(kind, key, {"status": body.get("status", {})})
            if sub == "resize" and method == "PATCH":
                if not self.resize_supported:
                    raise ApiError(
                        404, "NotFound", "the server could not find the requested resource"
                    )
                allowed = {
                    "spec": {
                        "containers": [
                            {"name": c["name"], "resources": c.get("resources", {})}
                            for c in body.get("spec", {}).get("containers", [])
                        ]
                    }
                }
                return 200, self._patch(kind, key, allowed)
            if sub is not None:
                raise ApiError(404, "NotFound", f"no subresource {sub}")
            if method == "GET":
                return 200, copy.deepcopy(self._require(kind, key))
            if method == "PATCH":
                return 200, self._patch(kind, key, body)
            if method == "PUT":
                current = self._require(kind, key)
                sent = body.get("metadata", {}).get("resourceVersion")
                if sent != current["metadata"]["resourceVersion"]:
                    raise ApiError(
                        409,
                        "Conflict",
                        f'Operation cannot be fulfilled on {kind} "{name}": the object has been '
                        "modified; please apply your changes to the latest version and try again",
                    )
                body["metadata"] = {**current["metadata"], **body["metadata"]}
                body["apiVersion"], body["kind"] = KINDS[kind]
                return 200, self._write(kind, key, body)
            if method == "DELETE":
                uid = ((body or {}).get("preconditions") or {}).get("uid")
                _check_uid(self._require(kind, key), uid)
                return 200, self._delete(kind, key)
            raise ApiError(405, "MethodNotAllowed", f"{method} not allowed on {path}")

    def _bind(self, key: str, binding: dict) -> dict:
        pod = self._require("pods", key)
        node = binding["target"]["name"]
        _check_uid(pod, (binding.get("metadata") or {}).get("uid"))
        if pod["spec"].get("nodeName"):
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on pods/binding "{pod["metadata"]["name"]}": '
                f"pod {pod['metadata']['name']} is already assigned to node "
                f'"{pod["spec"]["nodeName"]}"',
            )
        self._require("nodes", node)
        pod = copy.deepcopy(pod)
        pod["spec"]["nodeName"] = node
        pod["status"] = {
            "phase": "Running",
            "conditions": [{"type": "PodScheduled", "status": "True"}],
        }
        self._write("pods", key, pod)
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "code": 201,
        }

    def watch_events(
        self,
        kind: str,
        namespace: str | None,
        since: int,
        timeout_s: float,
        selector: str | None = None,
    ):
        """Events after ``since`` as they come, until the stream has been idle for
        ``watch_idle_close_s`` or ``timeout_s`` passed."""
        end = time.monotonic() + timeout_s
        sent = since
        with self.lock:
            if since < self.compacted_rv:
                yield {
                    "type": "ERROR",
                    "object": ApiError(
                        410, "Expired", f"too old resource version: {since} ({self.compacted_rv})"
                    ).status(),
                }
                return
        while time.monotonic() < end:
            with self.lock:
                batch = [
                    (rv, t, o)
                    for rv, k, t, o in self.events
                    if rv > sent
                    and k == kind
                    and (namespace is None or o["metadata"].get("namespace") == namespace)
                    and selects(selector, o)
                ]
                if not batch:
                    idle = min(self.watch_idle_close_s, end - time.monotonic())
                    if idle <= 0 or not self.lock.wait(idle):
                        return
                    continue
            for rv, type_, obj in batch:
                sent = rv
                yield {"type": type_, "object": obj}


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
    r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<kind>pods|nodes|statefulsets|leases|events)"
    r"(?:/(?P<name>[^/]+))?(?:/(?P<sub>[^/]+))?$"
)


def _route(path: str) -> tuple[str, str | None, str | None, str | None] | None:
    match = _PATH.match(path)
    if match is None:
        return None
    return match["kind"], match["ns"], match["name"], match["sub"]


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        pass  # clients that hang up (a watch the scheduler stopped reading) are normal


class _Handler(BaseHTTPRequestHandler):
    api: FakeApiServer
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:  # quiet
        pass

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
        try:
            if method == "GET" and query.get("watch") in ("true", "1"):
                self._watch(url.path, query)
                return
            code, result = self.api.handle(method, url.path, query, body)
        except ApiError as exc:
            code, result = exc.code, exc.status()
        self._send(code, result)

    def _watch(self, path: str, query: dict) -> None:
        with self.api.lock:
            self.api.requests.append(("WATCH", path))
            self.api.check_fault("WATCH", path)
        route = _route(path)
        if route is None:
            raise ApiError(404, "NotFound", path)
        kind, namespace, _, _ = route
        since = int(query.get("resourceVersion") or self.api.rv)
        timeout_s = float(query.get("timeoutSeconds") or 30)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        selector = query.get("labelSelector")
        for event in self.api.watch_events(kind, namespace, since, timeout_s, selector):
            line = json.dumps(event).encode() + b"\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

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
