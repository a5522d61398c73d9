"""How fast `qosched sim cluster` runs: one qos decision, the scaling curve, and the artifact.

    python bench/cluster_sim_speed.py decision             # about a minute on 2 cores
    python bench/cluster_sim_speed.py scaling [--jobs 1000,3000,10000] [--policies qos,elasticflow]
    python bench/cluster_sim_speed.py artifact --trace philly_103959.csv --nodes 32

- decision: one qos ``allocate()`` with 1,000 active jobs on 128x8 = 1,024 GPUs (jobs as in
  bench/bench_cluster_sim.py ``active_states``, admitted one by one first), CPU milliseconds per
  call (median of the calls after the first), against the 5 ms target.
- scaling: generated traces at offered load 1.0 on 64x8 GPUs (``qosched trace generate --jobs N
  --load 1.0 --cluster-gpus 512 --seed 5``), CPU seconds of the whole simulation per policy and
  per decision: jobs against time.
- artifact: qosched on a trace whose ElasticFlow-artifact time is recorded below, the whole
  ``qosched sim cluster`` command timed in a subprocess, against that record.

CPU time (``time.process_time``) and not wall time: the machine these numbers come from is shared,
and wall time there measures the neighbours. Ratios compare runs made in this process.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import bench_cluster_sim  # a sibling script: bench/ is on sys.path when these run as scripts
from qosched.cluster.generate import GeneratorConfig, generate_trace
from qosched.cluster.policies import create_policy
from qosched.cluster.simulator import simulate
from qosched.cluster.spec import ClusterSpec
from qosched.cluster.state import ClusterView, JobState
from qosched.cluster.throughput import ThroughputModel

TP = ThroughputModel.bundled("A100")
DECISION_TARGET_S = 0.005

#: The ElasticFlow artifact's own simulator (``scheduler.py --simulation=True --scheduling_slot=60
#: --gpu_type=A100``, under ``nice -n 10`` on the shared 2-core machine, ``/usr/bin/time``) on the
#: traces below, recorded in docs/results/cluster-sim.md: (trace file name, nodes of 8 GPUs) ->
#: {artifact policy: (wall seconds, CPU seconds, user + system)}. Its wall time is several times
#: its CPU time even so; the CPU time is the fair comparison on a shared machine.
ARTIFACT_S: dict[tuple[str, int], dict[str, tuple[float, float]]] = {
    ("philly_103959.csv", 32): {
        "ef-accessctrl": (53.9, 7.6),
        "edf": (27.7, 2.4),
        "dlas-gpu": (17.8, 2.7),
    },
}
#: ``qosched`` as installed, and the same ``sim cluster`` command without the other command
#: groups' imports (``qosched.cli.main`` imports them all, torch included, at start-up).
WHOLE_COMMAND = "import sys; from qosched.cli.main import main; sys.exit(main())"
CLUSTER_COMMAND_ONLY = (
    "import argparse, sys; from qosched.cli import cluster; parser = argparse.ArgumentParser(); "
    "sim = parser.add_subparsers().add_parser('sim').add_subparsers(); "
    "cluster.add_sim_cluster(sim); args = parser.parse_args(); sys.exit(args.run(args))"
)
QOSCHED_PEER = {"ef-accessctrl": "elasticflow", "edf": "edf", "dlas-gpu": "las"}


def decision(args: argparse.Namespace) -> None:
    cluster = ClusterSpec.from_flags(args.nodes, 8)
    states = bench_cluster_sim.active_states(
        TP, args.active, args.active, cluster_workers=cluster.total_workers
    )
    print(f"# One qos allocate(): {args.active} active jobs on {cluster.describe()}\n")
    print("| policy | admitted | guaranteed | first ms | re-plan ms (median) | vs 5 ms |")
    print("|---|---|---|---|---|---|")
    for name in ("qos", "elasticflow"):
        policy = create_policy(name)
        admitted: list[JobState] = []
        for state in states:
            if policy.admit(state, ClusterView(0.0, cluster, tuple(admitted), 30.0)):
                admitted.append(state)
        guaranteed = sum(
            1 for s in admitted if getattr(policy, "is_guaranteed", lambda _: True)(s.job_id)
        )
        view = ClusterView(0.0, cluster, tuple(admitted), 30.0)
        times = []
        for _ in range(args.repeats + 1):
            started = time.process_time()
            policy.allocate(view)
            times.append(time.process_time() - started)
        replan = statistics.median(times[1:])
        print(
            f"| {name} | {len(admitted)} | {guaranteed} | {times[0] * 1e3:.1f} | "
            f"{replan * 1e3:.1f} | {replan / DECISION_TARGET_S:.2f}x |"
        )


def scaling(args: argparse.Namespace) -> None:
    cluster = ClusterSpec.from_flags(64, 8)
    policies = args.policies.split(",")
    print(f"# Jobs against simulation time, load 1.0 on {cluster.describe()}, seed 5\n")
    print("| jobs | policy | CPU s | decisions | ms per decision | DSR |")
    print("|---|---|---|---|---|---|")
    for jobs in (int(n) for n in args.jobs.split(",")):
        config = GeneratorConfig(jobs=jobs, load=1.0, cluster_workers=512, seed=5)
        trace = generate_trace(config, TP)
        for name in policies:
            started = time.process_time()
            result = simulate(cluster, TP, create_policy(name), trace)
            cpu_s = time.process_time() - started
            met = sum(o.met_deadline for o in result.outcomes) / len(result.outcomes)
            print(
                f"| {jobs} | {name} | {cpu_s:.1f} | {result.decisions} | "
                f"{cpu_s / result.decisions * 1e3:.2f} | {met:.3f} |",
                flush=True,
            )


def artifact(args: argparse.Namespace) -> None:
    recorded = ARTIFACT_S.get((args.trace.name, args.nodes))
    if recorded is None:
        known = ", ".join(f"{name} on {nodes}x8" for name, nodes in ARTIFACT_S)
        sys.exit(f"no artifact time recorded for {args.trace.name} on {args.nodes}x8 ({known})")
    print(f"# {args.trace.name} on {args.nodes}x8 GPUs: the whole command against the artifact\n")
    print(
        "| qosched policy (artifact's) | qosched wall s | qosched CPU s | artifact wall s "
        "| artifact CPU s | wall ratio | CPU ratio |"
    )
    print("|---|---|---|---|---|---|---|")
    for theirs, (their_wall, their_cpu) in recorded.items():
        ours = QOSCHED_PEER[theirs]
        for fidelity, entry in (
            ("sound", WHOLE_COMMAND),
            ("artifact", WHOLE_COMMAND),
            ("sound", CLUSTER_COMMAND_ONLY),
        ):
            command = [
                sys.executable, "-c", entry,
                "sim", "cluster", "--trace", str(args.trace), "--nodes", str(args.nodes),
                "--gpus-per-node", "8", "--policy", ours, "--fidelity", fidelity, "--json",
            ]  # fmt: skip
            if entry is CLUSTER_COMMAND_ONLY:
                fidelity += ", cluster command alone"
            before, started = _children_cpu_s(), time.perf_counter()
            subprocess.run(command, check=True, capture_output=True)
            wall, cpu = time.perf_counter() - started, _children_cpu_s() - before
            print(
                f"| {ours} --fidelity {fidelity} ({theirs}) | {wall:.1f} | {cpu:.1f} | "
                f"{their_wall:.1f} | {their_cpu:.1f} | {their_wall / wall:.1f}x | "
                f"{their_cpu / cpu:.1f}x |",
                flush=True,
            )


def _children_cpu_s() -> float:
    times = os.times()
    return times.children_user + times.children_system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("decision")
    p.add_argument("--nodes", type=int, default=128)
    p.add_argument("--active", type=int, default=1000)
    p.add_argument("--repeats", type=int, default=5)
    p.set_defaults(run=decision)
    p = commands.add_parser("scaling")
    p.add_argument("--jobs", default="1000,3000")
    p.add_argument("--policies", default="qos,elasticflow")
    p.set_defaults(run=scaling)
    p = commands.add_parser("artifact")
    p.add_argument("--trace", type=Path, required=True)
    p.add_argument("--nodes", type=int, required=True)
    p.set_defaults(run=artifact)
    args = parser.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
