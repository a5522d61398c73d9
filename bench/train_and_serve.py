"""Training and serving on one cluster: the peers of issue 53 in one run on a small mixed trace.

    python bench/train_and_serve.py --pods openb_pod_list_default.csv \\
        --nodes openb_node_list_gpu_node.csv [--from-day 147] [--days 2] [--node-count 24] \\
        [--seed 0] [--tightness 1.0 2.0] [--gpu A100] [--window-s 60] \\
        [--service-goal 1.05] [--cache bench/out/train_and_serve/costs.pkl] \\
        [--restart-s 30] [--checkpoint-s 600]

The mixed trace: the pods of Alibaba's ``cluster-trace-gpu-v2023`` created in ``--days`` days
from ``--from-day`` (times shifted to start at 0), with workloads by the import's seeded rule
(``cluster/pods/assign.py``: LS pods are services, BE pods training), each training job given
an ElasticFlow-style deadline, creation + U(LOW, HIGH) x its work alone (``--tightness``,
drawn per pod name: at LOW >= 1 a job alone on its GPUs meets it, so a miss comes from sharing
or waiting), on ``--node-count`` GPU nodes drawn from the node list (seeded). Every model's
cost comes from the GPU level's kernel estimates on ``--gpu`` (kept in ``--cache``).
``--service-goal R`` gives every service the goal ``p99_slowdown=R`` instead of the rule's.
``--restart-s`` and ``--checkpoint-s`` set the ``harvest`` peer's restart pause and checkpoint
interval (``cluster/pods/harvest.py``).

The peers, each placing by FGD over the trace's clock (``cluster/pods/replay.py``):

- ``dedicated``: services share GPUs with services only (``--colocation apart``), ``fggr``;
- ``fgd``: FGD packing without any interference model (``any``), ``fggr``;
- ``time-slicing``: FGD packing, GPUs shared in turns, Gandiva-like (``any``, time-slicing);
- ``qosched``: FGD packing where the co-location surrogate predicts every service's goal kept
  (``goals``), ``fggr``, waiting pods tried by priority (services before training);
- ``harvest``: qosched harvesting with promises (``harvest``, ``cluster/pods/harvest.py``):
  a service that finds no room evicts training, training shares a serving GPU only where the
  service's goal holds at its peak rate, deadlines promised on the pessimistic speed; by
  priority.

The first three try waiting pods in arrival order.

Printed: per peer, the services' share of windows meeting the goal and of services meeting it
in 99% of their windows, training DSR and JCT, the cluster's mean GPUs allocated and
fragmented and its utilisation; for ``harvest`` the deadlines promised and met, the
evictions, moves and GPU-seconds they lost; then the services whose goal FGD's packing broke,
worst first,
with the slowdown the surrogate predicts against the one their goal allows.
"""

from __future__ import annotations

import argparse
import pickle
import random
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from qosched.cluster.pods.assign import assign_workloads
from qosched.cluster.pods.costs import ModelCost, TimeSlicedSharing
from qosched.cluster.pods.fragmentation import TaskMix
from qosched.cluster.pods.harvest import DEFAULT_CHECKPOINT_S, DEFAULT_RESTART_S, Harvest
from qosched.cluster.pods.nodes import PodCluster, read_node_list
from qosched.cluster.pods.policies import create_pod_policy
from qosched.cluster.pods.replay import ReplayRun
from qosched.cluster.pods.replays import replay
from qosched.cluster.pods.trace import Pod, import_alibaba_gpu_2023, is_pod_trace, read_pod_trace
from qosched.cluster.pods.workloads import ServiceSpec, TrainingSpec
from qosched.colocate import SurrogateSharing, estimated_costs
from qosched.core.goals import Goal
from qosched.gpushare.colocation import bundled

DAY = 86400.0
#: (peer, colocation, sharing, order of the waiting pods)
PEERS = (
    ("dedicated", "apart", "fggr", "arrival"),
    ("fgd", "any", "fggr", "arrival"),
    ("time-slicing", "any", "time-slicing", "arrival"),
    ("qosched", "goals", "fggr", "priority"),
    ("harvest", "harvest", "fggr", "priority"),
)


def days_of(pods: Sequence[Pod], from_day: float, days: float) -> list[Pod]:
    """The pods created in ``[from_day, from_day + days)`` days, their times shifted so that the
    window starts at 0."""
    start, end = from_day * DAY, (from_day + days) * DAY
    kept = []
    for pod in pods:
        if start <= pod.creation_s < end:
            deletion = None if pod.deletion_s is None else pod.deletion_s - start
            kept.append(replace(pod, creation_s=pod.creation_s - start, deletion_s=deletion))
    return kept


def with_deadlines(pods: Sequence[Pod], tightness: tuple[float, float], seed: int) -> list[Pod]:
    """Each training job's deadline: creation + U(low, high) x its work, drawn from a generator
    seeded by ``(seed, pod name)``."""
    low, high = tightness
    out = []
    for pod in pods:
        w = pod.workload
        if isinstance(w, TrainingSpec):
            factor = random.Random(f"deadline:{seed}:{pod.pod_id}").uniform(low, high)
            w = replace(w, deadline_s=pod.creation_s + factor * w.work_s)
            pod = replace(pod, workload=w)
        out.append(pod)
    return out


def with_goal(pods: Sequence[Pod], slowdown: float) -> list[Pod]:
    """Every service's goal made ``p99_slowdown=slowdown``."""
    goal = Goal("p99_slowdown", slowdown)
    return [
        replace(pod, workload=replace(pod.workload, goal=goal))
        if isinstance(pod.workload, ServiceSpec)
        else pod
        for pod in pods
    ]


def sample_nodes(cluster: PodCluster, count: int, seed: int) -> PodCluster:
    """``count`` GPU nodes drawn from ``cluster`` (seeded), in the node list's order."""
    gpu_nodes = [n for n in cluster.nodes if n.gpus]
    if count > len(gpu_nodes):
        raise SystemExit(f"--node-count {count}: the node list has {len(gpu_nodes)} GPU nodes")
    chosen = set(random.Random(seed).sample(range(len(gpu_nodes)), count))
    return PodCluster(tuple(n for i, n in enumerate(gpu_nodes) if i in chosen))


def cached_costs(gpu: str, cache: Path):
    """The models' costs on ``gpu``, kept in ``cache`` between runs."""
    known: dict[tuple[str, int], ModelCost] = {}
    if cache.exists():
        known = pickle.loads(cache.read_bytes())
    estimate = estimated_costs(gpu)

    def costs(model: str, batch: int) -> ModelCost:
        key = (model, batch)
        if key not in known:
            print(f"estimating {model} batch {batch} on {gpu} ...", file=sys.stderr)
            known[key] = estimate(model, batch)
            cache.parent.mkdir(parents=True, exist_ok=True)
            cache.write_bytes(pickle.dumps(known))
        return known[key]

    return costs


def row(name: str, run: ReplayRun) -> str:
    s, t, c = run.services_json() or {}, run.training_json() or {}, run.cluster_json()

    def pct(value) -> str:
        return "-" if value is None else f"{100 * value:.1f}%"

    jct = t.get("avg_jct_s")
    return (
        f"| {name} | {pct(s.get('windows_met_ratio'))} | {pct(s.get('services_meeting_99_ratio'))} "
        f"| {pct(t.get('deadline_satisfactory_ratio'))} | {'-' if jct is None else f'{jct:.0f}'} "
        f"| {c['mean_allocated_gpus']:.1f} | {c['peak_allocated_gpus']:.1f} "
        f"| {c['mean_fragmented_gpus']:.1f} | {pct(c['gpu_utilization'])} | {run.wall_s:.1f} |"
    )


def broken(run: ReplayRun, pods: Sequence[Pod], top: int = 8) -> list[str]:
    """The services of ``run`` that missed a window, worst share first."""
    by_id = {pod.pod_id: pod for pod in pods}
    missed = [s for s in run.services if s.windows_met < s.windows]
    missed.sort(key=lambda s: (s.windows_met / s.windows, s.pod_id))
    lines = []
    for s in missed[:top]:
        pod = by_id[s.pod_id]
        w = pod.workload
        assert isinstance(w, ServiceSpec)
        lines.append(
            f"| {s.pod_id} | {w.model} | {pod.gpu_milli} | {w.rate.at(0):g} | {w.goal.describe()} "
            f"| {s.worst_slowdown:.2f}x | {s.allowed_slowdown:.2f}x "
            f"| {s.windows_met}/{s.windows} |"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", required=True, help="Alibaba's pod list or a pod trace")
    parser.add_argument("--nodes", required=True, help="Alibaba's node list")
    parser.add_argument("--from-day", type=float, default=147.0)
    parser.add_argument("--days", type=float, default=2.0)
    parser.add_argument("--node-count", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tightness", type=float, nargs=2, default=(1.0, 2.0))
    parser.add_argument("--gpu", default="A100")
    parser.add_argument("--window-s", type=float, default=60.0)
    parser.add_argument("--cache", type=Path, default=Path("bench/out/train_and_serve/costs.pkl"))
    parser.add_argument("--peers", default=",".join(peer[0] for peer in PEERS))
    parser.add_argument("--service-goal", type=float, help="every service's p99_slowdown goal")
    parser.add_argument("--restart-s", type=float, default=DEFAULT_RESTART_S)
    parser.add_argument("--checkpoint-s", type=float, default=DEFAULT_CHECKPOINT_S)
    args = parser.parse_args(argv)

    source = Path(args.pods)
    pods = read_pod_trace(source) if is_pod_trace(source) else import_alibaba_gpu_2023(source)
    pods = days_of(pods, args.from_day, args.days)
    costs = cached_costs(args.gpu, args.cache)
    pods = assign_workloads(pods, lambda model, batch: costs(model, batch).request_s, args.seed)
    pods = with_deadlines(pods, tuple(args.tightness), args.seed)
    if args.service_goal is not None:
        pods = with_goal(pods, args.service_goal)
    cluster = sample_nodes(read_node_list(args.nodes), args.node_count, args.seed)
    for pod in pods:
        if pod.workload is not None:
            costs(pod.workload.model, pod.workload.batch)
    services = sum(isinstance(p.workload, ServiceSpec) for p in pods)
    training = sum(isinstance(p.workload, TrainingSpec) for p in pods)
    shared = sum(p.shares_gpu for p in pods)
    print(
        f"{len(pods)} pods ({services} services, {training} training, {shared} ask for part of "
        f"a GPU) created in {args.days:g} days from day {args.from_day:g}, on {cluster.describe()}"
        f"; windows of {args.window_s:g} s, deadlines U({args.tightness[0]:g}, "
        f"{args.tightness[1]:g}) x work, costs on {args.gpu}, seed {args.seed}"
        + ("" if args.service_goal is None else f"; every service p99 <= {args.service_goal:g}x")
    )
    workload = TaskMix.typical(pods)
    surrogate = SurrogateSharing(bundled())
    wanted = args.peers.split(",")
    harvest = Harvest(restart_s=args.restart_s, checkpoint_s=args.checkpoint_s)
    runs: dict[str, ReplayRun] = {}
    print()
    print("| peer | windows met | services >= 99% | DSR | JCT s | mean alloc GPUs | peak alloc "
          "| mean frag GPUs | utilization | wall s |")  # fmt: skip
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, colocation, sharing, queue in PEERS:
        if name not in wanted:
            continue
        runs[name] = replay(
            cluster,
            pods,
            create_pod_policy("fgd", workload),
            costs=costs,
            sharing=surrogate if sharing == "fggr" else TimeSlicedSharing(),
            colocation=colocation,
            window_s=args.window_s,
            seed=args.seed,
            queue=queue,
            harvest=harvest if colocation == "harvest" else None,
        )
        print(row(name, runs[name]), flush=True)
    if "harvest" in runs:
        t = runs["harvest"].training_json() or {}
        print()
        print(f"harvest: {t.get('guaranteed')} of {t.get('deadline_jobs')} deadlines promised, "
              f"{t.get('guaranteed_met')} of them met, {t.get('best_effort_met')} met best "
              f"effort; {t.get('evictions')} evictions ({t.get('moves')} moved at once), "
              f"{t.get('lost_gpu_s'):.0f} GPU-s lost")  # fmt: skip
    if "fgd" in runs:
        lines = broken(runs["fgd"], pods)
        missed = sum(1 for s in runs["fgd"].services if s.windows_met < s.windows)
        print()
        print(f"FGD packing without an interference model: {missed} of {services} services "
              "missed a window; the worst:")  # fmt: skip
        print()
        print(
            "| service | model | gpu_milli | rps | goal | worst slowdown | allowed | windows met |"
        )
        print("| --- | --- | ---: | ---: | --- | ---: | ---: | ---: |")
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
