"""`qos` admitting a burst of arrivals, in one call against one by one: CPU seconds by burst size.

    python bench/qos_burst_admission.py                       # 500 to 4,000 jobs, 500 nodes
    python bench/qos_burst_admission.py --jobs 1000 --nodes 500

The jobs of bench/k8s_scale.py (resnet50 at batch 64, 1 to 4 workers requested, 5,000 to 50,000
iterations, deadlines 2 to 10 hours, seeded) arrive at one instant on nodes of 8 workers, with
the prior curve the Kubernetes scheduler gives them. "at once" is `admit_arrivals` as `qos`
implements it; "one by one" is the base class's, which asks `admit` of each arrival with a view
of its own, as the Kubernetes scheduler did before. Both must give the same admissions (checked
here). The one-time import of SciPy by the first prior fit is paid before either is timed.
"""

from __future__ import annotations

import argparse
import functools
import random
import time

from qosched.cluster.admission import admit_arrivals
from qosched.cluster.job import JobSpec
from qosched.cluster.policies import create_policy
from qosched.cluster.policies.base import Policy
from qosched.cluster.predict import OnlinePredictor
from qosched.cluster.spec import ClusterSpec
from qosched.cluster.state import ClusterView, JobState
from qosched.cluster.throughput import ThroughputModel

NOW = 1_000_000.0


def burst(count: int, cluster: ClusterSpec, seed: int) -> list[JobState]:
    rng = random.Random(seed)
    tables = ThroughputModel.bundled("A100")
    curve = tables.prior_curve("resnet50", 64, cluster.total_workers)
    jobs = []
    for j in range(count):
        workers, iterations = rng.randint(1, 4), rng.randint(5_000, 50_000)
        deadline = NOW + rng.randint(2, 10) * 3600
        spec = JobSpec(f"j{j:05d}", NOW, "resnet50", 64, iterations, deadline, workers)
        jobs.append(JobState(spec, curve))
    return jobs


def admit(jobs: list[JobState], cluster: ClusterSpec, *, at_once: bool):
    """The admissions and the CPU seconds they took."""
    policy = create_policy("qos")
    if not at_once:
        policy.admit_arrivals = functools.partial(Policy.admit_arrivals, policy)
    view = ClusterView(NOW, cluster, [], 30.0)
    started = time.process_time()
    answers = admit_arrivals(policy, jobs, view, best_effort=lambda job: False)
    return answers, time.process_time() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[500, 1000, 2000, 4000])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--one-by-one-up-to", type=int, default=2000)
    args = parser.parse_args()
    cluster = ClusterSpec(1, args.nodes, 8)
    tables = ThroughputModel.bundled("A100")
    OnlinePredictor.from_curve(tables.prior_curve("resnet50", 64, 8), confidence=0.2)
    print(f"{'jobs':>6} {'at once s':>10} {'one by one s':>13}  guaranteed")
    for count in args.jobs:
        jobs = burst(count, cluster, args.seed)
        together, fast = admit(jobs, cluster, at_once=True)
        slow = "-"
        if count <= args.one_by_one_up_to:
            each, seconds = admit(burst(count, cluster, args.seed), cluster, at_once=False)
            if each != together:
                raise SystemExit(f"{count} jobs: the admissions differ")
            slow = f"{seconds:.2f}"
        guaranteed = sum(1 for a in together.values() if a == "guaranteed")
        print(f"{count:>6} {fast:>10.2f} {slow:>13}  {guaranteed}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
