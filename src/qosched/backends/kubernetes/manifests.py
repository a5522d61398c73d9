"""What ``qosched k8s manifests`` and ``qosched k8s job`` print: plain Kubernetes objects.

:func:`deployment` is the scheduler's installation: a Namespace, a ServiceAccount, RBAC that
grants exactly the calls the scheduler makes, a ConfigMap with the scheduler's settings and a
Deployment of two replicas that elect a leader through a Lease.

:func:`job` turns a ``TrainingJob`` spec (the local backend's YAML, so one file serves both)
into a job StatefulSet (``Parallel`` pods, ``OnDelete`` updates, ``schedulerName: qosched``),
its headless Service (stable pod DNS names for the pods' rendezvous) and the trainer's
ServiceAccount, Role and RoleBinding. The Role lets the job's pods get and patch one pod: the
job's first (``NAME-0``), which reports the job's progress on its annotation. Progress is what
the scheduler admits and sizes by, so no pod may write another job's: a Role naming pods is the
only RBAC that says so (a Role cannot say "the caller's own pod").
"""

from __future__ import annotations

from typing import Any

import yaml

from qosched.backends.kubernetes import jobs as J
from qosched.backends.kubernetes.seal import KEY_SECRET
from qosched.core.bounds import MAX_BATCH, check_count
from qosched.core.errors import InputError
from qosched.trainingjob.jobspec import DEFAULT_LOG_LIMIT, DNS_LABEL, TrainingJobSpec
from qosched.trainingjob.protocol import torchrun_argv

#: The most GPUs one pod asks for: a node's, at most (``cluster.spec``'s per-node bound).
MAX_GPUS_PER_POD = 65_536

SCHEDULER = "qosched-scheduler"
#: The image ``make image`` builds from the repository's Dockerfile.
DEFAULT_IMAGE = "ghcr.io/qosched/qosched:0.1.0"
#: Where the scheduler serves /metrics, /healthz and /readyz.
HTTP_PORT = 8080
LABELS = {"app.kubernetes.io/name": "qosched", "app.kubernetes.io/component": "scheduler"}


def _rule(groups: list[str], resources: list[str], verbs: list[str]) -> dict[str, Any]:
    return {"apiGroups": groups, "resources": resources, "verbs": verbs}


#: Every API call the scheduler makes, and nothing else.
SCHEDULER_RULES = [
    _rule([""], ["nodes"], ["list", "watch"]),
    # list/watch every pod: a node's room counts other schedulers' pods too; delete: a pending
    # pod at an old size, a restart at a new size, a half-bound gang released.
    _rule([""], ["pods"], ["get", "list", "watch", "delete"]),
    _rule([""], ["pods/binding"], ["create"]),
    _rule([""], ["pods/resize"], ["patch"]),
    # PodScheduled=False with a reason on a pod waiting (for its gang, or a fix of its job).
    _rule([""], ["pods/status"], ["patch"]),
    _rule([""], ["events"], ["create"]),
    _rule(["apps"], ["statefulsets"], ["list", "watch", "patch"]),
]
#: In the scheduler's own namespace: its Lease, and the Secret that holds its admission key
#: (:mod:`.seal`), which it creates when absent and may read alone.
LEASE_RULES = [
    _rule(["coordination.k8s.io"], ["leases"], ["get", "create", "update"]),
    {**_rule([""], ["secrets"], ["get"]), "resourceNames": [KEY_SECRET]},
    _rule([""], ["secrets"], ["create"]),  # RBAC cannot name what a create makes
]


def trainer_rules(job: str) -> list[dict[str, Any]]:
    """A job's trainer may read and patch its reporting pod, and nothing else."""
    return [{**_rule([""], ["pods"], ["get", "patch"]), "resourceNames": [J.reporting_pod(job)]}]


def scheduler_config(
    *, resource: str, policy: str, throughputs: str | None, namespace: str
) -> dict[str, Any]:
    """The ConfigMap's ``config.yaml``: the fields of ``SchedulerConfig``."""
    config: dict[str, Any] = {
        "resource": resource,
        "policy": policy,
        "lease_namespace": namespace,
        "tick_s": 5.0,
        "lease_duration_s": 15,
        "restart_pause_s": 30.0,
        "http_port": HTTP_PORT,
    }
    if throughputs is not None:
        config["throughputs"] = throughputs
    return config


def deployment(
    *,
    namespace: str = "qosched",
    image: str = DEFAULT_IMAGE,
    resource: str = "gpu",
    policy: str = "qos",
    throughputs: str | None = None,
    replicas: int = 2,
) -> list[dict[str, Any]]:
    """The scheduler's objects, in the order ``kubectl apply`` needs them."""
    meta = {"namespace": namespace, "labels": dict(LABELS)}
    config = scheduler_config(
        resource=resource, policy=policy, throughputs=throughputs, namespace=namespace
    )
    subject = [{"kind": "ServiceAccount", "name": SCHEDULER, "namespace": namespace}]
    container = {
        "name": "scheduler",
        "image": image,
        "command": ["qosched", "k8s", "run", "--config", "/etc/qosched/config.yaml"],
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "MPLCONFIGDIR", "value": "/tmp"},  # the root filesystem is read-only
        ],
        "ports": [{"name": "http", "containerPort": HTTP_PORT}],
        # Alive while the scheduling loop turns; ready once its caches are listed (a follower
        # is ready too: it takes over at once when the leader goes).
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": "http"},
            "initialDelaySeconds": 10,
            "periodSeconds": 10,
            "failureThreshold": 3,
        },
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": "http"},
            "periodSeconds": 5,
        },
        "resources": {
            "requests": {"cpu": "100m", "memory": "256Mi"},
            "limits": {"memory": "1Gi"},
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "config", "mountPath": "/etc/qosched", "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},  # the root filesystem is read-only
        ],
    }
    return [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": namespace, "labels": dict(LABELS)},
        },
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SCHEDULER, **meta}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": SCHEDULER, "labels": dict(LABELS)},
            "rules": SCHEDULER_RULES,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": SCHEDULER, "labels": dict(LABELS)},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": SCHEDULER,
            },
            "subjects": subject,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": SCHEDULER, **meta},
            "rules": LEASE_RULES,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": SCHEDULER, **meta},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": SCHEDULER},
            "subjects": subject,
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": SCHEDULER, **meta},
            "data": {"config.yaml": yaml.safe_dump(config, sort_keys=False)},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": SCHEDULER, **meta},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": dict(LABELS)},
                "template": {
                    "metadata": {
                        "labels": dict(LABELS),
                        "annotations": {
                            "prometheus.io/scrape": "true",
                            "prometheus.io/port": str(HTTP_PORT),
                            "prometheus.io/path": "/metrics",
                        },
                    },
                    "spec": {
                        "serviceAccountName": SCHEDULER,
                        "securityContext": {"runAsNonRoot": True, "runAsUser": 65532},
                        "containers": [container],
                        "volumes": [
                            {"name": "config", "configMap": {"name": SCHEDULER}},
                            {"name": "tmp", "emptyDir": {}},
                        ],
                    },
                },
            },
        },
    ]


def job(
    spec: TrainingJobSpec,
    *,
    image: str,
    namespace: str = "default",
    resource: str = "gpu",
    gpus_per_pod: int = 1,
    replicas: int | None = None,
    model: str | None = None,
    batch_size: int | None = None,
    command: list[str] | None = None,
    working_dir: str | None = None,
) -> list[dict[str, Any]]:
    """A job's objects from a ``TrainingJob`` spec. ``command`` (default: the spec's command,
    under its launcher, else ``qosched`` running the spec's built-in workload) runs in every
    pod, each word as given (see ``literal``), in ``working_dir`` (default the spec's), a
    folder of the image: absolute, or relative to the image's working directory; ``model``
    and ``batch_size`` name the speed-table row (default: the spec's workload).

    A spec that states GPUs (``minGpus``) is a GPU job: its ``minGpus`` is what it requests and
    its ``maxGpus`` the most it may be given, and it starts on enough pods of ``gpus_per_pod``
    for ``minGpus`` unless ``replicas`` says otherwise. A spec that states only cores runs as a
    GPU job of its cores (``requestedCpus``, at least ``minCpus``, at most ``maxCpus``), or,
    with ``resource="cpu"``, as one pod re-sized. A field the pods cannot honour is refused
    by name (``spec.logLimit``: ``REFUSED_FIELDS``), never left out."""
    replicas = _check_job_options(spec, namespace, resource, gpus_per_pod, replicas, batch_size)
    _, most = spec.resources.bounds()
    if working_dir is None:
        working_dir = spec.working_dir
    argv = _container_command(
        command or _pod_command(spec, gpus_per_pod, replicas, most), working_dir
    )
    annotations = _job_annotations(spec, model, batch_size, most)
    requests: dict[str, str] = {"cpu": str(spec.resources.min_cpus) if resource == "cpu" else "1"}
    if spec.resources.memory_bytes is not None:
        requests["memory"] = str(spec.resources.memory_bytes)
    if resource == "gpu":
        requests[J.GPU_RESOURCE] = str(gpus_per_pod)
    labels = {J.JOB_LABEL: spec.name}
    meta = {"name": spec.name, "namespace": namespace, "labels": labels}
    env = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "QOSCHED_JOB", "value": spec.name},
        *({"name": name, "value": literal(value)} for name, value in spec.env.items()),
    ]
    trainer = f"{spec.name}-trainer"
    absolute = working_dir is not None and working_dir.startswith("/")
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": trainer, "namespace": namespace, "labels": labels},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": trainer, "namespace": namespace, "labels": labels},
            "rules": trainer_rules(spec.name),
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": trainer, "namespace": namespace, "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": trainer},
            "subjects": [{"kind": "ServiceAccount", "name": trainer, "namespace": namespace}],
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": meta,
            "spec": {
                "clusterIP": "None",
                "selector": labels,
                "ports": [{"name": "rendezvous", "port": RENDEZVOUS_PORT}],
            },
        },
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {**meta, "annotations": annotations},
            "spec": {
                "replicas": replicas,
                "serviceName": spec.name,
                "podManagementPolicy": "Parallel",
                "updateStrategy": {"type": "OnDelete"},
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "schedulerName": "qosched",
                        "serviceAccountName": trainer,
                        "terminationGracePeriodSeconds": 60,  # time to write a checkpoint
                        "containers": [
                            {
                                "name": "train",
                                "image": image,
                                "command": argv,
                                **({"workingDir": working_dir} if absolute else {}),
                                "env": env,
                                # requests = limits: a Guaranteed pod, which an in-place
                                # re-size of CPU (both at once) keeps Guaranteed.
                                "resources": {"requests": requests, "limits": dict(requests)},
                                "resizePolicy": [
                                    {"resourceName": "cpu", "restartPolicy": "NotRequired"}
                                ],
                                "volumeMounts": [
                                    {"name": "checkpoint", "mountPath": "/checkpoint"}
                                ],
                            }
                        ],
                    },
                },
                # One volume per pod ordinal, kept across restarts and re-sizes: the checkpoint.
                "volumeClaimTemplates": [
                    {
                        "metadata": {"name": "checkpoint"},
                        "spec": {
                            "accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": "1Gi"}},
                        },
                    }
                ],
            },
        },
    ]


def _check_job_options(
    spec: TrainingJobSpec,
    namespace: str,
    resource: str,
    gpus_per_pod: int,
    replicas: int | None,
    batch_size: int | None,
) -> int:
    """Refuse what :func:`job` cannot make (by name); the pods to start with."""
    if spec.resources.gpu and resource == "cpu":
        raise InputError(
            "the spec asks for GPUs (minGpus); make it a GPU job (resource gpu)", field="resource"
        )
    check_count(gpus_per_pod, field="gpus_per_pod", minimum=1, maximum=MAX_GPUS_PER_POD)
    least, _ = spec.resources.bounds()
    if replicas is None:
        replicas = -(-least // gpus_per_pod)
    check_count(replicas, field="replicas", minimum=1, maximum=J.WORKERS_LIMIT)
    if not isinstance(namespace, str) or not DNS_LABEL.fullmatch(namespace):
        raise InputError(
            f"expected a Kubernetes namespace (lower case letters, digits, '-'), got {namespace!r}",
            field="namespace",
        )
    if batch_size is not None:
        check_count(batch_size, field="batch_size", minimum=1, maximum=MAX_BATCH)
    _refuse_what_pods_cannot_honour(spec, resource)
    return 1 if resource == "cpu" else replicas  # a CPU job is one pod, re-sized


def _container_command(argv: list[str], working_dir: str | None) -> list[str]:
    """The container's command, each word as given (``literal``), in ``working_dir``."""
    if working_dir is not None and not working_dir.startswith("/"):
        # A container's workingDir must be absolute; a relative one is the image's
        # working directory's, which only the container knows: a shell goes there first.
        argv = ["sh", "-c", 'cd -- "$1" && shift && exec "$@"', "qosched-cd", working_dir, *argv]
    return [literal(word) for word in argv]


def _job_annotations(
    spec: TrainingJobSpec, model: str | None, batch_size: int | None, most: int | None
) -> dict[str, str]:
    """The StatefulSet's ``qosched.io/`` annotations: the job's terms for the scheduler."""
    annotations = {
        J.ITERATIONS: str(spec.iterations),
        J.DEADLINE: spec.deadline.to_text(),
        J.BEST_EFFORT: "true" if spec.best_effort else "false",
        J.REQUESTED_WORKERS: str(
            spec.resources.min_gpus if spec.resources.gpu else spec.requested_cpus
        ),
    }
    if model or spec.workload:
        annotations[J.MODEL] = model or str(spec.workload)
    if batch_size is None and spec.workload is not None and model is None:
        from qosched.workloads import get_workload  # imports torch: only when needed

        batch_size = get_workload(spec.workload).default_batch_size  # its speed-table row
    if batch_size is not None:
        annotations[J.BATCH_SIZE] = str(batch_size)
    if most is not None:
        annotations[J.MAX_WORKERS] = str(most)
    return annotations


#: Variables the job's pods get from qosched (``POD_NAME``, ``POD_NAMESPACE``, ``QOSCHED_JOB``;
#: ``QOSCHED_*`` and ``CUDA_VISIBLE_DEVICES`` are refused when the spec is read).
POD_ENV = ("POD_NAME", "POD_NAMESPACE")
#: Spec fields a job's pods cannot honour, refused with these words.
REFUSED_FIELDS = {
    "logLimit": "has no meaning on Kubernetes: a container's log is the kubelet's, rotated at "
    "its node's containerLogMaxSize; remove it",
    "speedKey": "has no meaning on Kubernetes yet: the scheduler learns each job's speed from "
    "its own progress and remembers none across jobs; remove it",
}
#: The port of the job's headless Service where torchrun's ranks meet (``rendezvous``).
RENDEZVOUS_PORT = 29500


def literal(text: str) -> str:
    """``text`` as a container's command or env value that the kubelet passes on as it is: it
    expands ``$(VAR)`` there and reduces ``$$`` to ``$``, so every ``$`` is doubled."""
    return text.replace("$", "$$")


def _refuse_what_pods_cannot_honour(spec: TrainingJobSpec, resource: str) -> None:
    if spec.log_limit_bytes != DEFAULT_LOG_LIMIT:
        raise InputError(REFUSED_FIELDS["logLimit"], field="spec.logLimit")
    if spec.speed_key is not None:
        raise InputError(REFUSED_FIELDS["speedKey"], field="spec.speedKey")
    for name in spec.env:
        if name in POD_ENV:
            raise InputError(
                f"{name} is set by qosched itself (the pod's downward API); remove it",
                field=f"spec.env.{name}",
            )
    if spec.launcher is not None and resource == "cpu":
        raise InputError(
            f"launcher {spec.launcher} starts a fixed number of processes, and a CPU job's pod is "
            "re-sized in place while it runs; make it a GPU job (resource gpu: one process per "
            "GPU of each pod)",
            field="spec.launcher",
        )
    if spec.command is not None and spec.seed:
        raise InputError(
            "applies to the built-in workloads (spec.workload); a command takes its seed "
            "in its own arguments",
            field="spec.seed",
        )


def _pod_command(
    spec: TrainingJobSpec, gpus_per_pod: int, replicas: int, most: int | None
) -> list[str]:
    """What a job's pod runs: the spec's command (under its launcher), else the trainer."""
    if spec.command is None:
        argv = ["qosched", "k8s", "train", "--workload", str(spec.workload)]
        argv += ["--iterations", str(spec.iterations)]
        return argv + (["--seed", str(spec.seed)] if spec.seed else [])
    if spec.launcher is None:
        return list(spec.command)
    # One process per GPU of the pod. A job that may grow past one pod meets on its first
    # (NAME-0, through the headless Service) and restarts its ranks when pods come and go.
    pods = -(-most // gpus_per_pod) if most is not None else J.WORKERS_LIMIT
    if max(pods, replicas) == 1:
        rendezvous: tuple[str, ...] = ("--standalone",)
    else:
        endpoint = f"{J.reporting_pod(spec.name)}.{spec.name}:{RENDEZVOUS_PORT}"
        rendezvous = ("--nnodes", f"1:{max(pods, replicas)}", "--rdzv-backend", "c10d")
        rendezvous += ("--rdzv-endpoint", endpoint, "--rdzv-id", spec.name)
    return torchrun_argv(
        spec.command, python="python", processes=gpus_per_pod, rendezvous=rendezvous
    )


class _PlainDumper(yaml.SafeDumper):
    """Writes shared sub-objects out in full: no YAML anchors in files people read."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def to_yaml(objects: list[dict[str, Any]]) -> str:
    """A multi-document YAML stream, as ``kubectl apply -f -`` reads it."""
    return yaml.dump_all(objects, Dumper=_PlainDumper, sort_keys=False)
