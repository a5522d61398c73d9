"""The Kubernetes scheduler at scale: 1,000 jobs on 500 nodes, time per round and API writes
per round, against the strict in-process API server of the tests.

    nice -n 10 python bench/k8s_scale.py                 # 1,000 jobs, 500 nodes, qos
    nice -n 10 python bench/k8s_scale.py --compare       # the first round one by one, then now
    nice -n 10 python bench/k8s_scale.py --jobs 200 --nodes 100 --policy fifo
    nice -n 10 python bench/k8s_scale.py --max-rounds 1 --by-thread   # where round 1's CPU goes

Nodes have 8 GPUs each; jobs ask for 1 to 4 one-GPU pods (resnet50 at batch 64 in the A100
speed table, deadlines of 2 to 10 hours). One scheduler replica leads; rounds are run back to
back, each after the informers caught up with the server (so a round's time is the round's own
work: reading the cache, the policy, the writes), until a round writes nothing. Printed per
round: wall seconds; CPU seconds of the whole process ("proc s": scheduler, informers and
server together, which share the interpreter's lock: near what the round would take on an idle
machine) and of the scheduler's own threads ("sched s": the round's, the writes' senders, the
informers and the Lease timer, read from each thread's CPU clock; the rest of "proc s" is the
in-process API server's); the policy's share (admission and allocation) in wall seconds and
in CPU seconds of the round's thread ("cpu s": without the waits for the other threads and
other processes); writes by kind (patches, bindings, events, ...).

The API server runs in the same process (its request handling shares the interpreter's lock
with the scheduler), with 1 ms of latency per request: times are an upper bound for the
scheduler's own work and depend on the machine; compare rounds with one another in one run.
"""

from __future__ import annotations

import argparse
import functools
import random
import statistics
import sys
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests/backends/kubernetes"))

from fake_apiserver import FakeApiServer
from k8s_helpers import caught_up, client, job_set

from qosched.backends.kubernetes import jobs as J
from qosched.backends.kubernetes.scheduler import K8sScheduler, SchedulerConfig
from qosched.backends.kubernetes.send import IN_FLIGHT
from qosched.cluster.policies.base import Policy
from qosched.cluster.predict import OnlinePredictor
from qosched.cluster.throughput import ThroughputModel


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
    parser.add_argument("--in-flight", type=int, default=IN_FLIGHT)
    parser.add_argument(
        "--by-thread",
        action="store_true",
        help="print each round's CPU seconds by thread: round, send, informers, lease, server",
    )
    parser.add_argument(
        "--compare",
        action="store_true",
        help="first the first round as the code before issue 52 ran it (arrivals admitted one "
        "by one, writes one after another), then the rounds as now",
    )
    args = parser.parse_args()
    # The first prior fit imports SciPy (about 0.5 s of CPU), once per process: paid here, as by
    # a scheduler that has met a job before, so that neither path below is charged it.
    OnlinePredictor.from_curve(
        ThroughputModel.bundled("A100").prior_curve("resnet50", 64, 8), confidence=0.2
    )
    firsts = []
    if args.compare:
        print("== one by one: admission per arrival, writes one after another (in_flight 1)")
        firsts.append(("one by one", run(args, one_by_one=True, rounds=1)))
        print(f"\n== now: the burst admitted at once, in_flight {args.in_flight}")
    firsts.append((f"now, in_flight {args.in_flight}", run(args, one_by_one=False)))
    if args.compare:
        print(f"\nfirst round, {args.jobs} jobs arriving at once on {args.nodes} nodes:")
        print(f"{'path':<24} {'policy s':>8} {'cpu s':>6} {'wall s':>8}")
        for name, (wall, policy, cpu) in firsts:
            print(f"{name:<24} {policy:>8.3f} {cpu:>6.3f} {wall:>8.3f}")
    return 0


#: The scheduler's threads by role, by the start of their names: the round's (the main thread
#: here), the writes' senders, the informers' reflectors and the Lease's timer. Every other
#: thread is the API server's.
ROLES = {"MainThread": "round", "qosched-send": "send", "informer-": "informers", "lease": "lease"}


def thread_cpu() -> dict[int, tuple[str, float]]:
    """The role and CPU seconds so far of each live thread (by thread id), read from the
    thread's own CPU clock."""
    clocks = {}
    for thread in threading.enumerate():
        if thread.ident is None:
            continue
        role = next((r for start, r in ROLES.items() if thread.name.startswith(start)), "server")
        try:
            clocks[thread.ident] = (
                role,
                time.clock_gettime(time.pthread_getcpuclockid(thread.ident)),
            )
        except OSError:  # ended meanwhile
            continue
    return clocks


def cpu_since(before: dict[int, tuple[str, float]]) -> dict[str, float]:
    """CPU seconds by role since ``before`` (threads started since count from 0). A server
    thread that ended meanwhile is missing here (its connection closed); the scheduler's live
    as long as the run."""
    spent: dict[str, float] = {}
    for ident, (role, now) in thread_cpu().items():
        spent[role] = spent.get(role, 0.0) + now - before.get(ident, (role, 0.0))[1]
    return spent


def one_by_one_admission(policy):
    """The policy judging each arrival with a view of its own, as before issue 52: the base
    class's ``admit_arrivals``, which calls ``admit`` per job."""
    policy.admit_arrivals = functools.partial(Policy.admit_arrivals, policy)
    return policy


def run(args: argparse.Namespace, *, one_by_one: bool, rounds: int | None = None):
    """Rounds until one writes nothing (at most ``rounds``); the first round's (wall s,
    policy s, policy CPU s)."""
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
        in_flight = 1 if one_by_one else args.in_flight
        print(
            f"{args.jobs} jobs ({pods} pods at first), {args.nodes} nodes x 8 GPUs, "
            f"policy {args.policy}, in_flight {in_flight}"
        )
        config = SchedulerConfig(
            identity="bench", policy=args.policy, tick_s=1.0, in_flight=in_flight
        )
        sched = K8sScheduler(client(api.url, agent="qosched/bench"), config)
        sched.start()  # the Lease renewed on its own timer, as in the Deployment
        while not sched.lease.leading:
            time.sleep(0.05)
        api.stopping.append(sched.stop)
        policy_s = [0.0, 0.0]  # wall, and CPU of the round's thread (no waits for others)
        depth = [0]  # admit_arrivals calls admit: only the outer call is timed
        make_policy = sched.make_policy

        def timed_policy():
            """The policy of each new term, its decisions timed."""
            policy = make_policy()
            if one_by_one:
                one_by_one_admission(policy)
            for name in ("admit", "admit_arrivals", "allocate"):
                setattr(policy, name, timed(getattr(policy, name)))
            return policy

        def timed(method):
            def call(*args):
                depth[0] += 1
                started, cpu = time.perf_counter(), time.thread_time()
                try:
                    return method(*args)
                finally:
                    depth[0] -= 1
                    if not depth[0]:
                        policy_s[0] += time.perf_counter() - started
                        policy_s[1] += time.thread_time() - cpu

            return call

        sched.make_policy = timed_policy
        print(
            f"{'round':>5} {'wall s':>8} {'proc s':>7} {'sched s':>7} {'policy s':>8} "
            f"{'cpu s':>6} {'writes':>7}  by kind"
        )
        walls, writes_per_round, first = [], [], None
        for number in range(1, (rounds or args.max_rounds) + 1):
            caught_up(sched, api, timeout_s=120)
            before = len(api.writes)
            policy_s[:] = [0.0, 0.0]
            threads = thread_cpu()
            started, process = time.perf_counter(), time.process_time()
            report = sched.step()
            wall = time.perf_counter() - started
            process = time.process_time() - process
            spent = cpu_since(threads)
            own = sum(t for role, t in spent.items() if role != "server")
            first = first or (wall, *policy_s)
            kinds = Counter(kind_of(w.method, w.path) for w in api.writes[before:])
            kinds.pop("put", None)  # the Lease's renewals
            writes = sum(kinds.values())
            walls.append(wall)
            writes_per_round.append(writes)
            shown = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
            print(
                f"{number:>5} {wall:>8.3f} {process:>7.3f} {own:>7.3f} {policy_s[0]:>8.3f} "
                f"{policy_s[1]:>6.3f} {writes:>7}  {shown}"
            )
            if args.by_thread:
                split = ", ".join(f"{role} {t:.3f}" for role, t in sorted(spent.items()))
                print(f"      CPU s by thread: {split}")
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
        if rounds is None:
            quiet = walls[-1]
            print(f"a round with nothing to change: {quiet:.3f} s, {writes_per_round[-1]} writes")
    return first


if __name__ == "__main__":
    raise SystemExit(main())
