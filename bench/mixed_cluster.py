"""Policies on a cluster of two GPU types: DSR and JCT on A100 + T4 nodes, beside A100 alone.

    python bench/mixed_cluster.py [--jobs 500] [--loads 0.5 1.0] [--seed 1]
                                  [--policies qos,elasticflow,fifo]

Trace: generated from the A100 tables (`qosched trace generate`: Poisson arrivals, lognormal
durations of median 1 h on the requested GPUs, deadlines at U(0.5, 1.5) x that duration, 10%
best effort), its load counted against 128 GPUs. Clusters, 8 GPUs a node: 8 A100 nodes and
8 T4 nodes (128 GPUs), the same 8 A100 nodes alone (64), and 16 A100 nodes (128). The bundled T4
tables measure none of the trace's (model, batch size), so every job's T4 speed is the A100
speed times the rule's 0.179 (docs/simulator.md, "Mixed GPU types"). Printed per load, cluster
and policy: DSR, deadlines met, declined jobs, mean JCT over the jobs every policy finished on
that cluster (`common_jct_s`), mean JCT of all finished jobs, jobs that ran on a T4, gangs the
policy gave workers that found room in no one type (`SimResult.displaced`), and the
simulation's wall time.
"""

from __future__ import annotations

import argparse

from qosched.cluster.generate import GeneratorConfig, generate_trace
from qosched.cluster.metrics import summarize_runs
from qosched.cluster.policies import create_policy
from qosched.cluster.simulator import simulate
from qosched.cluster.spec import ClusterSpec
from qosched.cluster.throughput import ThroughputModel

HOUR = 3600.0
CLUSTERS = {
    "8 A100 + 8 T4 nodes": ClusterSpec(16, 1, 8, gpu_types=(("A100", 8), ("T4", 8))),
    "8 A100 nodes": ClusterSpec(8, 1, 8),
    "16 A100 nodes": ClusterSpec(16, 1, 8),
}


def hours(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / HOUR:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--loads", type=float, nargs="+", default=[0.5, 1.0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--policies", default="qos,elasticflow,fifo")
    args = parser.parse_args()
    names = args.policies.split(",")
    a100 = ThroughputModel.bundled("A100")
    print(
        "| load | cluster | policy | DSR | met / deadline jobs | declined | common JCT h "
        "| mean JCT h | jobs on T4 | displaced | sim s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for load in args.loads:
        config = GeneratorConfig(
            jobs=args.jobs,
            load=load,
            cluster_workers=128,
            best_effort_fraction=0.1,
            seed=args.seed,
        )
        trace = generate_trace(config, a100)
        for label, cluster in CLUSTERS.items():
            results = [simulate(cluster, a100, create_policy(n), trace) for n in names]
            for name, result, s in zip(names, results, summarize_runs(results), strict=True):
                on_t4 = sum("T4" in o.gpu_types for o in result.outcomes)
                dsr = s.deadline_satisfactory_ratio
                print(
                    f"| {load:g} | {label} | {name} | {'-' if dsr is None else f'{dsr:.1%}'} | "
                    f"{s.deadline_met}/{s.deadline_jobs} | {s.declined} | "
                    f"{hours(s.common_jct_s)} | {hours(s.avg_jct_s)} | "
                    f"{on_t4 if cluster.gpu_types else '-'} | {result.displaced} | "
                    f"{s.wall_s:.1f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
