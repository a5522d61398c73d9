"""``qosched demo``: the bundled real workload under ``qos`` and under ``fifo``, with a report.

``--simulate`` runs the simulated cluster demo instead (the bundled trace under every policy).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING

from qosched.cli.options import cpu_list

if TYPE_CHECKING:
    from rich.console import Console

    from qosched.backends.local.demo import DemoPlan, RunReport
    from qosched.backends.local.service import LocalService

#: The two policies compared: qosched's own, and the default scheduler with users' requests.
POLICIES = ("qos", "fifo")


def add_demo(groups: argparse._SubParsersAction) -> None:
    parser = groups.add_parser(
        "demo",
        help="run the bundled real training workload under qos and fifo and compare",
        description="Run the bundled real training workload on this machine under qos and "
        "under fifo, and report each job's completion time against its deadline. --simulate "
        "runs the simulated cluster demo instead (the bundled trace under every policy).",
    )
    parser.add_argument(
        "--simulate", action="store_true", help="the simulated cluster demo instead"
    )
    parser.add_argument("--out", default="qosched-out", help="(--simulate) plots and CSVs")
    parser.add_argument(
        "--cpus",
        type=cpu_list,
        metavar="LIST",
        help="cores to use, like 0,1 or 0-3,6 (default: every core this process may use)",
    )
    parser.add_argument(
        "--measure-s",
        type=float,
        default=4.0,
        help="seconds each workload is measured for before the deadlines are set (default 4)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--submit",
        action="store_true",
        help="instead of running its own services, calibrate on the running service's cores "
        "and submit the workload to it (`qosched up` first), to watch on its page",
    )
    parser.add_argument(
        "--home",
        metavar="DIR",
        help="(--submit) the service's home directory (default as for `qosched up`)",
    )
    parser.set_defaults(run=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    if args.simulate:
        from qosched.cli import cluster

        return cluster.run_demo(args)
    # Imported here: the real workload needs PyTorch, which `qosched --help` must not load.
    from rich.console import Console

    from qosched.backends.local.demo import calibrated_plan, run_workload

    if args.submit:
        return _submit_to_service(args)
    from qosched.core.errors import InputError

    cpus = args.cpus
    allowed = tuple(sorted(os.sched_getaffinity(0)))
    unknown = sorted(set(cpus or ()) - set(allowed))
    if unknown:  # before the calibration, which would try to run on them
        raise InputError(f"cores {unknown} are not available here (have {allowed})", field="cpus")
    console = Console(stderr=True)
    cores = cpus or allowed
    console.print(f"[bold]calibrating[/] the workloads on cores {list(cores)}")
    plan = calibrated_plan(
        cores, seconds=args.measure_s, on_progress=lambda line: console.print(f"  {line}")
    )
    _print_plan(console, plan)
    reports = []
    for policy in POLICIES:
        console.print(f"[bold]{policy}[/]: {len(plan.jobs)} real training jobs")
        shown: dict[str, str] = {}

        def tick(service: LocalService, elapsed: float, shown: dict[str, str] = shown) -> None:
            for job in service.jobs():
                cores = list(job.cpus)
                line = f"{job.state} {job.iterations_done}/{job.iterations} cores {cores}"
                state_key = f"{job.state} {cores}"
                if shown.get(job.id) != state_key:
                    shown[job.id] = state_key
                    console.print(f"  {elapsed:6.1f} s  {job.name:<20} {line}")

        reports.append(run_workload(policy, plan.jobs, cpus=cpus, on_tick=tick))
    if args.json:
        print(json.dumps([_as_json(report) for report in reports], indent=2))
    else:
        _print(reports)
    return 0


def _submit_to_service(args: argparse.Namespace) -> int:
    """Calibrate on the running service's cores, then submit the workload's jobs to it at
    their offsets, so that its page (and `qosched status`) shows them as they run."""
    import time

    import yaml
    from rich.console import Console

    from qosched.backends.local.client import Client
    from qosched.backends.local.demo import calibrated_plan
    from qosched.backends.local.home import resolve_home

    console = Console(stderr=True)
    client = Client.from_home(resolve_home(args.home))
    cores = client.status().cpus
    console.print(
        f"[bold]calibrating[/] the workloads on the service's cores {list(cores)} "
        "(best while it runs nothing else)"
    )
    plan = calibrated_plan(
        cores, seconds=args.measure_s, on_progress=lambda line: console.print(f"  {line}")
    )
    _print_plan(console, plan)
    start = time.monotonic()
    for job in sorted(plan.jobs, key=lambda job: job.offset_s):
        time.sleep(max(0.0, start + job.offset_s - time.monotonic()))
        text = yaml.safe_dump(job.spec.to_dict(), sort_keys=False)
        submitted = client.submit(text, f"<demo {job.spec.name}>")
        console.print(
            f"  {time.monotonic() - start:6.1f} s  {job.spec.name:<20} "
            f"{submitted.id} {submitted.state}"
        )
    console.print("all submitted: follow them with `qosched status --watch` or on the page")
    return 0


def _print_plan(console: Console, plan: DemoPlan) -> None:
    from rich.table import Table

    table = Table(title=f"the workload, calibrated on {plan.cores} cores of this machine")
    for column in ("job", "arrives", "iterations", "deadline", "side by side", "one after another"):
        table.add_column(column)
    for job in plan.jobs:
        name = job.spec.name
        deadline = plan.deadline_s(name)
        after = plan.one_after_another_s[name]
        mark = " [red]misses[/]" if after > deadline else ""
        table.add_row(
            name,
            f"{job.offset_s:.0f} s",
            str(job.spec.iterations),
            f"{deadline} s",
            f"{plan.side_by_side_s[name]:.0f} s on {plan.lane_cores} core(s)",
            f"{after:.0f} s on {plan.cores} cores{mark}",
        )
    console.print(table)
    console.print(
        f"  deadline = 1.5 x the time side by side + two starts ({plan.startup_s:.1f} s each, "
        "measured) + a decision tick"
    )


def _as_json(report: RunReport) -> dict:
    from qosched.backends.local.demo import median_or_none

    return {
        "policy": report.policy,
        "deadlines_met": report.met,
        "jobs": len(report.jobs),
        "wall_s": report.wall_s,
        "utilisation_of_allocated_cpus": report.utilisation,
        "median_prediction_error_at_10pct": median_or_none(report.prediction_errors),
        "outcomes": [
            {
                "name": job.name,
                "state": job.state,
                "deadline_s": job.deadline_at - job.submitted_at,
                "jct_s": None if job.finished_at is None else job.finished_at - job.submitted_at,
                "met": job.met,
                "attempts": job.attempts,
            }
            for job in report.jobs
        ],
    }


def _print(reports: list[RunReport]) -> None:
    from rich.console import Console
    from rich.table import Table

    from qosched.backends.local.demo import median_or_none

    console = Console()
    table = Table(title="bundled real workload: each job's completion time against its deadline")
    table.add_column("job")
    for report in reports:
        table.add_column(f"{report.policy}: done in / deadline")
    names = [job.name for job in reports[0].jobs]
    for name in names:
        cells = []
        for report in reports:
            job = next(j for j in report.jobs if j.name == name)
            deadline = job.deadline_at - job.submitted_at
            if job.finished_at is None:
                cells.append(f"{job.state} / {deadline:.0f} s")
                continue
            mark = "met" if job.met else "[red]missed[/]"
            cells.append(f"{job.finished_at - job.submitted_at:.0f} s / {deadline:.0f} s {mark}")
        table.add_row(name, *cells)
    console.print(table)
    summary = Table(title="summary")
    for column in ("policy", "deadlines met", "CPU use of allocated cores", "prediction error"):
        summary.add_column(column)
    for report in reports:
        error = median_or_none(report.prediction_errors)
        summary.add_row(
            report.policy,
            f"{report.met} of {len(report.jobs)}",
            "-" if report.utilisation is None else f"{report.utilisation:.0%}",
            "-" if error is None else f"{error:.0%} (median, at 10% done)",
        )
    console.print(summary)
    print(
        "CPU use of allocated cores: CPU time of the runners / cores held x time. "
        "Prediction error: |predicted - actual| / actual remaining time.",
        file=sys.stderr,
    )
