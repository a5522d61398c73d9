"""Speed of the cluster simulator and of one scheduling decision.

    python bench/bench_cluster_sim.py            # all three parts (about a minute on 2 cores)
    python bench/bench_cluster_sim.py --quick    # smaller sizes

1. A 1,000-job generated trace on 16x8 GPUs under every policy: wall seconds, and each policy's
   time as a ratio to fifo's on the same trace in the same process. Target: elasticflow < 2 s.
2. A 100,000-job generated trace under edf. Target: < 60 s.
3. The cost of one decision against the number of active jobs (k), per policy: microseconds per
   decision and per decision per job, after one warm-up call (qos builds a predictor for each
   job it has not met). Flat per-job cost = linear growth.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import numpy as np

from qosched.cluster.generate import GeneratorConfig, generate_trace
from qosched.cluster.metrics import summarize
from qosched.cluster.policies import create_policy, policy_names
from qosched.cluster.simulator import simulate
from qosched.cluster.spec import ClusterSpec
from qosched.cluster.state import ClusterView, JobState, Phase
from qosched.cluster.throughput import ThroughputModel

CLUSTER = ClusterSpec.from_flags(16, 8)


def trace_runs(throughputs: ThroughputModel, jobs: int, load: float) -> None:
    trace = generate_trace(
        GeneratorConfig(jobs=jobs, load=load, cluster_workers=CLUSTER.total_workers, seed=11),
        throughputs,
    )
    print(f"\n## {jobs} jobs, offered load {load}, {CLUSTER.describe()}")
    print(f"{'policy':<12} {'wall s':>8} {'x fifo':>7} {'decisions':>9} {'DSR':>6}")
    walls = {}
    for name in ["fifo", *(n for n in policy_names() if n != "fifo")]:
        summary = summarize(simulate(CLUSTER, throughputs, create_policy(name), trace))
        walls[name] = summary.wall_s
        print(
            f"{name:<12} {summary.wall_s:8.2f} {summary.wall_s / walls['fifo']:7.1f} "
            f"{summary.decisions:9d} {summary.deadline_satisfactory_ratio:6.1%}"
        )


def big_run(throughputs: ThroughputModel, jobs: int) -> None:
    trace = generate_trace(
        GeneratorConfig(jobs=jobs, load=0.9, cluster_workers=CLUSTER.total_workers, seed=12),
        throughputs,
    )
    summary = summarize(simulate(CLUSTER, throughputs, create_policy("edf"), trace))
    print(
        f"\n## {jobs} jobs under edf, load 0.9: {summary.wall_s:.1f} s "
        f"({summary.wall_s / jobs * 1e6:.0f} us per job), {summary.decisions} decisions"
    )


def active_states(
    throughputs: ThroughputModel, k: int, seed: int, cluster_workers: int = 128
) -> list[JobState]:
    """k jobs all submitted at 0 with their generated slack, a third of them part-done."""
    rng = np.random.default_rng(seed)
    config = GeneratorConfig(jobs=k, load=1.0, cluster_workers=cluster_workers, seed=seed)
    states = []
    for spec in generate_trace(config, throughputs):
        if spec.deadline_s is not None:
            spec = replace(spec, submit_s=0.0, deadline_s=spec.deadline_s - spec.submit_s)
        state = JobState(spec, throughputs.curve(spec.model, spec.batch_size))
        if rng.random() < 1 / 3:
            state.phase, state.started_s = Phase.RUNNING, 0.0
            state.iterations_done = spec.iterations * rng.random() * 0.5
            state.attained_worker_s = float(rng.uniform(0, 20000))
        states.append(state)
    return states


def active_view(throughputs: ThroughputModel, k: int, seed: int) -> ClusterView:
    return ClusterView(0.0, CLUSTER, tuple(active_states(throughputs, k, seed)), 30.0)


def decision_cost(throughputs: ThroughputModel, sizes: list[int]) -> None:
    print("\n## one decision: microseconds (per active job in brackets)")
    print(f"{'policy':<12}" + "".join(f"{'k=' + str(k):>18}" for k in sizes))
    views = {k: active_view(throughputs, k, seed=k) for k in sizes}
    for name in policy_names():
        cells = []
        for k in sizes:
            policy = create_policy(name)
            policy.allocate(views[k])  # warm-up: a policy meeting jobs for the first time
            repeats = max(3, 2000 // k)
            start = time.perf_counter()
            for _ in range(repeats):
                policy.allocate(views[k])
            per = (time.perf_counter() - start) / repeats * 1e6
            cells.append(f"{per:10.0f} [{per / k:5.1f}]")
        print(f"{name:<12}" + "".join(f"{c:>18}" for c in cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    throughputs = ThroughputModel.bundled("A100")
    trace_runs(throughputs, 1000, 1.0)
    big_run(throughputs, 20_000 if args.quick else 100_000)
    decision_cost(throughputs, [50, 100, 200, 400] if args.quick else [50, 100, 200, 400, 800])


if __name__ == "__main__":
    main()
