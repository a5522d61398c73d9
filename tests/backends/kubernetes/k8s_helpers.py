"""Shared pieces of the Kubernetes backend tests: job StatefulSets, a scripted policy, and a
scheduler pointed at the fake API server through the real client."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

from fake_apiserver import SERVERS, Write, route
from fake_rbac import token_of

from qosched.backends.kubernetes import jobs as J
from qosched.backends.kubernetes import manifests
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


def made_ago(sts: dict, seconds: float) -> dict:
    """``sts`` as created ``seconds`` ago: a job that can have computed that long (a pod's
    ``active_s`` counts at most its job's age)."""
    when = datetime.fromtimestamp(time.time() - seconds, tz=UTC)
    sts["metadata"]["creationTimestamp"] = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    return sts


def client(
    url: str,
    *,
    account: str = manifests.SCHEDULER,
    namespace: str = "qosched",
    agent: str | None = None,
):
    """A real ``ApiClient`` for ``url`` carrying ``namespace/account``'s ServiceAccount token
    (the scheduler's by default), as a pod's mounted token does."""
    result = api_client(url)
    result.configuration.api_key = {"authorization": token_of(namespace, account)}
    result.configuration.api_key_prefix = {"authorization": "Bearer"}
    if agent is not None:
        result.user_agent = agent
    return result


def scheduler(
    url: str, *, clock=None, identity: str = "a", settle: bool = True, **config
) -> K8sScheduler:
    """A scheduler on the fake at ``url``, its informers started, its Lease held by each round
    (no timer thread). With ``settle``, each round
    first waits until its caches hold what the server holds, so that these tests check its
    decisions on a known state (the races between them are the chaos test's)."""
    options = {"policy": "scripted", "tick_s": 1.0, "watch_timeout_s": 60}
    options.update(config)
    cfg = SchedulerConfig(identity=identity, **options)
    extra: dict = {"clock": clock, "monotonic": clock} if clock is not None else {}
    if cfg.policy == "scripted":
        extra["make_policy"] = Scripted
    result = K8sScheduler(client(url), cfg, **extra)
    result.start(lease=False)  # each round makes its own Lease attempt: no timer races here
    SERVERS[url].stopping.append(result.stop)
    if settle:
        step = result.step

        def settled_step():
            caught_up(result, SERVERS[url])
            return step()

        result.step = settled_step
    return result


def caught_up(sched: K8sScheduler, api, timeout_s: float = 10.0) -> None:
    """Wait until every running informer of ``sched`` holds the server's objects at their
    current versions."""
    wanted = [
        (sched.nodes, "nodes", None),
        (sched.pods, "pods", None),
        (sched.sets, "statefulsets", J.JOB_LABEL),
    ]
    deadline = time.monotonic() + timeout_s
    while True:
        behind = []
        for informer, kind, label in wanted:
            if informer._stop.is_set():
                continue  # a test froze this cache on purpose
            with api.lock:
                expected = {
                    k: o["metadata"]["resourceVersion"]
                    for k, o in api.objects[kind].items()
                    if label is None or label in (o["metadata"].get("labels") or {})
                }
            held = {k: o["metadata"]["resourceVersion"] for k, o in informer.snapshot().items()}
            if held != expected:
                behind.append((kind, set(held.items()) ^ set(expected.items())))
        if not behind:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"caches of {behind} did not catch up with the server")
        time.sleep(0.005)


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


def trainer_client(url: str, namespace: str, job: str):
    """A client with the token of the trainer ServiceAccount the manifests of job ``job`` give
    its pods in ``namespace``, the RBAC of those manifests applied on the server."""
    import dataclasses
    from pathlib import Path

    from qosched.trainingjob.jobspec import load_job_spec

    spec = load_job_spec(Path(__file__).resolve().parents[3] / "examples/k8s/cnn-cpu.yaml")
    spec = dataclasses.replace(spec, name=job)
    objects = manifests.job(spec, image="x", namespace=namespace, resource="cpu")
    SERVERS[url].allow(objects)
    account = next(o for o in objects if o["kind"] == "ServiceAccount")["metadata"]["name"]
    return client(url, account=account, namespace=namespace)


def writes_without_the_lease(api) -> list[str]:
    """Every write the server accepted from a scheduler replica (user agent ``qosched/ID``)
    while the last Lease record it had accepted named another holder or had expired by the
    server's clock; the Lease's own writes aside."""
    records = list(api.lease_log)
    bad = []
    for write in api.writes:
        if "/leases" in write.path or not write.agent.startswith("qosched/"):
            continue
        who = write.agent.removeprefix("qosched/")
        before = [r for r in records if r.at <= write.at]
        record = before[-1] if before else None
        if record is None or record.holder != who or write.at > record.at + record.duration_s:
            holder = None if record is None else (record.holder, round(write.at - record.at, 2))
            bad.append(f"{write.method} {write.path} by {who}; lease (holder, age): {holder}")
    return bad


def after_fence(sched: K8sScheduler, hook: Callable[[str, str], None]) -> None:
    """Call ``hook(method, url)`` in ``sched``'s writing thread each time a write has passed
    the Lease's fence check, just before it is sent: where a stalled process (a GC pause, a
    frozen VM) lets a deposed leader's write through late."""
    fenced = sched.apps.api_client  # the one client every fenced write goes through
    send, check = fenced.call_api, sched.lease.check
    pending = threading.local()

    def call_api(method, url, *args, **kwargs):
        pending.request = (method, url)
        return send(method, url, *args, **kwargs)

    def checked():
        check()
        hook(*pending.request)

    fenced.call_api = call_api
    sched.lease.check = checked


def _target(path: str) -> tuple[str, str | None, str] | None:
    """The object a write changes (kind, namespace, name), its subresource aside; None for a
    create (a new object: nothing to overwrite) and for the Lease."""
    found = route(path.split("?")[0])
    if found is None or found[2] is None or found[0] == "leases":
        return None
    return found[0], found[1], found[2]


def _replica(write: Write) -> str | None:
    return write.agent.removeprefix("qosched/") if write.agent.startswith("qosched/") else None


def unconditional_writes(api) -> list[str]:
    """Every write a scheduler replica made to an existing object without a precondition (a
    ``resourceVersion`` or a ``uid``): one that would land whatever was written since."""
    return [
        f"{w.method} {w.path} by {_replica(w)}"
        for w in api.writes
        if _replica(w) is not None and _target(w.path) is not None and not w.precondition
    ]


def stale_writes(api) -> list[str]:
    """Every write the server accepted from a replica that no longer held the Lease (its last
    record named another holder, or had expired by the server's clock) onto an object that
    another replica had written after that replica's last Lease record: a deposed leader's
    late write over what its successor decided, which it never saw. Independent of any
    precondition the write carried."""
    records, writes = list(api.lease_log), list(api.writes)
    bad = []
    for write in writes:
        who, target = _replica(write), _target(write.path)
        if who is None or target is None:
            continue
        before = [r for r in records if r.at <= write.at]
        if (
            before
            and before[-1].holder == who
            and write.at <= before[-1].at + before[-1].duration_s
        ):
            continue  # it held the Lease when the write landed
        mine = [r.at for r in before if r.holder == who]
        since = mine[-1] if mine else -float("inf")
        over = [
            f"{o.method} by {_replica(o)}"
            for o in writes
            if _target(o.path) == target
            and _replica(o) not in (None, who)
            and since < o.at < write.at
        ]
        if over:
            bad.append(f"{write.method} {write.path} by {who}, after {', '.join(over)}")
    return bad
