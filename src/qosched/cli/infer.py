"""``qosched infer plan SPEC`` and ``qosched infer run SPEC --plan PLAN``: multi-tenant inference.

The parser only: what the commands do is in ``qosched.cli.infer_commands``, imported when one
runs, since it needs PyTorch and SciPy and ``qosched infer --help`` must not wait for them.
"""

from __future__ import annotations

import argparse

from qosched.cli.options import deferred


def add_infer(groups: argparse._SubParsersAction) -> None:
    infer = groups.add_parser("infer", help="multi-tenant inference on one CPU+GPU machine")
    commands = infer.add_subparsers(dest="command", required=True, metavar="ACTION")
    parser = commands.add_parser(
        "plan",
        help="operator-level CPU/GPU placement (COS)",
        description="Place every operator of several inference models on the CPU or the GPU "
        "of the spec's platform with a two-phase search, against the single-processor and "
        "model/layer-level baselines and an LP upper bound. --out keeps the plan for infer run.",
    )
    parser.add_argument("spec", help="YAML: machine (platform, ...) and tenants (name, model, ...)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--out", help="write the plan to this JSON file (for infer run)")
    parser.add_argument("--picture", help="draw the plan into this image file (PNG, SVG)")
    parser.add_argument(
        "--profile-cache",
        help="measured operator times (default: ~/.cache/qosched/op_profile.json)",
    )
    parser.add_argument(
        "--remeasure",
        action="store_true",
        help="measure every operator again, ignoring the profile cache, and replace its times",
    )
    parser.add_argument(
        "--calibration",
        nargs="+",
        metavar="FILE",
        help="scale each tenant's costs by what runs measured (files from infer run "
        "--calibration-out, merged)",
    )
    parser.set_defaults(run=deferred("qosched.cli.infer_commands", "run_plan"))
    runner = commands.add_parser(
        "run",
        help="run a plan for real and compare with its prediction",
        description="Execute a plan on a runnable platform (one pinned process per "
        "processor, every tenant served round-robin) and compare the measured throughput and "
        "latency with the plan's prediction.",
    )
    runner.add_argument("spec", help="the spec the plan was made from")
    runner.add_argument("--plan", required=True, help="a plan file from infer plan --out")
    runner.add_argument("--requests", type=int, default=20, help="measured requests per tenant")
    runner.add_argument("--warmup", type=int, default=2, help="unmeasured rounds first")
    runner.add_argument("--depth", type=int, default=2, help="rounds in flight at once")
    runner.add_argument("--trace", help="write a Chrome-trace/Perfetto timeline here")
    runner.add_argument("--json", action="store_true", help="print one JSON object")
    runner.add_argument(
        "--calibration-out",
        metavar="FILE",
        help="write how long each unit the run timed took (for infer plan --calibration; "
        "whole-model plans measure whole tenants)",
    )
    runner.add_argument(
        "--profile-cache",
        help="with --calibration-out: the operator times the plan was made from",
    )
    runner.set_defaults(run=deferred("qosched.cli.infer_commands", "run_run"))
