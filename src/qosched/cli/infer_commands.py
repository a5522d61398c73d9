"""What ``qosched infer plan SPEC`` and ``qosched infer run SPEC --plan PLAN`` do; their parser
is ``qosched.cli.infer``, which imports this module only when one of them runs.

``plan`` places every operator of several inference models on the "cpu" or the "gpu" of the
spec's platform with COS's two-phase search, against the single-processor and model/layer-level
baselines and the LP upper bound. On the roofline platform the GPU is costed by roofline and the
CPU measured on this machine (or estimated too, with ``cpu_costs: roofline``); on a runnable
platform (``cpu-sets``, ``cuda``) every operator is measured on both processors. ``--out`` keeps
the plan for ``run``.

``run`` executes a plan for real on a runnable platform (one pinned process per
processor, all tenants served round-robin) and compares the measured throughput and latency
with the plan's prediction.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys

from rich.console import Console
from rich.table import Table
from rich.text import Text

from qosched.cli.outputs import image_file, output_file
from qosched.cli.progress import progress_display
from qosched.core.errors import InputError
from qosched.core.trace import write_chrome_trace
from qosched.placement.calibrate import measure_unit_times, write_calibration
from qosched.placement.infer import (
    InferReport,
    InferRunReport,
    compare,
    measured_problem,
    prepare_run,
    spec_problem,
)
from qosched.placement.ir import PlacementPlan
from qosched.placement.measured import CacheUse
from qosched.placement.planfile import plan_to_dict, write_plan
from qosched.placement.runtime import MAX_DEPTH, MAX_ROUNDS, run
from qosched.placement.spec import InferenceSpec, load_inference_spec
from qosched.report.placement_plots import plot_plan


def run_plan(args: argparse.Namespace) -> int:
    # Where it will write, checked before the search: a plan of minutes must not end in an error.
    output_file(args.out, "--out")
    image_file(args.picture, "--picture")
    spec = load_inference_spec(args.spec)
    with spec.located(), progress_display() as progress:
        # Seconds to a minute, most of it costing (measuring) every operator: say which phase.
        task = progress.add_task(_costing_phase(spec), total=None)
        costed = spec_problem(
            spec, args.profile_cache, args.calibration or (), remeasure=args.remeasure
        )
        problem, title = costed.problem, costed.title
        progress.update(task, description="searching: COS, the baselines and the LP bound")
        comparison = compare(problem, spec.max_switches)
    _warn_about_cache(costed.cache)
    cos = comparison.cos
    report = InferReport.of(comparison)
    if args.out:
        models = {t.name: (t.model, t.batch) for t in spec.tenants}
        data = plan_to_dict(
            spec.platform.to_dict(), spec.seed, spec.max_switches, models, problem, cos
        )
        write_plan(args.out, data)
    if args.picture:
        plot_plan(problem, cos, args.picture, title="COS")
    if args.json:
        print(json.dumps(report.to_json()))
    else:
        _show(cos, comparison.infeasible, report, title)
    return 0


def _costing_phase(spec: InferenceSpec) -> str:
    tenants = f"{len(spec.tenants)} model{'s' if len(spec.tenants) != 1 else ''}"
    if spec.platform.runnable:
        return f"measuring every operator of {tenants} on both processors"
    return f"costing every operator of {tenants}"


def _warn_about_cache(use: CacheUse | None) -> None:
    """Say on stderr what the profile cache did not keep or could not use."""
    if use is None:
        return
    if use.untrusted:
        print(
            f"qosched: the profile cache held {use.untrusted} operator times of an older "
            "format (no spread recorded), not trusted: measured again",
            file=sys.stderr,
        )
    if use.refused:
        times = "1 operator time was" if use.refused == 1 else f"{use.refused} operator times were"
        print(
            f"qosched: warning: {times} too noisy to cache (the machine looks busy): used for "
            "this plan only; plan again on a quiet machine, or with --remeasure",
            file=sys.stderr,
        )


def _show(cos: PlacementPlan, infeasible: dict[str, str], result: InferReport, title: str) -> None:
    console = Console()
    table = Table(title=title)
    for column in ("tenant", "units on GPU", "switches", "latency ms"):
        table.add_column(column)
    for tenant in cos.tenants:
        switches = sum(a != b for a, b in itertools.pairwise(tenant.assignment))
        on_gpu = sum(p == "gpu" for p in tenant.assignment)
        table.add_row(
            Text(tenant.name),  # a name, never markup
            f"{on_gpu} of {len(tenant.assignment)}",
            str(switches),
            f"{tenant.latency_s * 1e3:.3f}",
        )
    console.print(table)
    summary = Table(title="requests/s per tenant (all tenants served at the same rate)")
    summary.add_column("plan")
    summary.add_column("throughput")
    summary.add_column("vs COS")
    rows = [("COS", result.throughput_rps), *result.baselines.items()]
    rows.append(("upper bound (LP)", result.bound_rps))
    for name, rps in rows:
        if name in infeasible:
            summary.add_row(name, "no plan meets the latency goals", "-")
            continue
        ratio = rps / result.throughput_rps if result.throughput_rps else float("nan")
        summary.add_row(name, f"{rps:.1f}", f"{ratio:.2f}x")
    console.print(summary)
    console.print(f"search {result.search_s:.2f} s")


def run_run(args: argparse.Namespace) -> int:
    # Checked before any model loads: a typo in a count fails at once, not after the set-up.
    for flag, value, low, high in (
        ("--requests", args.requests, 1, MAX_ROUNDS),
        ("--warmup", args.warmup, 0, MAX_ROUNDS),
        ("--depth", args.depth, 1, MAX_DEPTH),
    ):
        if not low <= value <= high:
            raise InputError(
                f"expected a whole number in [{low}, {high:,}], got {value}", field=flag
            )
    output_file(args.trace, "--trace")
    output_file(args.calibration_out, "--calibration-out")
    spec = load_inference_spec(args.spec)
    with spec.located():  # cores not usable here, a model that no longer builds
        return _run(args, spec)


def _run(args: argparse.Namespace, spec: InferenceSpec) -> int:
    pinned = spec.platform.pinned_processors()
    # Bit for bit where every unit computes as the reference does: on CPU cores, each process
    # on as many threads as the reference (a matrix product splits its sums by thread count).
    # A GPU's kernels round differently, and so do core sets of different sizes: to 1e-3 there.
    threads = {len(p.cores) for p in pinned}
    exact = all(p.device == "cpu" for p in pinned) and len(threads) == 1
    prepared = prepare_run(spec, args.plan, threads=min(threads) if exact else None)
    tolerance = None if exact else 1e-3
    result = run(
        prepared.tenants,
        pinned,
        tolerance=tolerance,
        rounds=args.requests,
        warmup=args.warmup,
        depth=args.depth,
        expected=prepared.expected,
    )
    report = InferRunReport.of(result, prepared.plan, prepared.problem)
    if args.calibration_out:
        # Against the isolated profile (cached), not the plan's costs: those may be calibrated
        # already, and a calibration always scales the isolated costs.
        isolated = measured_problem(spec, args.profile_cache).problem
        write_calibration(
            measure_unit_times(result.spans, isolated, spec.platform.to_dict()),
            args.calibration_out,
        )
    if args.trace:
        write_chrome_trace(result.spans, args.trace)
    if args.json:
        print(json.dumps(report.to_json()))
        return 0
    table = Table(
        title=f"{spec.platform.describe()}: {args.requests} requests per tenant, "
        f"{args.depth} rounds in flight"
    )
    for column in (
        "tenant",
        "predicted req/s",
        "measured req/s",
        "predicted latency ms",
        "mean / p95 latency ms",
        "outputs equal",
    ):
        table.add_column(column)
    for t in report.tenants:
        table.add_row(
            Text(t.name),
            f"{t.predicted_rps:.1f}",
            f"{t.measured_rps:.1f}",
            f"{t.predicted_latency_s * 1e3:.2f}",
            f"{t.mean_latency_s * 1e3:.2f} / {t.p95_latency_s * 1e3:.2f}",
            "yes" if t.outputs_equal else "NO",
        )
    Console().print(table)
    Console().print(
        f"total {report.measured_rps:.1f} req/s measured, "
        f"{report.predicted_rps:.1f} predicted ({report.ratio:.2f}x); mean latency "
        f"{report.mean_latency_s * 1e3:.2f} ms"
    )
    explained = report.explained
    if explained is not None:
        Console().print(
            f"this run's runtime model: {explained.model.message_overhead_s * 1e6:.0f} us per "
            f"message, operators {explained.model.compute_scale:.2f}x their isolated times, "
            f"{explained.model.contention:.2f}x slower while both processes are busy; replayed "
            f"with it, the plan gives {explained.replayed_rps:.1f} req/s (the protocol alone: "
            f"{explained.replayed_default_rps:.1f})"
        )
    return 0
