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


#: The catalog GPU whose kernel estimates give the models' costs when none is named.
DEFAULT_GPU = "A100"
#: The options of ``sim cluster`` that only a pod trace with workloads reads.
REPLAY_OPTIONS = ("--window-s", "--sharing", "--colocation", "--queue", "--gpu")


def run_pod_import(args: argparse.Namespace) -> int:
    """Alibaba's pod list, checked, written as qosched's pod trace (with workloads by the
    seeded rule of ``cluster.pods.assign`` when ``--workloads``)."""
    from qosched.cluster.pods.trace import import_alibaba_gpu_2023, write_pod_trace

    output_file(args.out, "--out")
    if args.gpu is not None and not args.workloads:
        raise InputError("--gpu sets the services' rates: give --workloads too")
    pods = import_alibaba_gpu_2023(args.source)
    if args.workloads:
        from qosched import colocate
        from qosched.cluster.pods.assign import assign_workloads

        cost = colocate.estimated_costs(args.gpu or DEFAULT_GPU)
        pods = assign_workloads(pods, lambda model, batch: cost(model, batch).request_s,
                                args.seed)  # fmt: skip
    write_pod_trace(pods, args.out)
    sharing = sum(1 for pod in pods if pod.shares_gpu)
    kinds = ""
    if args.workloads:
        services = sum(1 for pod in pods if pod.workload is not None and pod.workload.kind
                       == "service")  # fmt: skip
        training = sum(1 for pod in pods if pod.workload is not None) - services
        kinds = f"; {services} services, {training} training"
    print(
        f"{len(pods)} pods written to {args.out} ({sharing} share a GPU{kinds})",
        file=sys.stderr,
    )
    return 0


def add_pod_options(parser: argparse.ArgumentParser) -> None:
    """``sim cluster``'s options for a pod trace with workloads (services, training)."""
    from qosched.cluster.pods.replay import COLOCATIONS, DEFAULT_WINDOW_S, QUEUES

    parser.add_argument(
        "--window-s",
        type=float,
        help="pod trace with workloads: the window a service's goal is judged over "
        f"(default {DEFAULT_WINDOW_S:g})",
    )
    parser.add_argument(
        "--sharing",
        choices=("fggr", "time-slicing"),
        help="pod trace with workloads: how a GPU's parties slow each other (fggr, the "
        "co-location surrogate: default; time-slicing: n parties, n times slower)",
    )
    parser.add_argument(
        "--colocation",
        choices=tuple(COLOCATIONS),
        help="pod trace with workloads: which pods may share a GPU (any: default; apart: "
        "services only with services; goals: where the prediction keeps every goal; "
        "harvest: goals at the services' peak rates, services evict training, deadlines "
        "promised on the pessimistic speed)",
    )
    parser.add_argument(
        "--queue",
        choices=QUEUES,
        help="pod trace with workloads: the order waiting pods are tried in when a pod leaves "
        "(arrival: default; priority: the workloads' priority, highest first)",
    )
    parser.add_argument(
        "--gpu",
        help=f"pod trace with workloads: catalog GPU whose kernel estimates give the models' "
        f"costs (default {DEFAULT_GPU})",
    )


def _replay_values(args: argparse.Namespace) -> list[tuple[str, object]]:
    return [(flag, getattr(args, flag[2:].replace("-", "_"))) for flag in REPLAY_OPTIONS]


def refuse_pod_options(args: argparse.Namespace) -> None:
    """A job trace refuses the options only a pod trace reads."""
    for flag, value in _replay_values(args):
        if value is not None:
            raise InputError(f"{flag} applies to a pod trace with workloads only")


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
    with_workloads = any(pod.workload is not None for pod in pods)
    if not with_workloads:
        for flag, value in [*_replay_values(args), ("--plot", args.plot)]:
            if value is not None:
                raise InputError(
                    f"{flag} applies to a pod trace with workloads only (trace import "
                    "--workloads, or the workload columns of docs/contracts.md)"
                )
    replayed = _replayer(args, cluster, pods) if with_workloads else None
    runs, replays = [], []
    with progress_display() as progress:
        for name in names:
            task = progress.add_task(name, total=len(pods), unit="pods")

            def on_progress(done: int, total: int, task: int = task) -> None:
                if done % 200 == 0 or done == total:
                    progress.update(task, completed=done)

            policy = create_pod_policy(name, workload)
            runs.append(place_pods(cluster, pods, policy, seed=args.seed,
                                   on_progress=on_progress))  # fmt: skip
            if replayed is not None:
                replays.append(replayed(create_pod_policy(name, workload)))
    plot_path = None
    if args.plot:
        from qosched.report.pod_plots import plot_pod_runs  # matplotlib only when asked

        plot_path = plot_pod_runs(replays, args.plot, f"{Path(args.trace).name}")
    if args.json:
        objects = [
            {**run.to_json(), **(replays[i].to_json() if replays else _NO_REPLAY)}
            for i, run in enumerate(runs)
        ]
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
    if replays:
        console.print(_replay_table(replays))
    if plot_path is not None:
        print(f"plots: {plot_path}", file=sys.stderr)
    return 0


#: The replay's keys of a run when the trace has no workloads.
_NO_REPLAY = dict.fromkeys(
    ("sharing", "colocation", "queue", "window_s", "services", "training", "cluster")
)


def _replayer(args: argparse.Namespace, cluster, pods):
    """What runs one policy over the trace's clock with the command's options."""
    from qosched.cluster.pods.costs import TimeSlicedSharing
    from qosched.cluster.pods.replay import DEFAULT_WINDOW_S
    from qosched.cluster.pods.replays import replay
    from qosched.colocate import SurrogateSharing, estimated_costs
    from qosched.core.bounds import check_number
    from qosched.gpushare.colocation import bundled

    window = DEFAULT_WINDOW_S
    if args.window_s is not None:
        window = check_number(args.window_s, field="--window-s", minimum=1e-3, maximum=1e9)
    sharing = TimeSlicedSharing() if args.sharing == "time-slicing" else SurrogateSharing(bundled())
    costs = estimated_costs(args.gpu or DEFAULT_GPU)
    for pod in pods:  # every model estimated before the first run: a bad one fails at once
        if pod.workload is not None:
            costs(pod.workload.model, pod.workload.batch)

    def run(policy):
        return replay(cluster, pods, policy, costs=costs, sharing=sharing,
                      colocation=args.colocation or "any", window_s=window,
                      seed=args.seed, queue=args.queue or "arrival")  # fmt: skip

    return run


def _replay_table(replays):
    from rich.table import Table

    first = replays[0]
    table = Table(
        title=f"over the trace's clock: {first.sharing} sharing, colocation {first.colocation}, "
        f"{first.queue} queue, windows of {first.window_s:g} s",
        title_justify="left",
    )
    headers = ("policy", "windows met", "services >= 99%", "DSR", "JCT s", "mean allocated",
               "mean fragmented", "utilization", "sim s")  # fmt: skip
    for header in headers:
        table.add_column(header, justify="left" if header == "policy" else "right")

    def show(value, form):
        return "-" if value is None else format(value, form)

    for run in replays:
        services = run.services_json() or {}
        training = run.training_json() or {}
        cluster = run.cluster_json()
        table.add_row(
            run.policy,
            show(services.get("windows_met_ratio"), ".1%"),
            show(services.get("services_meeting_99_ratio"), ".1%"),
            show(training.get("deadline_satisfactory_ratio"), ".1%"),
            show(training.get("avg_jct_s"), ".0f"),
            show(cluster["mean_allocated_gpus"], ".1f"),
            show(cluster["mean_fragmented_gpus"], ".1f"),
            show(cluster["gpu_utilization"], ".1%"),
            f"{run.wall_s:.2f}",
        )
    return table
