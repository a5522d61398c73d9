"""How well qos predicts a job's speed as the job progresses, end to end in the simulator.

    python bench/predict_accuracy.py [--jobs 300] [--seed 1]

A generated trace on 8x8 GPUs (A100 tables) is simulated under `qos` with hidden per-job speeds
(speed factor lognormal(0, 0.3), scaling exponent normal(0, 0.1), 5% per-decision noise). At
every decision, for every running job, the predictor's expected speed on the job's current GPUs
is compared with the simulator's true speed there (before noise), bucketed by how much of the job
is done. The error of the speed is the error of the predicted remaining time at that allocation.
The table's own speed (what a policy without prediction plans with) is shown for contrast.
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import numpy as np

from qosched.cluster.generate import GeneratorConfig, generate_trace
from qosched.cluster.policies.qos import QualityOfService
from qosched.cluster.simulator import ClusterSimulator, SimConfig
from qosched.cluster.spec import ClusterSpec
from qosched.cluster.state import ClusterView, Decision
from qosched.cluster.throughput import ThroughputModel

BUCKETS = [
    (0.0, 0.01),
    (0.01, 0.02),
    (0.02, 0.05),
    (0.05, 0.10),
    (0.10, 0.25),
    (0.25, 0.5),
    (0.5, 1.0),
]


class RecordingQoS(QualityOfService):
    """qos that, before deciding, scores its own predictions against the simulator's truth."""

    name = "qos"

    def __init__(self) -> None:
        super().__init__()
        self.simulator: ClusterSimulator | None = None
        self.errors: dict[tuple[float, float], list[tuple[float, float]]] = defaultdict(list)

    def allocate(self, view: ClusterView) -> Decision:
        decision = super().allocate(view)  # observes progress first
        for job in view.jobs:
            if not job.workers or job.job_id not in self._jobs:
                continue
            truth = self.simulator.true_rate(job)
            predicted = self._jobs[job.job_id].predictor.predict(job.workers).rate
            table = job.curve.rate(job.workers)
            done = job.iterations_done / job.spec.iterations
            for bucket in BUCKETS:
                if bucket[0] <= done < bucket[1]:
                    self.errors[bucket].append(
                        (abs(predicted - truth) / truth, abs(table - truth) / truth)
                    )
        return decision


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    throughputs = ThroughputModel.bundled("A100")
    cluster = ClusterSpec.from_flags(8, 8)
    trace = generate_trace(
        GeneratorConfig(jobs=args.jobs, load=1.0, cluster_workers=64, seed=args.seed), throughputs
    )
    policy = RecordingQoS()
    config = SimConfig(speed_sigma=0.3, scaling_sigma=0.1, noise=0.05, seed=args.seed)
    simulator = ClusterSimulator(cluster, throughputs, policy, trace, config)
    policy.simulator = simulator
    simulator.run()
    print(
        "| job done | samples | qos median error | qos p90 error | qos within 10% "
        "| table median error | table within 10% |"
    )
    print("|---|---|---|---|---|---|---|")
    for bucket in BUCKETS:
        rows = np.array(policy.errors[bucket])
        if not len(rows):
            continue
        ours, table = rows[:, 0], rows[:, 1]
        print(
            f"| {bucket[0]:.0%}-{bucket[1]:.0%} | {len(rows)} | {np.median(ours):.1%} | "
            f"{np.percentile(ours, 90):.1%} | {np.mean(ours <= 0.10):.0%} | "
            f"{np.median(table):.1%} | {np.mean(table <= 0.10):.0%} |"
        )


if __name__ == "__main__":
    main()
