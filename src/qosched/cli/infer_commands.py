"""What ``qosched infer plan SPEC`` and ``qosched infer run SPEC --plan PLAN`` do; their parser
is ``qosched.cli.infer``, which imports this module only when one of them runs.

``plan`` places every operator of several inference models on the "cpu" or the "gpu" of the
spec's platform with COS's two-phase search, against the single-processor and model/layer-level
baselines and the LP upper bound. On the roofline platform the GPU is costed by roofline and the
CPU measured on this machine (or estimated too, with ``cpu_costs: roofline``); on a runnable
platform (``cpu-sets``, ``cuda``) every operator is measured on both processors. ``--out`` keeps
the plan for ``run``.

``run`` executes a plan for real on a runnable platform (one pinned worker process per
processor, all tenants served round-robin) and compares the measured throughput and latency
with the plan's prediction.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from qosched.core.errors import InputError
from qosched.graph.capture import capture, load_model
from qosched.graph.zoo import ZOO
from qosched.hardware.catalog import gpu, link
from qosched.hardware.measure import measure_cpu
from qosched.placement import baselines
from qosched.placement.bound import lp_bound
from qosched.placement.calibrate import (
    calibrated,
    measure_unit_times,
    merge,
    read_calibration,
    write_calibration,
)
from qosched.placement.costs import CostModel, tenant_from_graph
from qosched.placement.ir import PROCESSORS, Plan, Problem, TenantGraph
from qosched.placement.measured import TenantModel, measure, measured_tenant, profile_job
from qosched.placement.planfile import plan_to_dict, read_plan, write_plan
from qosched.placement.platform import RooflinePlatform, Worker, run_pinned, usable_cores
from qosched.placement.program import build_model, export_program, model_units, save_program
from qosched.placement.replay import RuntimeModel, fit_runtime_model, message_samples, replay
from qosched.placement.runtime import MeasuredRun, TenantRun, run
from qosched.placement.search import plan
from qosched.placement.spec import InferenceSpec, load_inference_spec
from qosched.report.placement_plots import plot_plan
from qosched.report.trace import write_chrome_trace


def roofline_problem(spec: InferenceSpec, cache: str | None) -> tuple[Problem, str]:
    """Tenants on the spec's catalog GPU: GPU costs by roofline (times the calibration factor),
    CPU costs measured on this machine's usable cores unless the spec asks for roofline."""
    platform = spec.platform
    assert isinstance(platform, RooflinePlatform)
    costs = CostModel(
        measure_cpu(),
        gpu(platform.gpu),
        link(platform.link),
        gpu_calibration=platform.gpu_calibration,
    )
    tenants = []
    for tenant in spec.tenants:
        options = {"batch": tenant.batch} if tenant.model in ZOO else {}
        module, inputs = load_model(tenant.model, **options)
        graph = capture(module, inputs, name=tenant.name)
        tenants.append(
            tenant_from_graph(graph, costs, name=tenant.name, latency_goal_s=tenant.latency_goal_s)
        )
    cpu_note = "roofline"
    if platform.cpu_costs == "measured":
        host = Worker("cpu", usable_cores())
        models = [TenantModel(t.name, t.model, t.batch) for t in spec.tenants]
        found, _, _ = run_pinned(host, profile_job, host, models, spec.seed, cache, 5)
        for i, (estimated, measured) in enumerate(zip(tenants, found, strict=True)):
            if tuple(u[0] for u in measured.units) != estimated.unit_ids:
                raise InputError(
                    f"tenant {estimated.name!r}: the model with weights cuts into other units "
                    "than the model captured without them",
                    field=f"tenants[{i}].model",
                )
            tenants[i] = replace(estimated, cpu_s=measured.profile.unit_s)
        cpu_note = f"measured on {len(host.cores)} cores"
    title = (
        f"COS on {costs.cpu.name} ({cpu_note}) + {costs.gpu.name} (roofline x "
        f"{platform.gpu_calibration:g}) over {platform.link}"
    )
    return Problem(tuple(tenants)), title


def measured_problem(spec: InferenceSpec, cache: str | None) -> tuple[Problem, str]:
    """Tenants measured on both processors of the spec's runnable platform."""
    workers = spec.platform.workers()
    models = [TenantModel(t.name, t.model, t.batch) for t in spec.tenants]
    found = measure(models, workers, seed=spec.seed, cache_path=cache)
    tenants: list[TenantGraph] = [
        measured_tenant(c, g, found.channel, t.latency_goal_s)
        for c, g, t in zip(found.cpu, found.gpu, spec.tenants, strict=True)
    ]
    note = (
        f"COS on {spec.platform.describe()} (measured; link {found.channel.latency_s * 1e6:.0f} "
        f"us + {found.channel.bandwidth / 1e9:.2f} GB/s; profile cache {found.cache_hits} hits, "
        f"{found.cache_misses} measured)"
    )
    return Problem(tuple(tenants)), note


def run_plan(args: argparse.Namespace) -> int:
    spec = load_inference_spec(args.spec)
    if spec.platform.runnable:
        problem, title = measured_problem(spec, args.profile_cache)
    else:
        problem, title = roofline_problem(spec, args.profile_cache)
    if args.calibration:
        calibration = merge(read_calibration(path) for path in args.calibration)
        if dict(calibration.machine) != spec.platform.to_dict():
            raise InputError(
                f"the calibration was measured on machine {dict(calibration.machine)}, the "
                f"spec has {spec.platform.to_dict()}",
                source=args.calibration[0],
                field="machine",
            )
        problem = calibrated(problem, calibration)
        title += f"; calibrated by {len(args.calibration)} run(s)"
        # A pair no run measured keeps its isolated (optimistic) costs, which draws the plan
        # towards it: say so rather than guess a scale.
        missing = [
            f"{t.name} on the {p}"
            for t in problem.tenants
            for p in PROCESSORS
            if p not in calibration.unit_s.get(t.name, {})
        ]
        if missing:
            title += f" (not calibrated: {', '.join(missing)})"
    started = time.perf_counter()
    cos = plan(problem, max_switches=spec.max_switches)
    search_s = time.perf_counter() - started
    compared = {
        "all_cpu": baselines.all_cpu(problem),
        "all_gpu": baselines.all_gpu(problem),
        "model_level": baselines.model_level(problem),
        "layer_level": baselines.layer_level(problem, spec.max_switches),
    }
    bound = lp_bound(problem)
    result = {
        "throughput_rps": cos.throughput_rps,
        "bound_rps": bound.throughput_rps,
        "search_s": search_s,
        "baselines": {name: p.throughput_rps for name, p in compared.items()},
        "tenants": [
            {"name": t.name, "throughput_rps": cos.throughput_rps, "latency_s": t.latency_s}
            for t in cos.tenants
        ],
    }
    if args.out:
        models = {t.name: (t.model, t.batch) for t in spec.tenants}
        data = plan_to_dict(
            spec.platform.to_dict(), spec.seed, spec.max_switches, models, problem, cos
        )
        write_plan(args.out, data)
    if args.picture:
        plot_plan(problem, cos, args.picture, title="COS")
    if args.json:
        print(json.dumps(result))
    else:
        _show(cos, compared, result, title)
    return 0


def _show(cos: Plan, compared: dict[str, Plan], result: dict, title: str) -> None:
    console = Console()
    table = Table(title=title)
    for column in ("tenant", "units on GPU", "switches", "latency ms"):
        table.add_column(column)
    for tenant in cos.tenants:
        switches = sum(a != b for a, b in itertools.pairwise(tenant.assignment))
        on_gpu = sum(p == "gpu" for p in tenant.assignment)
        table.add_row(
            tenant.name,
            f"{on_gpu} of {len(tenant.assignment)}",
            str(switches),
            f"{tenant.latency_s * 1e3:.3f}",
        )
    console.print(table)
    summary = Table(title="requests/s per tenant (all tenants served at the same rate)")
    summary.add_column("plan")
    summary.add_column("throughput")
    summary.add_column("vs COS")
    rows = [("COS", result["throughput_rps"])] + [
        (n, p.throughput_rps) for n, p in compared.items()
    ]
    rows.append(("upper bound (LP)", result["bound_rps"]))
    for name, rps in rows:
        ratio = rps / result["throughput_rps"] if result["throughput_rps"] else float("nan")
        summary.add_row(name, f"{rps:.1f}", f"{ratio:.2f}x")
    console.print(summary)
    console.print(f"search {result['search_s']:.2f} s")


def prepare_run(
    spec: InferenceSpec, plan_path: str | Path
) -> tuple[list[TenantRun], list, Plan, Problem]:
    """The tenants of ``spec`` ready to run ``plan_path``'s plan, their outputs run unsplit, the
    plan as scored by its own costs, and those costs. InputError when the plan does not fit the
    spec."""
    planned = read_plan(plan_path)
    if planned.machine != spec.platform.to_dict():
        raise InputError(
            f"the plan was made for machine {planned.machine}, the spec has "
            f"{spec.platform.to_dict()}",
            source=plan_path,
            field="machine",
        )
    wanted = tuple((t.name, t.model, t.batch) for t in spec.tenants)
    if planned.models != wanted or planned.seed != spec.seed:
        raise InputError(
            f"the plan's tenants {list(planned.models)} (seed {planned.seed}) are "
            f"not the spec's {list(wanted)} (seed {spec.seed})",
            source=plan_path,
            field="tenants",
        )
    tenants, expected = [], []
    for tenant, graph, scored in zip(
        spec.tenants, planned.problem.tenants, planned.plan.tenants, strict=True
    ):
        model, inputs = build_model(tenant.model, batch=tenant.batch, seed=spec.seed)
        units = model_units(model, inputs, tenant.name)
        unit_ids = tuple(u[0] for u in units)
        if unit_ids != graph.unit_ids:
            raise InputError(
                f"tenant {tenant.name!r}: the plan's units are not the model's "
                f"({len(graph.unit_ids)} planned, {len(unit_ids)} in the model)",
                source=plan_path,
                field="tenants",
            )
        program = export_program(model, inputs)
        with torch.no_grad():
            expected.append([t for t in torch.utils._pytree.tree_leaves(model(*inputs))])
        tenants.append(
            TenantRun(
                tenant.name,
                save_program(program),
                tuple(map(tuple, units)),
                inputs,
                scored.assignment,
            )
        )
    return tenants, expected, planned.plan, planned.problem


def explain(result: MeasuredRun, predicted: Plan, problem: Problem) -> dict | None:
    """The runtime model fitted to this run's own messages, and the throughput the replay of the
    plan gives with it: how much of the gap between predicted and measured the protocol, the
    per-message overhead, the slower operators and the workers' contention account for. ``None``
    when the run timed too few messages to fit."""
    assignments = [t.assignment for t in predicted.tenants]
    try:
        model = fit_runtime_model(
            message_samples(result.spans, problem, assignments), depth=result.depth
        )
    except InputError:
        return None
    replayed = replay(problem, assignments, model, rounds=result.rounds, warmup=result.warmup)
    return {
        "message_overhead_s": model.message_overhead_s,
        "compute_scale": model.compute_scale,
        "contention": model.contention,
        "replayed_rps": replayed.total_throughput_rps,
        "replayed_default_rps": replay(
            problem, assignments, RuntimeModel(depth=result.depth), rounds=result.rounds,
            warmup=result.warmup,
        ).total_throughput_rps,
    }  # fmt: skip


def run_report(result: MeasuredRun, predicted: Plan, problem: Problem) -> dict:
    """The ``infer run --json`` object: measured against predicted, per tenant and in total."""
    latency = {t.name: t.latency_s for t in predicted.tenants}
    return {
        "predicted_rps": predicted.throughput_rps * len(predicted.tenants),
        "measured_rps": result.total_throughput_rps,
        "ratio": result.total_throughput_rps / (predicted.throughput_rps * len(predicted.tenants)),
        "mean_latency_s": statistics.fmean(x for t in result.tenants for x in t.latency_s),
        "requests": result.rounds,
        "depth": result.depth,
        "wall_s": result.wall_s,
        "busy_s": result.busy_s,
        "predicted_busy_s": {
            "cpu": predicted.cpu_s * result.rounds,
            "gpu": predicted.gpu_s * result.rounds,
        },
        "explained": explain(result, predicted, problem),
        "tenants": [
            {
                "name": t.name,
                "predicted_rps": predicted.throughput_rps,
                "measured_rps": t.throughput_rps,
                "predicted_latency_s": latency[t.name],
                "mean_latency_s": t.mean_latency_s,
                "p95_latency_s": t.p95_latency_s,
                "outputs_equal": t.outputs_equal,
            }
            for t in result.tenants
        ],
    }


def run_run(args: argparse.Namespace) -> int:
    spec = load_inference_spec(args.spec)
    workers = spec.platform.workers()
    tenants, expected, predicted, problem = prepare_run(spec, args.plan)
    # A GPU's kernels round differently from the CPU's: there, results are checked to 1e-3.
    tolerance = 1e-3 if any(w.device != "cpu" for w in workers) else None
    result = run(
        tenants,
        workers,
        tolerance=tolerance,
        rounds=args.requests,
        warmup=args.warmup,
        depth=args.depth,
        expected=expected,
    )
    report = run_report(result, predicted, problem)
    if args.calibration_out:
        # Against the isolated profile (cached), not the plan's costs: those may be calibrated
        # already, and a calibration always scales the isolated costs.
        isolated, _ = measured_problem(spec, args.profile_cache)
        write_calibration(
            measure_unit_times(result.spans, isolated, spec.platform.to_dict()),
            args.calibration_out,
        )
    if args.trace:
        write_chrome_trace(result.spans, args.trace)
    if args.json:
        print(json.dumps(report))
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
    for t in report["tenants"]:
        table.add_row(
            t["name"],
            f"{t['predicted_rps']:.1f}",
            f"{t['measured_rps']:.1f}",
            f"{t['predicted_latency_s'] * 1e3:.2f}",
            f"{t['mean_latency_s'] * 1e3:.2f} / {t['p95_latency_s'] * 1e3:.2f}",
            "yes" if t["outputs_equal"] else "NO",
        )
    Console().print(table)
    Console().print(
        f"total {report['measured_rps']:.1f} req/s measured, "
        f"{report['predicted_rps']:.1f} predicted ({report['ratio']:.2f}x); mean latency "
        f"{report['mean_latency_s'] * 1e3:.2f} ms"
    )
    explained = report["explained"]
    if explained is not None:
        Console().print(
            f"this run's runtime model: {explained['message_overhead_s'] * 1e6:.0f} us per "
            f"message, operators {explained['compute_scale']:.2f}x their isolated times, "
            f"{explained['contention']:.2f}x slower while both workers are busy; replayed with "
            f"it, the plan gives {explained['replayed_rps']:.1f} req/s (the protocol alone: "
            f"{explained['replayed_default_rps']:.1f})"
        )
    return 0
