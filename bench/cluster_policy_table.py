"""Every policy on generated traces of increasing load, as a Markdown table.

    python bench/cluster_policy_table.py [--jobs 1000] [--loads 0.5 1.0 2.0] [--seed 1]

Traces: Poisson arrivals on a 16x8-GPU cluster, A100 speed tables, lognormal durations (median
1 h), deadlines at U(0.5, 1.5) x the job's duration on its requested GPUs, 10% best-effort jobs.
"""

from __future__ import annotations

import argparse

from qosched.cluster.generate import GeneratorConfig, generate_trace
from qosched.cluster.metrics import summarize
from qosched.cluster.policies import create_policy, policy_names
from qosched.cluster.simulator import simulate
from qosched.cluster.spec import ClusterSpec
from qosched.cluster.throughput import ThroughputModel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--loads", type=float, nargs="+", default=[0.5, 1.0, 2.0])
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    cluster = ClusterSpec.from_flags(16, 8)
    throughputs = ThroughputModel.bundled("A100")
    print(
        "| load | policy | DSR | met / deadline jobs | declined | avg JCT h | p95 JCT h (ddl) "
        "| BE mean JCT h | GPU util | makespan h | re-allocs | sim s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for load in args.loads:
        config = GeneratorConfig(
            jobs=args.jobs,
            load=load,
            cluster_workers=cluster.total_workers,
            best_effort_fraction=0.1,
            seed=args.seed,
        )
        trace = generate_trace(config, throughputs)
        for name in policy_names():
            s = summarize(simulate(cluster, throughputs, create_policy(name), trace))
            be = s.jct_best_effort.mean_s
            print(
                f"| {load:g} | {name} | {s.deadline_satisfactory_ratio:.1%} | "
                f"{s.deadline_met}/{s.deadline_jobs} | {s.declined} | {s.avg_jct_s / 3600:.2f} | "
                f"{s.jct_deadline.p95_s / 3600:.2f} | "
                f"{'-' if be is None else f'{be / 3600:.2f}'} | {s.utilization:.1%} | "
                f"{s.makespan_s / 3600:.1f} | {s.reallocations} | {s.wall_s:.2f} |"
            )


if __name__ == "__main__":
    main()
