"""``qosched``: one sub-command group per level (``sim``, ``trace``, ``demo``, ``infer``,
``gpu``), the local service's commands (``up``, ``submit``, ``status``, ``logs``, ``cancel``,
``down``), and the Kubernetes backend's (``k8s``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from qosched import __version__
from qosched.cli import cluster, demo, gpu, gpu_run, gpu_sim, infer, k8s, local
from qosched.core.errors import QoschedError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="qosched",
        description="Schedule deep-learning work by the quality of service people ask for.",
    )
    parser.add_argument("--version", action="version", version=f"qosched {__version__}")
    groups = parser.add_subparsers(dest="group", required=True, metavar="COMMAND")
    sim = groups.add_parser("sim", help="simulate a level of the stack")
    sim_commands = sim.add_subparsers(dest="command", required=True, metavar="LEVEL")
    cluster.add_sim_cluster(sim_commands)
    trace = groups.add_parser("trace", help="make and convert job traces")
    trace_commands = trace.add_subparsers(dest="command", required=True, metavar="ACTION")
    cluster.add_trace_generate(trace_commands)
    demo.add_demo(groups)
    infer.add_infer(groups)
    gpu_commands = gpu.add_commands(groups)
    gpu_sim.add_gpu_sim(gpu_commands)
    gpu_run.add_gpu_run(gpu_commands)
    local.add_commands(groups)
    k8s.add_commands(groups)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except QoschedError as exc:
        print(f"qosched: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("qosched: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
