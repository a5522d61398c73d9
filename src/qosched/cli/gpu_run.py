"""``qosched gpu run SPEC --policy NAME``: the spec's applications really run together on the
PyTorch runtime, every operator admitted by the policy, each application compared with itself
running alone.

On a CUDA machine the applications share the GPU through one stream each (the most important
on a high-priority stream). ``--device cpu`` runs the same code path on the CPU: the operators
still pass through the policy, but no GPU is shared, so its ratios only show the path works.
Each application's goal (``goal`` in the spec) reaches the policy, as in ``gpu sim``, and each
is reported with its goal, what was measured and whether the goal was met.
"""

from __future__ import annotations

import argparse
import json

from qosched.cli.gpu_sim import (
    app_rows,
    calibration_note,
    print_comparison,
    show_setup_progress,
)
from qosched.cli.outputs import output_file
from qosched.cli.progress import progress_display
from qosched.core.errors import InputError
from qosched.gpushare.policies import create_policy, policy_names


def add_gpu_run(commands: argparse._SubParsersAction) -> None:
    """Add ``run`` to the ``gpu`` command group's sub-commands."""
    parser = commands.add_parser(
        "run",
        help="run applications together on the real runtime",
        description="Run the spec's applications together on the PyTorch runtime, every "
        "operator admitted by the policy, and compare each with itself running alone. On a CUDA "
        "machine they share the GPU through one stream each; --device cpu runs the same path on "
        "the CPU, which shows the path works but shares no GPU.",
    )
    parser.add_argument("spec", help="YAML apps spec (models only; see examples/)")
    parser.add_argument("--policy", required=True,
                        help=f"sharing policy: {', '.join(policy_names())}")  # fmt: skip
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cuda (default) or cpu, to check the path without a GPU")  # fmt: skip
    parser.add_argument("--requests", type=int, default=30,
                        help="requests per application, back to back (default 30)")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--trace", metavar="OUT.json",
                        help="write a Chrome/Perfetto timeline of operators")  # fmt: skip
    parser.set_defaults(run=run_live)


def run_live(args: argparse.Namespace) -> int:
    # Imported here: the runtime needs PyTorch, which `qosched gpu --help` must not load.
    import torch

    from qosched.gpushare.apps import load_apps_spec, resolved_goals
    from qosched.gpushare.judge import outcomes
    from qosched.gpushare.live import build_apps, compare_run
    from qosched.gpushare.runtime import CallEstimator, CpuDevice, CudaDevice, catalog_gpu_for
    from qosched.hardware import gpu

    output_file(args.trace, "--trace")
    spec = load_apps_spec(args.spec)
    policy = create_policy(args.policy)
    if args.device == "cuda":
        if not torch.cuda.is_available():
            raise InputError(
                "no CUDA GPU here (torch.cuda.is_available() is False); use `qosched gpu sim` "
                "to evaluate policies without one, or --device cpu to check the runtime's path"
            )
        device = CudaDevice()
        catalog = catalog_gpu_for(device.name)
    else:
        device, catalog = CpuDevice(), gpu(spec.gpu)
    with progress_display() as progress:
        task = progress.add_task("building the applications", total=None)
        apps = build_apps(spec, device=args.device, requests=args.requests)
        show_setup_progress(policy, args.policy, progress, task)
        progress.update(task, description=f"running under {args.policy}, then each app alone")
        rows, shared = compare_run(apps, policy, device=device, estimator=CallEstimator(catalog))
    judged = outcomes(rows, resolved_goals(spec))
    if args.trace:
        shared.write_trace(args.trace)
    if args.json:
        print(json.dumps({
            "policy": shared.policy,
            "device": shared.device,
            "estimates_for": catalog.name,
            "wall_s": shared.wall_s,
            "apps": app_rows(rows, judged),
            "goals_met": all(o.met for o in judged),
            "calibrated": getattr(policy, "calibrated", None),
            "setup_s": getattr(policy, "setup_s", 0.0),
        }))  # fmt: skip
        return 0
    print_comparison(
        f"{shared.policy} on {shared.device} (estimates for {catalog.name}), "
        f"{args.requests} requests per application",
        rows,
        judged,
        f"ran in {shared.wall_s:.2f} s"
        + calibration_note(policy)
        + (f"; timeline in {args.trace}" if args.trace else ""),
    )
    return 0
