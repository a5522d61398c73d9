"""``qosched sim cluster``, ``qosched trace generate`` and ``qosched demo``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qosched.cli.outputs import output_dir, output_file
from qosched.cli.progress import progress_display
from qosched.cluster import importers
from qosched.cluster.fidelity import FIDELITIES, configure
from qosched.cluster.generate import GeneratorConfig, generate_trace
from qosched.cluster.metrics import Summary, summarize_runs, write_job_csv
from qosched.cluster.pods.trace import ALIBABA_GPU_2023
from qosched.cluster.policies import create_policy, policy_names
from qosched.cluster.policies.chronus import SELECTIONS
from qosched.cluster.policies.qos import SPARE_ORDERS
from qosched.cluster.simulator import SimConfig, SimResult, simulate
from qosched.cluster.spec import RESOURCES, ClusterSpec, read_cluster_spec
from qosched.cluster.throughput import BUNDLED, ThroughputModel
from qosched.cluster.traces import Trace, read_trace, write_trace
from qosched.core.errors import InputError

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

HOUR = 3600.0


# -- shared options -------------------------------------------------------------------------------


def _throughputs(value: str) -> ThroughputModel:
    """A bundled table set (A100, T4, CPU) or a directory of tables."""
    if value in BUNDLED:
        return ThroughputModel.bundled(value)
    return ThroughputModel.load(value)


def _policies(values: Sequence[str]) -> list[str]:
    names: list[str] = []
    for value in values:
        for name in value.split(","):
            name = name.strip()
            if name == "all":
                names.extend(n for n in policy_names() if n not in names)
            elif name and name not in names:
                create_policy(name)  # fails early, listing the known names
                names.append(name)
    if not names:
        raise InputError("no policy given", field="--policy")
    return names


def _cluster(args: argparse.Namespace) -> ClusterSpec:
    """The cluster from --cluster-spec or --nodes with the per-node flag of --resource."""
    per_node_flag = "--cpus-per-node" if args.resource == "cpu" else "--gpus-per-node"
    per_node = args.cpus_per_node if args.resource == "cpu" else args.gpus_per_node
    other = args.gpus_per_node if args.resource == "cpu" else args.cpus_per_node
    if other is not None:
        wrong = "--gpus-per-node" if args.resource == "cpu" else "--cpus-per-node"
        hint = "" if args.resource == "cpu" else " (for a CPU cluster add --resource cpu)"
        raise InputError(
            f"{wrong} does not apply to a {args.resource.upper()} cluster; "
            f"give {per_node_flag}{hint}"
        )
    if args.cluster_spec is not None:
        if args.nodes is not None or per_node is not None:
            raise InputError(f"give --cluster-spec or --nodes/{per_node_flag}, not both")
        return read_cluster_spec(args.cluster_spec, resource=args.resource)
    if args.nodes is None or per_node is None:
        raise InputError(f"give --cluster-spec PATH, or both --nodes N and {per_node_flag} N")
    if args.nodes < 1 or per_node < 1:
        raise InputError(f"--nodes and {per_node_flag} must be >= 1")
    return ClusterSpec.from_flags(args.nodes, per_node, resource=args.resource)


def _err_console() -> Console:
    # NOTE: rich is imported where it is used: `sim cluster --json` prints no table and shows
    # no bar, and the whole command is timed against the peers' own simulators
    # (bench/cluster_sim_speed.py).
    from rich.console import Console

    return Console(stderr=True)


def run_policies(
    cluster: ClusterSpec,
    throughputs: ThroughputModel,
    trace: Trace,
    names: Sequence[str],
    config: SimConfig,
    show_progress: bool,
    fidelity: str = "sound",
    policy_options: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[SimResult]:
    """Run each policy on the trace, with a progress bar on stderr when asked; ``fidelity``
    as in :mod:`qosched.cluster.fidelity`; ``policy_options`` a policy's own options by its
    name."""
    results = []
    with progress_display(enabled=show_progress) as progress:
        for name in names:
            task = progress.add_task(name, total=len(trace.jobs), unit="jobs")

            def on_progress(done: int, total: int, task: int = task) -> None:
                if done % 50 == 0 or done == total:
                    progress.update(task, completed=done)

            options = (policy_options or {}).get(name)
            policy, policy_config = configure(name, fidelity, config, options)
            results.append(
                simulate(
                    cluster,
                    throughputs,
                    policy,
                    trace,
                    policy_config,
                    on_progress if show_progress else None,
                )
            )
    return results


def _hours(value: float | None) -> str:
    return "-" if value is None else f"{value / HOUR:.2f}"


def summary_table(summaries: Sequence[Summary], title: str, unit: str = "GPU") -> Table:
    """One row per policy; ``unit`` names the cluster's worker in the utilization header."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for header in (
        "policy",
        "DSR",
        "met",
        "declined",
        "avg JCT h",
        "common JCT h",
        "BE JCT h",
        "p95 JCT h (ddl)",
        f"{unit} util",
        "makespan h",
        "re-allocs",
        "sim s",
    ):
        table.add_column(header, justify="left" if header == "policy" else "right")
    for s in summaries:
        dsr = s.deadline_satisfactory_ratio
        table.add_row(
            s.policy,
            "-" if dsr is None else f"{dsr:.1%}",
            f"{s.deadline_met}/{s.deadline_jobs}",
            str(s.declined),
            _hours(s.avg_jct_s),
            _hours(s.common_jct_s),
            _hours(s.best_effort_jct_s),
            _hours(s.jct_deadline.p95_s),
            "-" if s.utilization is None else f"{s.utilization:.1%}",
            _hours(s.makespan_s),
            str(s.reallocations),
            f"{s.wall_s:.2f}",
        )
    return table


def report(
    results: Sequence[SimResult],
    *,
    as_json: bool,
    title: str,
    plot_dir: str | None,
    jobs_csv_dir: str | None,
) -> None:
    summaries = summarize_runs(results)
    if jobs_csv_dir:
        Path(jobs_csv_dir).mkdir(parents=True, exist_ok=True)
        for result in results:
            write_job_csv(result, Path(jobs_csv_dir) / f"jobs_{result.policy}.csv")
    plot_path = None
    if plot_dir:
        from qosched.report.cluster_plots import plot_cluster_runs  # matplotlib only when asked

        plot_path = plot_cluster_runs(results, plot_dir, title)
    if as_json:
        payload = (
            summaries[0].to_json()
            if len(summaries) == 1
            else {"runs": [s.to_json() for s in summaries]}
        )
        print(json.dumps(payload))
        return
    from rich.console import Console

    # A pipe or file gets the full table, not one squeezed to 80 columns.
    console = Console() if sys.stdout.isatty() else Console(width=160)
    unit = results[0].cluster.unit_name if results else "GPU"
    console.print(summary_table(summaries, title, unit))
    notes = []
    if plot_path:
        notes.append(f"plots: {plot_path}")
    if jobs_csv_dir:
        notes.append(f"per-job CSVs: {jobs_csv_dir}/jobs_<policy>.csv")
    if notes:
        _err_console().print("\n".join(notes))


def _add_sim_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--throughputs",
        default="A100",
        metavar="DIR|A100|T4|CPU",
        help="speed tables: a directory of CSVs or a bundled set (default A100)",
    )
    parser.add_argument(
        "--policy",
        action="append",
        default=None,
        metavar="NAME[,NAME]",
        help=f"policy, comma list or 'all' ({', '.join(policy_names())}; default qos)",
    )
    parser.add_argument(
        "--restart-pause-s",
        type=float,
        default=SimConfig().restart_pause_s,
        help="seconds of no progress after a running job's workers change (default %(default)s)",
    )
    parser.add_argument(
        "--cross-node-factor",
        type=float,
        default=SimConfig().cross_node_factor,
        help="speed factor of a job split over more nodes than it needs (default %(default)s)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help='print one JSON object (several policies: {"runs": [...]})',
    )
    parser.add_argument("--plot", metavar="DIR", help="write cluster_summary.png here")
    parser.add_argument("--jobs-csv", metavar="DIR", help="write jobs_<policy>.csv here")


# -- qosched sim cluster -------------------------------------------------------------------------


def add_sim_cluster(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("cluster", help="simulate a GPU or CPU cluster on a job trace")
    parser.add_argument(
        "--trace",
        required=True,
        help="qosched or ElasticFlow CSV trace; a pod trace (trace import --from "
        "alibaba-gpu-2023) places pods on --cluster-spec's node list instead",
    )
    parser.add_argument(
        "--resource",
        choices=RESOURCES,
        default="gpu",
        help="what a job is given, one worker at a time: GPUs or CPU cores (default gpu); "
        "independent of --throughputs",
    )
    parser.add_argument(
        "--cluster-spec",
        help="ElasticFlow cluster-spec CSV (workers per node: num_gpu_p_node, or num_cpu_p_node "
        "with --resource cpu); a gpu_type column, one row per type, makes a mixed GPU cluster",
    )
    parser.add_argument("--nodes", type=int, help="nodes (instead of --cluster-spec)")
    parser.add_argument("--gpus-per-node", type=int, help="GPUs per node (--resource gpu)")
    parser.add_argument("--cpus-per-node", type=int, help="CPU cores per node (--resource cpu)")
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the hidden speeds and noise below (same seed, same numbers)",
    )
    parser.add_argument(
        "--speed-sigma",
        type=float,
        default=0.0,
        help="hide each job's true speed: table x lognormal(0, SIGMA) factor (default 0: exact)",
    )
    parser.add_argument(
        "--scaling-sigma",
        type=float,
        default=0.0,
        help="hide each job's scaling: speed x workers**normal(0, SIGMA) (default 0)",
    )
    parser.add_argument(
        "--noise",
        type=float,
        default=0.0,
        help="relative speed noise redrawn at every decision (default 0)",
    )
    parser.add_argument(
        "--fidelity",
        choices=FIDELITIES,
        default="sound",
        help="sound (default): plans budget the restart pauses jobs pay; artifact: every peer "
        "policy and the simulator behave as the peers' published artifacts do (restart "
        "overheads, 60 s decision slot, admission, sizing); see docs/results/fidelity.md",
    )
    parser.add_argument(
        "--chronus-selection",
        choices=SELECTIONS,
        default="greedy",
        help="how chronus picks the guaranteed jobs' leases at each boundary: greedy (default; "
        "the ElasticFlow artifact's path without Gurobi) or mip (its MIP, here solved by HiGHS, "
        "the greedy selection where it finds no plan)",
    )
    parser.add_argument(
        "--qos-spare-order",
        choices=SPARE_ORDERS,
        default=SPARE_ORDERS[0],
        help="how qos hands out spare workers: best_effort_first (default) or completion "
        "(shorter completion times, fewer deadlines on some traces; "
        "docs/results/cluster-sim.md)",
    )
    _add_sim_options(parser)
    from qosched.cli.cluster_pods import add_pod_options

    add_pod_options(parser)
    parser.set_defaults(run=run_sim_cluster)


def _config(args: argparse.Namespace) -> SimConfig:
    with _naming_options(
        "--restart-pause-s",
        "--cross-node-factor",
        "--speed-sigma",
        "--scaling-sigma",
        "--noise",
        "--seed",
    ):
        return SimConfig(
            restart_pause_s=args.restart_pause_s,
            cross_node_factor=args.cross_node_factor,
            speed_sigma=args.speed_sigma,
            scaling_sigma=args.scaling_sigma,
            noise=args.noise,
            seed=args.seed,
        )


def run_sim_cluster(args: argparse.Namespace) -> int:
    from qosched.cluster.pods.trace import is_pod_trace

    output_dir(args.plot, "--plot")
    output_dir(args.jobs_csv, "--jobs-csv")
    if is_pod_trace(args.trace):  # pods on GPU nodes: a mode of its own
        from qosched.cli.cluster_pods import run_pod_sim

        return run_pod_sim(args)
    from qosched.cli.cluster_pods import refuse_pod_options

    refuse_pod_options(args)
    config = _config(args)  # before the trace: a bad option fails at once
    cluster = _cluster(args)
    throughputs = _throughputs(args.throughputs)
    names = _policies(args.policy or ["qos"])
    trace = read_trace(args.trace, throughputs)
    results = run_policies(
        cluster,
        throughputs,
        trace,
        names,
        config,
        show_progress=sys.stderr.isatty(),
        fidelity=args.fidelity,
        policy_options={
            "chronus": {"selection": args.chronus_selection},
            "qos": {"spare_order": args.qos_spare_order},
        },
    )
    title = f"{Path(args.trace).name}: {len(trace.jobs)} jobs on {cluster.describe()}"
    report(results, as_json=args.json, title=title, plot_dir=args.plot, jobs_csv_dir=args.jobs_csv)
    return 0


# -- qosched trace generate ----------------------------------------------------------------------


def _add_trace_output(parser: argparse.ArgumentParser, *, layout: str) -> None:
    """What every command that writes a trace takes: where, in which layout, from which
    speed tables."""
    parser.add_argument("--out", required=True, help="CSV file to write")
    parser.add_argument(
        "--format",
        choices=("qosched", "elasticflow"),
        default=layout,
        help=f"layout of the written trace (default {layout})",
    )
    parser.add_argument(
        "--throughputs",
        default="A100",
        metavar="DIR|A100|T4|CPU",
        help="speed tables the jobs' models and iterations come from (default A100)",
    )


def add_trace_import(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "import",
        help="make a deadline trace from an ITP, Helios, Philly or Alibaba PAI cluster trace, "
        "or a pod trace from Alibaba's GPU-sharing trace (alibaba-gpu-2023)",
        description="Make a deadline trace from a public GPU cluster trace, as the ElasticFlow "
        "artifact makes its ITP traces: the artifact's filters, iterations = run time x the "
        "table's speed, deadline = submission + U(0.5, 1.5) x run time.",
    )
    parser.add_argument("source", help="the public trace file")
    parser.add_argument(
        "--from",
        dest="fmt",
        choices=(*importers.IMPORT_FORMATS, ALIBABA_GPU_2023),
        required=True,
        help="the public trace's format (alibaba-gpu-2023: an openb_pod_list_*.csv, written "
        "as a pod trace; the deadline options do not apply)",
    )
    _add_trace_output(parser, layout="elasticflow")
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the deadlines drawn, or of the workloads --workloads assigns (default 0)",
    )
    parser.add_argument(
        "--workloads",
        action="store_true",
        help="alibaba-gpu-2023: give LS pods services and BE pods best-effort training, by the "
        "seeded rule of docs/contracts.md",
    )
    parser.add_argument(
        "--gpu",
        help="catalog GPU whose kernel estimates set the services' rates (--workloads; "
        "default A100)",
    )
    parser.add_argument(
        "--tightness",
        type=float,
        nargs=2,
        default=(0.5, 1.5),
        metavar=("LOW", "HIGH"),
        help="deadline = submission + U(LOW, HIGH) x run time (default 0.5 1.5, ElasticFlow's)",
    )
    parser.set_defaults(run=run_trace_import)


@contextmanager
def _naming_options(*options: str) -> Iterator[None]:
    """An error in a setting the command took from one of ``options`` (``--tightness`` for the
    field ``tightness``) names the option the user typed, not the field behind it; an error in
    a file keeps naming the file."""
    try:
        yield
    except InputError as exc:
        option = f"--{(exc.field or '').replace('_', '-')}"
        if exc.source is None and option in options:
            raise InputError(exc.reason, field=option) from exc
        raise


def run_trace_import(args: argparse.Namespace) -> int:
    if args.fmt == ALIBABA_GPU_2023:
        from qosched.cli.cluster_pods import run_pod_import

        return run_pod_import(args)
    for flag, value in (("--workloads", args.workloads or None), ("--gpu", args.gpu)):
        if value is not None:
            raise InputError(f"{flag} applies to --from {ALIBABA_GPU_2023} only")
    output_file(args.out, "--out")
    throughputs = _throughputs(args.throughputs)
    with _naming_options("--seed", "--tightness"):
        jobs = importers.import_trace(
            args.source, args.fmt, throughputs, seed=args.seed, tightness=tuple(args.tightness)
        )
    write_trace(jobs, args.out, layout=args.format)
    _err_console().print(f"{len(jobs)} jobs written to {args.out}")
    return 0


def add_trace_generate(commands: argparse._SubParsersAction) -> None:
    """``trace generate``, and ``trace import`` beside it (both make traces)."""
    add_trace_import(commands)
    d = GeneratorConfig()
    parser = commands.add_parser(
        "generate", help="write a synthetic trace (Poisson arrivals, lognormal durations)"
    )
    _add_trace_output(parser, layout="qosched")
    parser.add_argument(
        "--jobs", type=int, default=d.jobs, help="number of jobs (default %(default)s)"
    )
    parser.add_argument(
        "--load",
        type=float,
        default=d.load,
        help="offered load: requested worker-seconds / cluster worker-seconds",
    )
    parser.add_argument(
        "--cluster-workers",
        "--cluster-gpus",
        dest="cluster_workers",
        type=int,
        default=d.cluster_workers,
        help="workers (GPUs or CPU cores) in the cluster the load refers to (default %(default)s)",
    )
    parser.add_argument(
        "--median-duration-s",
        type=float,
        default=d.median_duration_s,
        help="median run time on the requested workers, seconds (default %(default)s)",
    )
    parser.add_argument(
        "--duration-sigma",
        type=float,
        default=d.duration_sigma,
        help="sigma of the lognormal duration (default %(default)s)",
    )
    parser.add_argument(
        "--tightness",
        type=float,
        nargs=2,
        default=d.tightness,
        metavar=("LO", "HI"),
        help="deadline = submit + U(LO, HI) x duration (default 0.5 1.5)",
    )
    parser.add_argument(
        "--best-effort-fraction",
        type=float,
        default=d.best_effort_fraction,
        help="share of jobs without a deadline (default %(default)s)",
    )
    parser.add_argument(
        "--seed", type=int, default=d.seed, help="seed of every draw (default %(default)s)"
    )
    parser.set_defaults(run=run_trace_generate)


def run_trace_generate(args: argparse.Namespace) -> int:
    output_file(args.out, "--out")
    with _naming_options(
        "--jobs",
        "--load",
        "--cluster-workers",
        "--median-duration-s",
        "--duration-sigma",
        "--tightness",
        "--best-effort-fraction",
        "--seed",
    ):
        config = GeneratorConfig(
            jobs=args.jobs,
            load=args.load,
            cluster_workers=args.cluster_workers,
            median_duration_s=args.median_duration_s,
            duration_sigma=args.duration_sigma,
            tightness=tuple(args.tightness),
            best_effort_fraction=args.best_effort_fraction,
            seed=args.seed,
        )
        jobs = generate_trace(config, _throughputs(args.throughputs))
    write_trace(jobs, args.out, layout=args.format)
    _err_console().print(f"wrote {len(jobs)} jobs to {args.out} ({args.format} layout)")
    return 0


# -- qosched demo ------------------------------------------------------------------------------


def run_demo(args: argparse.Namespace) -> int:
    output_dir(args.out, "--out")
    examples = resources.files("qosched") / "data" / "examples"
    with (
        resources.as_file(examples / "workload.csv") as trace_path,
        resources.as_file(examples / "cluster.csv") as spec_path,
    ):
        cluster = read_cluster_spec(spec_path)
        throughputs = ThroughputModel.bundled("A100")
        trace = read_trace(trace_path, throughputs)
    results = run_policies(
        cluster, throughputs, trace, policy_names(), SimConfig(), show_progress=sys.stderr.isatty()
    )
    title = f"bundled example: {len(trace.jobs)} jobs on {cluster.describe()} (A100 speeds)"
    report(results, as_json=args.json, title=title, plot_dir=args.out, jobs_csv_dir=args.out)
    return 0
