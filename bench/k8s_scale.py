"""The Kubernetes scheduler at scale: 1,000 jobs on 500 nodes, time per round and API writes
per round, against the strict in-process API server of the tests.

    nice -n 10 python bench/k8s_scale.py                 # 1,000 jobs, 500 nodes, qos
    nice -n 10 python bench/k8s_scale.py --jobs 200 --nodes 100 --policy fifo

Nodes have 8 GPUs each; jobs ask for 1 to 4 one-GPU pods (resnet50 at batch 64 in the A100
speed table, deadlines of 2 to 10 hours). One scheduler replica leads; rounds are run back to
back, each after the informers caught up with the server (so a round's time is the round's own
work: reading the cache, the policy, the writes), until a round writes nothing. Printed per
round: wall seconds, the policy's share (admission and allocation), writes by kind (patches,
bindings, events, ...).

The API server runs in the same process (its request handling shares the interpreter's lock
with the scheduler), with 1 ms of latency per request: times are an upper bound for the
scheduler's own work and depend on the machine; compare rounds with one another in one run.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests/backends/kubernetes"))

from fake_apiserver import FakeApiServer
from k8s_helpers import caught_up, client, job_set

from qosched.backends.kubernetes import jobs as J
from qosched.backends.kubernetes.scheduler import K8sScheduler, SchedulerConfig


def kind_of(method: str, path: str) -> str:
    if path.endswith("/binding"):
        return "bind"
    if "/events" in path:
        return "event"
    if path.endswith("/status"):
        return "pod-status"
    if "/statefulsets/" in path:
        return "sts-patch"
    return f"{method.lower()}-pod" if "/pods/" in path else method.lower()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--policy", default="qos")
    parser.add_argument("--max-rounds", type=int, default=12)
    parser.add_argument("--seed", type=int, default=14)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with FakeApiServer(bookmark_every_s=1.0) as api:
        for n in range(args.nodes):
            api.add_node(f"n{n:04d}", gpus=8, cpu="64", memory="512Gi")
        pods = 0
        for j in range(args.jobs):
            replicas = rng.randint(1, 4)
            pods += replicas
            notes = {
                J.MODEL: "resnet50",
                J.BATCH_SIZE: "64",
                J.ITERATIONS: str(rng.randint(5_000, 50_000)),
                J.DEADLINE: f"{rng.randint(2, 10)}h",
                J.REQUESTED_WORKERS: str(replicas),
            }
            api.create("statefulsets", job_set(f"j{j:04d}", replicas=replicas, annotations=notes))
        print(
            f"{args.jobs} jobs ({pods} pods at first), {args.nodes} nodes x 8 GPUs, "
            f"policy {args.policy}"
        )
        config = SchedulerConfig(identity="bench", policy=args.policy, tick_s=1.0)
        sched = K8sScheduler(client(api.url, agent="qosched/bench"), config)
        sched.start()  # the Lease renewed on its own timer, as in the Deployment
        while not sched.lease.leading:
            time.sleep(0.05)
        api.stopping.append(sched.stop)
        policy_s = [0.0]
        make_policy = sched.make_policy

        def timed_policy():
            """The policy of each new term, its decisions timed."""
            policy = make_policy()
            for name in ("admit", "allocate"):
                setattr(policy, name, timed(getattr(policy, name)))
            return policy

        def timed(method):
            def call(*args):
                started = time.perf_counter()
                try:
                    return method(*args)
                finally:
                    policy_s[0] += time.perf_counter() - started

            return call

        sched.make_policy = timed_policy
        print(f"{'round':>5} {'wall s':>8} {'policy s':>8} {'writes':>7}  by kind")
        walls, writes_per_round = [], []
        for number in range(1, args.max_rounds + 1):
            caught_up(sched, api, timeout_s=120)
            before = len(api.writes)
            policy_s[0] = 0.0
            started = time.perf_counter()
            report = sched.step()
            wall = time.perf_counter() - started
            kinds = Counter(kind_of(w.method, w.path) for w in api.writes[before:])
            kinds.pop("put", None)  # the Lease's renewals
            writes = sum(kinds.values())
            walls.append(wall)
            writes_per_round.append(writes)
            shown = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
            print(f"{number:>5} {wall:>8.3f} {policy_s[0]:>8.3f} {writes:>7}  {shown}")
            if report.errors:
                print(f"      {len(report.errors)} errors, first: {report.errors[0]}")
            if writes == 0 and report.synced and report.leading and number > 1:
                break
        bound = sum(1 for p in api.list("pods") if p["spec"].get("nodeName"))
        print(
            f"\nbound {bound} pods; median round {statistics.median(walls):.3f} s, "
            f"slowest {max(walls):.3f} s; writes per round: median "
            f"{statistics.median(writes_per_round):.0f}, most {max(writes_per_round)}"
        )
        quiet = walls[-1]
        print(f"a round with nothing to change: {quiet:.3f} s, {writes_per_round[-1]} writes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
