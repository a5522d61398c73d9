"""``qosched infer plan SPEC``: place every operator of several inference models on CPU or GPU.

The models are captured (no weights, no run), costed on this machine's measured CPU and the
spec's GPU and link (``placement.costs``), and planned by COS's two-phase search against the
single-processor and model/layer-level baselines and the LP upper bound.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time

from rich.console import Console
from rich.table import Table

from qosched.graph.capture import capture, load_model
from qosched.graph.zoo import ZOO
from qosched.hardware.catalog import gpu, link
from qosched.hardware.measure import measure_cpu
from qosched.placement import baselines
from qosched.placement.bound import lp_bound
from qosched.placement.costs import CostModel, tenant_from_graph
from qosched.placement.ir import Plan, Problem
from qosched.placement.search import plan
from qosched.placement.spec import load_inference_spec


def add_infer(groups: argparse._SubParsersAction) -> None:
    infer = groups.add_parser("infer", help="multi-tenant inference on one CPU+GPU machine")
    commands = infer.add_subparsers(dest="command", required=True, metavar="ACTION")
    parser = commands.add_parser("plan", help="operator-level CPU/GPU placement (COS)",
                                 description=__doc__)  # fmt: skip
    parser.add_argument("spec", help="YAML: machine (gpu, link) and tenants (name, model, ...)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(run=run_plan)


def run_plan(args: argparse.Namespace) -> int:
    spec = load_inference_spec(args.spec)
    costs = CostModel(measure_cpu(), gpu(spec.gpu), link(spec.link))
    tenants = []
    for tenant in spec.tenants:
        options = {"batch": tenant.batch} if tenant.model in ZOO else {}
        module, inputs = load_model(tenant.model, **options)
        graph = capture(module, inputs, name=tenant.name)
        tenants.append(
            tenant_from_graph(graph, costs, name=tenant.name, latency_goal_s=tenant.latency_goal_s)
        )
    problem = Problem(tuple(tenants))
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
    if args.json:
        print(json.dumps(result))
    else:
        _show(cos, compared, result, costs)
    return 0


def _show(cos: Plan, compared: dict[str, Plan], result: dict, costs: CostModel) -> None:
    console = Console()
    table = Table(title=f"COS on {costs.cpu.name} + {costs.gpu.name} over {costs.link.name}")
    for column in ("tenant", "units on GPU", "switches", "latency ms"):
        table.add_column(column)
    for tenant in cos.tenants:
        switches = sum(a != b for a, b in itertools.pairwise(tenant.assignment))
        on_gpu = sum(p == "gpu" for p in tenant.assignment)
        table.add_row(tenant.name, f"{on_gpu} of {len(tenant.assignment)}", str(switches),
                      f"{tenant.latency_s * 1e3:.3f}")  # fmt: skip
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
