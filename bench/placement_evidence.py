"""COS on this machine, predicted and measured: plans vs baselines vs the bound, search time, and
the error of the measured per-operator costs.

    PYTHONPATH=src python bench/placement_evidence.py [--requests 40] [--repeats 3] \
        [--out evidence.json] [--picture docs/results/img/placement_plan.png]

Platform: two core sets of this machine play the two processors (``cpu-sets``: core 0 is the
"cpu", core 1 the "gpu"). For each tenant mix, every operator is measured on both sets (cached),
COS plans, the four baselines and the LP bound are scored by the cost model, and every plan is
run for real ``--repeats`` times (interleaved, so a disturbance hits all plans alike; the median
is reported). Then:

* calibration: the two whole-model plans are run first and every unit's time in them replaces
  its isolated cost (``placement.calibrate``); all plans are made and predicted on the
  calibrated costs (COS on the isolated costs is run too);
* per-unit cost error: each run's segments (a run of consecutive units on one processor) timed in
  the run against the sum of their units' isolated per-operator costs;
* contention: each processor's busy time in a run against the plan's predicted load;
* the runtime model (``placement.replay``): every plan replayed through the runtime's protocol,
  with the default model (overlap only) and with the model fitted to the *other* mixes' runs
  (per-message overhead, operator slow-down, contention), against measured;
* search time: four captured BERT-style tenants of 300+ operators each (roofline costs, no
  weights), and four synthetic tenants of 300 units each.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import time

import numpy as np
import torch

from qosched.graph.capture import capture
from qosched.graph.zoo import ZOO, Bert
from qosched.hardware.catalog import gpu, link
from qosched.hardware.measure import measure_cpu
from qosched.placement import baselines
from qosched.placement.calibrate import calibrated, measure_unit_times, merge, scales
from qosched.placement.costs import CostModel, tenant_from_graph
from qosched.placement.infer import compare
from qosched.placement.ir import PlacementPlan, Problem, TenantGraph, evaluate
from qosched.placement.measured import TenantModel, measure, measured_tenant
from qosched.placement.platform import CoreSetsPlatform
from qosched.placement.program import build_model, export_program, model_units, save_program
from qosched.placement.replay import RuntimeModel, fit_runtime_model, message_samples, replay
from qosched.placement.runtime import TenantRun, run
from qosched.placement.search import plan
from qosched.report.placement_plots import plot_plan

MIXES: dict[str, list[TenantModel]] = {
    "vision+text": [
        TenantModel("vision", "resnet"),
        TenantModel("mobile", "mobilenet"),
        TenantModel("text", "bert"),
    ],
    "text-heavy": [
        TenantModel("text1", "bert"),
        TenantModel("text2", "bert", batch=2),
        TenantModel("tabular", "mlp", batch=8),
    ],
    "four-vision": [
        TenantModel("r1", "resnet"),
        TenantModel("r2", "resnet", batch=2),
        TenantModel("m1", "mobilenet"),
        TenantModel("m2", "mobilenet", batch=2),
    ],
}
PLATFORM = CoreSetsPlatform((0,), (1,))


def plans_for(problem: Problem) -> tuple[dict[str, PlacementPlan], float, float]:
    """COS and the baselines (as ``infer plan`` compares them), the LP bound and the search time."""
    comparison = compare(problem, max_switches=4)
    found = {"cos": comparison.cos, **comparison.baselines}
    return found, comparison.bound_rps, comparison.search_s


def segment_errors(result, problem: Problem) -> list[tuple[float, float]]:
    """(predicted, measured) seconds of every segment a run timed."""
    tenants = {t.name: t for t in problem.tenants}
    pairs = []
    for span in result.spans:
        if "units" not in span.args:
            continue
        tenant = tenants[span.args["tenant"]]
        lo, hi = span.args["units"]
        costs = tenant.cpu_s if span.track == "cpu" else tenant.gpu_s
        pairs.append((sum(costs[lo:hi]), span.duration_s))
    return pairs


def roofline_ratios(models: list[TenantModel], found) -> list[float]:
    """Measured / roofline CPU time per unit on one core (the roofline on the measured CPU's
    peak per core and its whole-machine bandwidth, efficiency 0.5 as in ``placement.costs``)."""
    cpu = measure_cpu()
    one_core = dataclasses.replace(
        cpu, peak_flops={k: v / cpu.cores for k, v in cpu.peak_flops.items()}, cores=1
    )
    costs = CostModel(one_core, gpu("T4"), link("PCIe3-x16"))
    ratios = []
    for tenant, measured in zip(models, found.cpu, strict=True):
        model, inputs = ZOO[tenant.model](batch=tenant.batch)
        estimate = tenant_from_graph(capture(model, inputs, name=tenant.name), costs)
        pairs = zip(measured.profile.unit_s, estimate.cpu_s, strict=True)
        ratios += [m / e for m, e in pairs if e > 0]
    return ratios


def evaluate_mix(name: str, models: list[TenantModel], args: argparse.Namespace) -> dict:
    pinned = PLATFORM.pinned_processors()
    found = measure(models, pinned, seed=0, cache_path=args.cache)
    isolated = Problem(
        tuple(
            measured_tenant(c, g, found.channel, None)
            for c, g in zip(found.cpu, found.gpu, strict=True)
        )
    )
    programs, expected = [], []
    for tenant in models:
        model, inputs = build_model(tenant.model, batch=tenant.batch, seed=0)
        units = tuple(map(tuple, model_units(model, inputs, tenant.name)))
        with torch.no_grad():
            expected.append([model(*inputs)])
        programs.append((save_program(export_program(model, inputs)), units, inputs))

    def execute(chosen: PlacementPlan):
        runs = [
            TenantRun(t.name, prog, units, inputs, chosen.assignment(t.name))
            for t, (prog, units, inputs) in zip(models, programs, strict=True)
        ]
        return run(runs, pinned, rounds=args.requests, warmup=2, expected=expected)

    # Calibration: every tenant alone on each processor (the two whole-model plans) times each
    # unit; every plan below is made and predicted on those unit times.
    calibration = merge(
        measure_unit_times(execute(base).spans, isolated, PLATFORM.to_dict())
        for base in (baselines.all_cpu(isolated), baselines.all_gpu(isolated))
    )
    problem = calibrated(isolated, calibration)
    plans, bound_rps, search_s = plans_for(problem)
    uncalibrated = plan(isolated, max_switches=4)
    plans["cos_uncalibrated"] = evaluate(
        problem, [tp.assignment for tp in uncalibrated.tenants], method="cos_uncalibrated"
    )
    if args.picture and name == next(iter(MIXES)):
        plot_plan(problem, plans["cos"], args.picture, title=f"COS, mix {name}")
    measured: dict[str, list[float]] = {p: [] for p in plans}
    busy: dict[str, list[tuple[float, float, float, float]]] = {p: [] for p in plans}
    pairs: list[tuple[float, float]] = []
    samples = []
    equal = True
    for _ in range(args.repeats):
        for plan_name, chosen in plans.items():
            result = execute(chosen)
            print(f"{name} {plan_name}: {result.total_throughput_rps:.1f} req/s", flush=True)
            equal = equal and all(t.outputs_equal for t in result.tenants)
            measured[plan_name].append(result.total_throughput_rps)
            busy[plan_name].append(
                (
                    result.busy_s.get("cpu", 0.0),
                    chosen.cpu_s * args.requests,
                    result.busy_s.get("gpu", 0.0),
                    chosen.gpu_s * args.requests,
                )
            )
            pairs += segment_errors(result, isolated)
            assignments = [tp.assignment for tp in chosen.tenants]
            samples += message_samples(result.spans, problem, assignments)
    n = len(models)
    ratios = [m / p for p, m in pairs if p > 0]
    roofline = roofline_ratios(models, found)
    factor = statistics.median(roofline)
    default = RuntimeModel()
    return {
        "mix": name,
        "problem": problem,  # for the replays after every mix has run; not written out
        "assignments": {p: [tp.assignment for tp in c.tenants] for p, c in plans.items()},
        "message_samples": samples,  # likewise
        "rounds": args.requests,
        "tenants": [f"{t.name}={t.model}x{t.batch}" for t in models],
        "units": [t.n_units for t in problem.tenants],
        "calibration": scales(isolated, calibration),
        "channel": {"latency_s": found.channel.latency_s, "bandwidth": found.channel.bandwidth},
        "bound_rps": bound_rps * n,
        "search_s": search_s,
        "outputs_equal": equal,
        "plans": {
            p: {
                "predicted_rps": chosen.throughput_rps * n,
                "predicted_uncalibrated_rps": evaluate(
                    isolated, [tp.assignment for tp in chosen.tenants], method=p
                ).throughput_rps
                * n,
                "replayed_default_rps": replay(
                    problem,
                    [tp.assignment for tp in chosen.tenants],
                    default,
                    rounds=args.requests,
                ).total_throughput_rps,
                "measured_rps": statistics.median(measured[p]),
                "measured_all": measured[p],
                "busy_vs_predicted": [
                    (c / pc if pc else None, g / pg if pg else None) for c, pc, g, pg in busy[p]
                ],
            }
            for p, chosen in plans.items()
        },
        "roofline_cpu": {
            "units": len(roofline),
            "median_measured_over_roofline": factor,
            "p10": float(np.percentile(roofline, 10)),
            "p90": float(np.percentile(roofline, 90)),
            "mean_abs_error_calibrated": statistics.fmean(abs(r / factor - 1) for r in roofline),
        },
        "segments": {
            "count": len(ratios),
            "median_ratio": statistics.median(ratios),
            "p10_ratio": float(np.percentile(ratios, 10)),
            "p90_ratio": float(np.percentile(ratios, 90)),
            "mean_abs_error": statistics.fmean(abs(r - 1) for r in ratios),
        },
    }


def explain_with_other_mixes(mixes: list[dict]) -> None:
    """Fit the runtime model to every other mix's runs (and, for reference, to the mix's own),
    and replay each plan with it; the problem and samples are dropped from the record after."""
    for mix in mixes:
        others = [s for m in mixes if m is not mix for s in m["message_samples"]]
        own = fit_runtime_model(mix["message_samples"])
        mix["runtime_model_own"] = dataclasses.asdict(own)
        if not others:
            continue
        fitted = fit_runtime_model(others)
        mix["runtime_model_others"] = dataclasses.asdict(fitted)
        for name, assignments in mix["assignments"].items():
            replayed = replay(mix["problem"], assignments, fitted, rounds=mix["rounds"])
            mix["plans"][name]["replayed_fitted_rps"] = replayed.total_throughput_rps
    for mix in mixes:
        del mix["problem"], mix["message_samples"]


def deep_bert(layers: int):
    with torch.device("meta"):
        return Bert(layers=layers).eval(), (torch.zeros(1, 128, dtype=torch.long),)


def search_times() -> dict:
    """Search time on four captured tenants of 300+ operators and on 4 x 300 synthetic units."""
    costs = CostModel(measure_cpu(), gpu("T4"), link("PCIe3-x16"))
    captured = []
    for i, layers in enumerate((6, 8, 10, 12)):
        graph = capture(*deep_bert(layers), name=f"bert{layers}")
        captured.append((len(graph), tenant_from_graph(graph, costs, name=f"t{i}")))
    problem = Problem(tuple(t for _, t in captured))
    started = time.perf_counter()
    plan(problem, max_switches=4)
    real_s = time.perf_counter() - started
    rng = np.random.default_rng(0)
    synthetic = Problem(
        tuple(
            TenantGraph.from_costs(
                f"s{i}",
                rng.uniform(0.1, 2.0, 300),
                rng.uniform(0.01, 1.0, 300),
                rng.uniform(0.0, 0.5, 299),
            )
            for i in range(4)
        )
    )
    # The median of three: on a shared 2-core machine one run can be off by a third.
    times = []
    for _ in range(3):
        started = time.perf_counter()
        plan(synthetic, max_switches=4)
        times.append(time.perf_counter() - started)
    synthetic_s = statistics.median(times)
    return {
        "captured_operators": [n for n, _ in captured],
        "captured_units": [t.n_units for _, t in captured],
        "captured_search_s": real_s,
        "synthetic_units": [300] * 4,
        "synthetic_search_s": synthetic_s,
        "synthetic_search_all_s": times,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", help="write every number as JSON here")
    parser.add_argument("--picture", help="draw the first mix's COS plan here")
    parser.add_argument("--cache", help="profile cache (default ~/.cache/qosched/op_profile.json)")
    parser.add_argument("--mixes", nargs="*", default=list(MIXES), choices=list(MIXES))
    args = parser.parse_args()
    load_before = os.getloadavg()
    results = {"load_before": load_before, "mixes": [], "search": search_times()}
    for name in args.mixes:
        results["mixes"].append(evaluate_mix(name, MIXES[name], args))
    results["load_after"] = os.getloadavg()
    explain_with_other_mixes(results["mixes"])
    for mix in results["mixes"]:
        print(f"\n## {mix['mix']}: {', '.join(mix['tenants'])} (units {mix['units']})")
        print(f"outputs equal to the models' bit for bit: {mix['outputs_equal']}")
        summary = ", ".join(
            f"{t} " + "/".join(f"{per[p]:.2f}" for p in ("cpu", "gpu") if p in per)
            for t, per in mix["calibration"].items()
        )
        print(f"calibration (measured / isolated, cpu/gpu): {summary}")
        print(
            "| plan | cost model, isolated costs | cost model, calibrated | replayed: protocol "
            "only | replayed: fitted to the other mixes | measured (median) | measured / cost "
            "model | measured / replayed, fitted |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for name, p in mix["plans"].items():
            fitted = p.get("replayed_fitted_rps", float("nan"))
            print(
                f"| {name} | {p['predicted_uncalibrated_rps']:.1f} | {p['predicted_rps']:.1f} | "
                f"{p['replayed_default_rps']:.1f} | {fitted:.1f} | {p['measured_rps']:.1f} | "
                f"{p['measured_rps'] / p['predicted_rps']:.2f} | {p['measured_rps'] / fitted:.2f} |"
            )
        print(f"| LP bound | | {mix['bound_rps']:.1f} | | | | | |")
        for key in ("runtime_model_others", "runtime_model_own"):
            if key in mix:
                m = mix[key]
                print(
                    f"{key}: {m['message_overhead_s'] * 1e6:.0f} us per message, scale "
                    f"{m['compute_scale']:.2f}, contention {m['contention']:.2f}"
                )
        s = mix["segments"]
        print(
            f"segments measured/predicted: median {s['median_ratio']:.2f}, p10 "
            f"{s['p10_ratio']:.2f}, p90 {s['p90_ratio']:.2f} over {s['count']}; search "
            f"{mix['search_s'] * 1e3:.1f} ms"
        )
        r = mix["roofline_cpu"]
        print(
            f"CPU units measured/roofline: median {r['median_measured_over_roofline']:.2f}, p10 "
            f"{r['p10']:.2f}, p90 {r['p90']:.2f} over {r['units']}; mean |error| after "
            f"calibrating by the median {r['mean_abs_error_calibrated']:.2f}"
        )
    search = results["search"]
    print(
        f"\nsearch: captured {search['captured_operators']} operators "
        f"({search['captured_units']} units): {search['captured_search_s']:.3f} s; "
        f"synthetic 4 x 300 units: {search['synthetic_search_s']:.3f} s"
    )
    print(f"load average before {load_before}, after {results['load_after']}")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=1)


if __name__ == "__main__":
    main()
