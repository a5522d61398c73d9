"""``qosched k8s``: the Kubernetes backend's commands.

``manifests`` prints the scheduler's installation, ``job SPEC`` a job's objects from a
``TrainingJob`` spec, ``run`` runs the scheduler (in its Deployment, or from a laptop through a
kubeconfig), ``train`` is what a job's pods run for the built-in workloads. The Kubernetes
client is imported only when a command needs it.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import yaml

from qosched.cluster.spec import RESOURCES
from qosched.core.errors import InputError
from qosched.trainingjob.jobspec import parse_container_job_spec, read_spec_text


def add_commands(groups: argparse._SubParsersAction) -> None:
    """Register ``qosched k8s ...`` on the top-level sub-command group."""
    k8s = groups.add_parser("k8s", help="run qosched on a Kubernetes cluster")
    commands = k8s.add_subparsers(dest="command", required=True, metavar="ACTION")

    manifests = commands.add_parser(
        "manifests",
        help="print the scheduler's Namespace, RBAC, ConfigMap and Deployment",
        description="Print the objects that install the qosched scheduler; apply them with "
        "`qosched k8s manifests | kubectl apply -f -`.",
    )
    manifests.add_argument(
        "--namespace", default="qosched", help="the namespace to install into (default qosched)"
    )
    manifests.add_argument("--image", default=None, help="the scheduler's container image")
    manifests.add_argument(
        "--resource",
        choices=RESOURCES,
        default="gpu",
        help="what a worker is: one GPU or one CPU core (default gpu)",
    )
    manifests.add_argument(
        "--policy", default="qos", help="the scheduling policy the scheduler runs (default qos)"
    )
    manifests.add_argument(
        "--throughputs",
        default=None,
        help="bundled speed tables (default A100 for GPUs, CPU for cores)",
    )
    manifests.add_argument(
        "--replicas",
        type=int,
        default=2,
        help="scheduler replicas; one leads at a time (default 2)",
    )
    manifests.set_defaults(run=_manifests)

    job = commands.add_parser(
        "job",
        help="print a job's StatefulSet, Service and RBAC from a TrainingJob spec",
        description="Turn a TrainingJob YAML (the same file `qosched submit` takes) into the "
        "objects of a qosched job on Kubernetes. Its workingDir is a folder of the image "
        "(a relative one, of the image's working directory); a field the pods cannot honour "
        "is refused by name.",
    )
    job.add_argument("spec", type=Path, metavar="SPEC", help="a TrainingJob YAML spec")
    job.add_argument("--image", required=True, help="the training container image")
    job.add_argument(
        "--namespace",
        default="default",
        help="the namespace of the job's objects (default default)",
    )
    job.add_argument(
        "--resource",
        choices=RESOURCES,
        default="gpu",
        help="what a worker is: one GPU or one CPU core (default gpu)",
    )
    job.add_argument(
        "--gpus-per-pod", type=int, default=1, help="GPUs each pod asks for (default 1)"
    )
    job.add_argument(
        "--replicas",
        type=int,
        default=None,
        help="pods to start with (GPU jobs; default: enough for the spec's minGpus, else 1)",
    )
    job.add_argument("--model", default=None, help="speed-table model (default: the workload)")
    job.add_argument(
        "--batch-size", type=int, default=None, help="batch size (default: the workload's own)"
    )
    job.set_defaults(run=_job)

    run = commands.add_parser(
        "run",
        help="run the scheduler",
        description="Schedule the cluster's qosched jobs until SIGTERM. Inside the cluster it "
        "uses the pod's service account; elsewhere --kubeconfig or --host.",
    )
    run.add_argument(
        "--config",
        type=Path,
        default=None,
        help="YAML of scheduler settings (the ConfigMap's config.yaml)",
    )
    run.add_argument(
        "--kubeconfig", default=None, help="a kubeconfig file (default: in-cluster, else ~/.kube)"
    )
    run.add_argument(
        "--host", default=None, help="an API server URL without credentials (kubectl proxy)"
    )
    run.add_argument(
        "--identity",
        default=None,
        help="this replica's name in the Lease (default: $POD_NAME, else host-pid)",
    )
    run.add_argument("--once", action="store_true", help="one scheduling round, then exit")
    run.add_argument(
        "--log-level",
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        type=str.upper,
        default="INFO",
        help="the scheduler's log level (default INFO)",
    )
    run.add_argument(
        "--http-port",
        type=int,
        default=None,
        help="serve /metrics, /healthz and /readyz here (default: the config's http_port, "
        "8080; 0 = none)",
    )
    run.set_defaults(run=_run)

    train = commands.add_parser(
        "train",
        help="train a built-in workload as a job's pod (reports progress, checkpoints)",
    )
    train.add_argument(
        "--workload", required=True, help="the built-in workload: cnn or transformer"
    )
    train.add_argument("--iterations", type=int, required=True, help="the whole work")
    train.add_argument(
        "--checkpoint-dir",
        type=Path,
        default=Path("/checkpoint"),
        help="where checkpoints are kept across restarts (default /checkpoint)",
    )
    train.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    train.set_defaults(run=_train)


def _manifests(args: argparse.Namespace) -> int:
    from qosched.backends.kubernetes import manifests

    objects = manifests.deployment(
        namespace=args.namespace,
        image=args.image or manifests.DEFAULT_IMAGE,
        resource=args.resource,
        policy=args.policy,
        throughputs=args.throughputs,
        replicas=args.replicas,
    )
    sys.stdout.write(manifests.to_yaml(objects))
    return 0


def _job(args: argparse.Namespace) -> int:
    from qosched.backends.kubernetes import manifests

    text = read_spec_text(args.spec)
    # The command runs in the image: its workingDir and scripts are the image's, not here.
    read = parse_container_job_spec(text, args.spec, refused=manifests.REFUSED_FIELDS)
    try:
        objects = manifests.job(
            read.spec,
            working_dir=read.working_dir,
            image=args.image,
            namespace=args.namespace,
            resource=args.resource,
            gpus_per_pod=args.gpus_per_pod,
            replicas=args.replicas,
            model=args.model,
            batch_size=args.batch_size,
        )
    except InputError as exc:
        if exc.source is None and (exc.field or "").startswith("spec."):
            # A field of the file the pods cannot honour: name the file too.
            raise InputError(exc.reason, source=args.spec, field=exc.field) from exc
        raise
    sys.stdout.write(manifests.to_yaml(objects))
    return 0


def load_config(path: Path | None, **overrides: Any):
    """``SchedulerConfig`` from a YAML file of its fields; an unknown key names the file."""
    from qosched.backends.kubernetes.config import SchedulerConfig

    values: dict[str, Any] = {}
    if path is not None:
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise InputError(f"cannot read the scheduler config: {exc}", source=path) from exc
        if not isinstance(data, dict):
            raise InputError("expected a mapping of settings", source=path)
        known = {f.name for f in dataclasses.fields(SchedulerConfig)}
        for key, value in data.items():
            if key not in known:
                raise InputError(
                    f"unknown setting; known: {', '.join(sorted(known))}", source=path, field=key
                )
            values[key] = value
    values.update({k: v for k, v in overrides.items() if v is not None})
    return SchedulerConfig(**values)


def _run(args: argparse.Namespace) -> int:
    import os

    from qosched.backends.kubernetes.kube import api_client
    from qosched.backends.kubernetes.scheduler import K8sScheduler

    logging.basicConfig(
        level=getattr(logging, args.log_level),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    config = load_config(
        args.config,
        identity=args.identity or os.environ.get("POD_NAME"),
        http_port=args.http_port,
    )
    scheduler = K8sScheduler(api_client(args.host, kubeconfig=args.kubeconfig), config)
    if args.once:
        scheduler.start(lease=False)
        try:
            report = scheduler.step()
        finally:
            scheduler.stop()
        print(report, file=sys.stderr)
        return 0
    if config.http_port:
        from qosched.backends.kubernetes.observe import serve

        serve(
            config.http_port,
            scheduler.metrics,
            healthy=scheduler.heartbeat.alive,
            ready=scheduler.ready,
        )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    scheduler.run(stop)
    return 0


def _train(args: argparse.Namespace) -> int:
    from qosched.backends.kubernetes.progress import ProgressReporter
    from qosched.backends.kubernetes.trainer import train

    logging.basicConfig(level=logging.INFO)
    train(args.workload, args.iterations, args.checkpoint_dir, ProgressReporter(), seed=args.seed)
    return 0
