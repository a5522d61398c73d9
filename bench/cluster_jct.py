"""Completion time compared fairly: `qos` against its peers on the jobs every one of them finished.

    python bench/cluster_jct.py [--jobs 1000] [--load 1.0] [--seeds 1 2]
                                [--policies qos,qos:completion,elasticflow,pollux]

Trace: as bench/cluster_policy_table.py makes it (Poisson arrivals on a 16x8-GPU cluster, A100
speed tables, lognormal durations of median 1 h, deadlines at U(0.5, 1.5) x the duration on the
requested GPUs, 10% best-effort jobs). Printed per seed and policy: DSR, mean JCT over the jobs
every listed policy finished (`common_jct_s`), mean JCT of those that are best effort
(`best_effort_jct_s`), and, for each `qos` run, each as a ratio to the best (lowest) of the
other policies. ``qos:ORDER`` is `qos` with ``spare_order=ORDER``.
"""

from __future__ import annotations

import argparse

from qosched.cluster.generate import GeneratorConfig, generate_trace
from qosched.cluster.metrics import summarize_runs
from qosched.cluster.policies import Policy, create_policy
from qosched.cluster.simulator import simulate
from qosched.cluster.spec import ClusterSpec
from qosched.cluster.throughput import ThroughputModel

HOUR = 3600.0


def ratio(own: float | None, others: list[float | None]) -> str:
    known = [v for v in others if v is not None]
    if own is None or not known:
        return "—"
    return f"{own / min(known):.2f}x"


def make_policy(entry: str) -> Policy:
    """A registered name, or ``qos:ORDER`` for `qos` with that spare order."""
    name, _, order = entry.partition(":")
    return create_policy(name, spare_order=order) if order else create_policy(name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--load", type=float, default=1.0)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--policies", default="qos,qos:completion,elasticflow,pollux")
    args = parser.parse_args()
    names = args.policies.split(",")
    cluster = ClusterSpec.from_flags(16, 8)
    throughputs = ThroughputModel.bundled("A100")
    print(
        "| seed | policy | DSR | met / deadline jobs | common jobs | common JCT h | BE JCT h "
        "| common JCT / best other | BE JCT / best other | sim s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for seed in args.seeds:
        config = GeneratorConfig(
            jobs=args.jobs,
            load=args.load,
            cluster_workers=cluster.total_workers,
            best_effort_fraction=0.1,
            seed=seed,
        )
        trace = generate_trace(config, throughputs)
        results = [simulate(cluster, throughputs, make_policy(n), trace) for n in names]
        summaries = summarize_runs(results)
        peers = [s for n, s in zip(names, summaries, strict=True) if not n.startswith("qos")]
        for name, s in zip(names, summaries, strict=True):
            ours = name.startswith("qos")
            common = ratio(s.common_jct_s, [o.common_jct_s for o in peers]) if ours else ""
            be = ratio(s.best_effort_jct_s, [o.best_effort_jct_s for o in peers]) if ours else ""
            be_h = "-" if s.best_effort_jct_s is None else f"{s.best_effort_jct_s / HOUR:.3f}"
            common_h = "-" if s.common_jct_s is None else f"{s.common_jct_s / HOUR:.3f}"
            print(
                f"| {seed} | {name} | {s.deadline_satisfactory_ratio:.1%} | "
                f"{s.deadline_met}/{s.deadline_jobs} | {s.common_jobs} | {common_h} | {be_h} | "
                f"{common} | {be} | {s.wall_s:.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
