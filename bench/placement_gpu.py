"""What only a CUDA machine can confirm about placement, in a few minutes.

    PYTHONPATH=src python bench/placement_gpu.py [--requests 50] [--out gpu.json]

Without CUDA it says so and exits 0. With CUDA (platform ``cuda``: the CPU cores but the last as
the "cpu", the GPU driven from the last core):

1. per-operator GPU costs measured (``placement.profile`` on the device, each operator fenced by
   ``torch.cuda.synchronize``) against the roofline estimate of ``placement.costs`` for the
   catalog GPU of the same name: the calibration factor (median measured / roofline per unit)
   and the spread around it;
2. COS and the single-processor and model-level baselines planned on the measured costs and run
   for real on CPU + GPU: measured against predicted throughput, outputs checked against the
   CPU's to 1e-3.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import numpy as np
import torch

from qosched.graph.capture import capture
from qosched.hardware.catalog import GPUS, gpu, link
from qosched.hardware.measure import measure_cpu
from qosched.placement import baselines
from qosched.placement.costs import CostModel, tenant_from_graph
from qosched.placement.ir import Problem
from qosched.placement.measured import TenantModel, measure, measured_tenant
from qosched.placement.platform import CudaPlatform
from qosched.placement.program import build_model, export_program, model_units, save_program
from qosched.placement.runtime import TenantRun, run
from qosched.placement.search import plan

MIX = [
    TenantModel("vision", "resnet", 8),
    TenantModel("mobile", "mobilenet", 4),
    TenantModel("text", "bert", 4),
]


def catalog_gpu(name: str):
    """The catalog entry whose model ("h200" of "H200-SXM-141GB") is a word of the CUDA
    device's name ("NVIDIA H200"), else None."""
    words = set(name.lower().replace("-", " ").split())
    for key in GPUS:
        if key.split("-")[0] in words:
            return gpu(key)
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--out", help="write the numbers as JSON here")
    parser.add_argument("--cache", help="profile cache (default ~/.cache/qosched/op_profile.json)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print(
            "placement_gpu: no CUDA device here, nothing to confirm. Run this on a machine with "
            "a CUDA GPU and PyTorch built for CUDA (it takes a few minutes)."
        )
        return 0
    device_name = torch.cuda.get_device_name(0)
    pinned = CudaPlatform().pinned_processors()
    print(f"CUDA device {device_name}; cpu process on cores {pinned[0].cores}")
    found = measure(MIX, pinned, seed=0, cache_path=args.cache)
    problem = Problem(
        tuple(
            measured_tenant(c, g, found.channel, None)
            for c, g in zip(found.cpu, found.gpu, strict=True)
        )
    )
    results: dict = {"device": device_name, "channel": found.channel.__dict__}

    reference = catalog_gpu(device_name)
    if reference is None:
        print(f"no catalog GPU matches {device_name!r}: roofline comparison skipped")
    else:
        costs = CostModel(measure_cpu(), reference, link("PCIe4-x16"))
        ratios = []
        for tenant, measured in zip(MIX, found.gpu, strict=True):
            model, inputs = build_model(tenant.model, batch=tenant.batch)
            estimate = tenant_from_graph(capture(model, inputs, name=tenant.name), costs)
            ratios += [
                m / e for m, e in zip(measured.profile.unit_s, estimate.gpu_s, strict=True) if e > 0
            ]
        factor = statistics.median(ratios)
        spread = [r / factor for r in ratios]
        results["roofline"] = {
            "catalog_gpu": reference.name,
            "units": len(ratios),
            "calibration_factor": factor,
            "after_calibration_p10_p90": [float(np.percentile(spread, q)) for q in (10, 90)],
        }
        print(
            f"GPU units measured / roofline ({reference.name}): median {factor:.2f} over "
            f"{len(ratios)} units; after calibration p10 {np.percentile(spread, 10):.2f}, "
            f"p90 {np.percentile(spread, 90):.2f}"
        )

    plans = {
        "cos": plan(problem, max_switches=4),
        "all_cpu": baselines.all_cpu(problem),
        "all_gpu": baselines.all_gpu(problem),
        "model_level": baselines.model_level(problem),
    }
    programs, expected = [], []
    for tenant in MIX:
        model, inputs = build_model(tenant.model, batch=tenant.batch)
        units = tuple(map(tuple, model_units(model, inputs, tenant.name)))
        with torch.no_grad():
            expected.append([model(*inputs)])
        programs.append((save_program(export_program(model, inputs)), units, inputs))
    results["plans"] = {}
    print("| plan | predicted req/s | measured req/s | outputs within 1e-3 |")
    print("|---|---|---|---|")
    for name, chosen in plans.items():
        runs = [
            TenantRun(t.name, prog, units, inputs, chosen.assignment(t.name))
            for t, (prog, units, inputs) in zip(MIX, programs, strict=True)
        ]
        result = run(runs, pinned, rounds=args.requests, expected=expected, tolerance=1e-3)
        predicted = chosen.throughput_rps * len(MIX)
        close = all(t.outputs_equal for t in result.tenants)
        results["plans"][name] = {
            "predicted_rps": predicted,
            "measured_rps": result.total_throughput_rps,
            "outputs_close": close,
        }
        print(f"| {name} | {predicted:.1f} | {result.total_throughput_rps:.1f} | {close} |")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
