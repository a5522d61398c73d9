"""Every cluster policy on every cluster of the ITP trace release, as a Markdown table.

    python bench/itp_policy_table.py --traces DIR [--fidelity sound] [--policies all]
                                     [--clusters cluster01,cluster10] [--timeout 3600]
                                     [--qos-spare-order best_effort_first]

DIR holds the release's ``clusterNN.csv`` files (``microsoft/elasticflow-traces``,
``elasticflow-traces.tar.gz`` unpacked). Each cluster runs at the size the ElasticFlow artifact
simulates it on (``bench/cluster_sim_speed.py`` ``ITP_NODES``), as the whole ``qosched sim
cluster --policy ... --json`` command a user runs, one subprocess per cluster. Printed per
cluster: every policy's DSR (declined jobs count as missed), ``qos`` less the best other policy
(in DSR and in jobs), and each policy's simulation seconds; a command that fails or outlasts
``--timeout`` is printed as such and the table goes on.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from cluster_sim_speed import ITP_NODES  # a sibling script: bench/ is on sys.path


def run_cluster(
    trace: Path, nodes: int, policies: str, fidelity: str, timeout: float, spare_order: str
) -> dict:
    """policy -> its JSON report, for one cluster; raises on a failed or timed-out command."""
    command = [
        sys.executable, "-m", "qosched.cli.main",
        "sim", "cluster", "--trace", str(trace), "--nodes", str(nodes), "--gpus-per-node", "8",
        "--throughputs", "A100", "--policy", policies, "--fidelity", fidelity, "--json",
        "--qos-spare-order", spare_order,
    ]  # fmt: skip
    done = subprocess.run(command, check=True, capture_output=True, text=True, timeout=timeout)
    report = json.loads(done.stdout)
    return {run["policy"]: run for run in report.get("runs", [report])}


def row(name: str, nodes: int, runs: dict, names: list[str]) -> str:
    dsr = {p: runs[p]["deadline_satisfactory_ratio"] for p in names}
    cells = [f"{dsr[p]:.3f}" for p in names]
    gap = "—"
    if "qos" in runs and len(names) > 1:
        best = max((p for p in names if p != "qos"), key=lambda p: dsr[p])
        jobs = runs["qos"]["deadline_met"] - runs[best]["deadline_met"]
        gap = f"{dsr['qos'] - dsr[best]:+.4f} ({jobs:+d} jobs, against `{best}`)"
    seconds = " / ".join(f"{runs[p]['wall_s']:.1f}" for p in names)
    jobs = runs[names[0]]["jobs"]
    return f"| {name} | {jobs} | {nodes * 8} | " + " | ".join(cells) + f" | {gap} | {seconds} |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, required=True)
    parser.add_argument("--fidelity", choices=("sound", "artifact"), default="sound")
    parser.add_argument("--policies", default="all", help="comma list, or all (default)")
    parser.add_argument("--clusters", default=",".join(ITP_NODES))
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per cluster")
    parser.add_argument("--qos-spare-order", default="best_effort_first", help="qos's spare_order")
    args = parser.parse_args()
    clusters = args.clusters.split(",")
    unknown = [c for c in clusters if c not in ITP_NODES]
    if unknown:
        known = ", ".join(ITP_NODES)
        parser.error(f"unknown clusters {', '.join(unknown)}; the release has {known}")
    missing = [c for c in clusters if not (args.traces / f"{c}.csv").is_file()]
    if missing:
        parser.error(f"{args.traces} lacks {', '.join(missing)}.csv")
    print(f"# The ITP trace release, every policy, `--fidelity {args.fidelity}`\n")
    header_done = False
    for name in clusters:
        trace = args.traces / f"{name}.csv"
        try:
            runs = run_cluster(
                trace,
                ITP_NODES[name],
                args.policies,
                args.fidelity,
                args.timeout,
                args.qos_spare_order,
            )
        except subprocess.TimeoutExpired:
            print(f"| {name} | timed out after {args.timeout:.0f} s |", flush=True)
            continue
        except subprocess.CalledProcessError as error:
            last = (error.stderr or "").strip().splitlines()[-1:] or ["no output"]
            print(f"| {name} | failed: {last[0]} |", flush=True)
            continue
        names = sorted(runs, key=lambda p: (p == "qos", p))
        if not header_done:
            print("| cluster | jobs | GPUs | " + " | ".join(names) + " | qos - best other "
                  "| simulation s (same order) |")  # fmt: skip
            print("|---" * (len(names) + 5) + "|")
            header_done = True
        print(row(name, ITP_NODES[name], runs, names), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
