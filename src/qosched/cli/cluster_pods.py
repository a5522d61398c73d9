"""``qosched trace import --from alibaba-gpu-2023`` and ``qosched sim cluster`` on a pod trace:
pods placed on GPU nodes by FGD and its baselines (``qosched.cluster.pods``)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from qosched.cli.outputs import output_file
from qosched.cli.progress import progress_display
from qosched.core.errors import InputError

DEFAULT_POLICY = "fgd"


def run_pod_import(args: argparse.Namespace) -> int:
    """Alibaba's pod list, checked, written as qosched's pod trace."""
    from qosched.cluster.pods.trace import import_alibaba_gpu_2023, write_pod_trace

    output_file(args.out, "--out")
    pods = import_alibaba_gpu_2023(args.source)
    write_pod_trace(pods, args.out)
    sharing = sum(1 for pod in pods if pod.shares_gpu)
    print(
        f"{len(pods)} pods written to {args.out} ({sharing} share a GPU)",
        file=sys.stderr,
    )
    return 0


def pod_policies(values: Sequence[str] | None) -> list[str]:
    """The pod placement policies named by ``--policy`` (comma lists, ``all``), checked."""
    from qosched.cluster.pods.policies import pod_policy_class, pod_policy_names

    names: list[str] = []
    for value in values or [DEFAULT_POLICY]:
        for name in value.split(","):
            name = name.strip()
            if name == "all":
                names.extend(n for n in pod_policy_names() if n not in names)
            elif name and name not in names:
                pod_policy_class(name)  # an unknown name lists the known ones
                names.append(name)
    if not names:
        raise InputError("no policy given", field="--policy")
    return names


def run_pod_sim(args: argparse.Namespace) -> int:
    """Each policy places the trace's pods in arrival order on the node list's nodes."""
    from qosched.cluster.pods.fragmentation import TaskMix
    from qosched.cluster.pods.nodes import read_node_list
    from qosched.cluster.pods.policies import create_pod_policy
    from qosched.cluster.pods.sim import place_pods
    from qosched.cluster.pods.trace import read_pod_trace

    for flag, value in (
        ("--nodes", args.nodes),
        ("--gpus-per-node", args.gpus_per_node),
        ("--cpus-per-node", args.cpus_per_node),
        ("--plot", args.plot),
        ("--jobs-csv", args.jobs_csv),
    ):
        if value is not None:
            raise InputError(
                f"{flag} does not apply to a pod trace; give its node list as --cluster-spec"
            )
    if args.cluster_spec is None:
        raise InputError(
            "a pod trace is placed on a node list: give --cluster-spec "
            "(e.g. openb_node_list_gpu_node.csv)"
        )
    names = pod_policies(args.policy)
    cluster = read_node_list(args.cluster_spec)
    trace = read_pod_trace(args.trace)
    # Arrival order; pods created at the same second keep the trace's order.
    pods = sorted(trace, key=lambda pod: pod.creation_s)
    workload = TaskMix.typical(pods)
    runs = []
    with progress_display() as progress:
        for name in names:
            task = progress.add_task(name, total=len(pods), unit="pods")

            def on_progress(done: int, total: int, task: int = task) -> None:
                if done % 200 == 0 or done == total:
                    progress.update(task, completed=done)

            runs.append(
                place_pods(
                    cluster,
                    pods,
                    create_pod_policy(name, workload),
                    seed=args.seed,
                    on_progress=on_progress,
                )
            )
    if args.json:
        objects = [run.to_json() for run in runs]
        print(json.dumps(objects[0] if len(objects) == 1 else {"runs": objects}))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"{Path(args.trace).name}: {len(pods)} pods on {cluster.describe()}",
        title_justify="left",
    )
    for header in (
        "policy",
        "placed",
        "failed",
        "unallocated GPUs",
        "at 1st failure",
        "fragmented GPUs",
        "sim s",
    ):
        table.add_column(header, justify="left" if header == "policy" else "right")
    for run in runs:
        first = run.unallocated_gpus_at_first_failure
        table.add_row(
            run.policy,
            str(run.placed),
            str(run.failed),
            f"{run.unallocated_gpus:.1f}",
            "-" if first is None else f"{first:.1f}",
            f"{run.fragmented_gpus:.1f}",
            f"{run.wall_s:.2f}",
        )
    console = Console() if sys.stdout.isatty() else Console(width=160)
    console.print(table)
    return 0
