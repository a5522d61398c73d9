"""The workload-inflation experiment of "Beware of Fragmentation" (Weng et al., ATC'23, §6.2,
Fig. 9a): unallocated GPUs as the arrived workload grows past the cluster's GPU capacity, per
policy, over several seeds.

    python bench/fgd_inflation.py --pods openb_pod_list_default.csv \\
        --nodes openb_node_list_gpu_node.csv [--seeds 42 43 44] [--ratio 1.3] \\
        [--expected analysis_allo_discrete.csv]

For each seed, the trace's pods arrive in a random order, then pods drawn from it until the
GPUs asked reach ``--ratio`` x the cluster's (the paper's simulator's ``-tune 1.3 --shuffle-pod``
with ``-tuneseed SEED``); each policy places them, no pod leaving. At each level L of arrived
workload (GPUs asked by the pods arrived so far over the cluster's GPUs), the unallocated GPUs
are read (:meth:`PlacementRun.unallocated_at`). Printed: per policy and level, the mean over
seeds and the spread (min..max), in % of the cluster's GPUs; then FGD's reduction against the
best baseline at each level. ``--expected`` reads the paper's artifact results
(``experiments/analysis/expected_results/analysis_allo_discrete.csv`` of
hkust-adsl/kubernetes-scheduler-simulator, allocation % per level) and prints them beside.
``--pods`` takes Alibaba's pod list or qosched's pod trace.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from qosched.cluster.pods.fragmentation import TaskMix
from qosched.cluster.pods.nodes import read_node_list
from qosched.cluster.pods.policies import create_pod_policy, pod_policy_names
from qosched.cluster.pods.sim import inflate, place_pods
from qosched.cluster.pods.trace import import_alibaba_gpu_2023, is_pod_trace, read_pod_trace

LEVELS = (0.8, 0.9, 0.95, 1.0, 1.05, 1.1, 1.2, 1.3)
#: The paper's artifact names of the policies (analysis_allo_discrete.csv's sc_policy).
ARTIFACT_NAMES = {
    "random-fit": "01-Random",
    "dot-product": "02-DotProd",
    "gpu-clustering": "03-GpuClustering",
    "gpu-packing": "04-GpuPacking",
    "best-fit": "05-BestFit",
    "fgd": "06-FGD",
}


def reduction(fgd: float, baselines: Mapping[str, float]) -> tuple[str, float]:
    """The best (least unallocated) baseline and FGD's reduction against it, as a fraction."""
    best = min(baselines, key=baselines.__getitem__)
    return best, (baselines[best] - fgd) / baselines[best] if baselines[best] else 0.0


def expected(path: Path, workload: str, levels: Sequence[float]) -> dict[str, list[float]]:
    """The artifact's unallocated % per policy at ``levels``: 100 - its allocation %, mean over
    its seeds (its columns are arrived-workload % 0..130)."""
    found: dict[str, list[list[float]]] = {}
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            if row["workload"] == workload and float(row["tune"]) == 1.3:
                found.setdefault(row["sc_policy"], []).append(
                    [100.0 - float(row[str(round(level * 100))]) for level in levels]
                )
    return {name: [statistics.mean(col) for col in zip(*runs, strict=True)]
            for name, runs in found.items()}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", required=True, type=Path)
    parser.add_argument("--nodes", required=True, type=Path)
    parser.add_argument("--policies", nargs="+", default=list(pod_policy_names()))
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44])
    parser.add_argument("--ratio", type=float, default=1.3)
    parser.add_argument("--levels", type=float, nargs="+", default=list(LEVELS))
    parser.add_argument("--expected", type=Path)
    args = parser.parse_args()
    pods = (
        read_pod_trace(args.pods) if is_pod_trace(args.pods) else import_alibaba_gpu_2023(args.pods)
    )
    cluster = read_node_list(args.nodes)
    workload = TaskMix.typical(pods)
    started = time.perf_counter()
    # policy -> level -> unallocated % per seed
    table: dict[str, list[list[float]]] = {n: [[] for _ in args.levels] for n in args.policies}
    for seed in args.seeds:
        arrivals = inflate(pods, cluster.gpus, args.ratio, seed)
        for name in args.policies:
            run = place_pods(cluster, arrivals, create_pod_policy(name, workload), seed=seed)
            for i, level in enumerate(args.levels):
                table[name][i].append(100.0 * run.unallocated_at(level) / cluster.gpus)
    wall = time.perf_counter() - started
    print(f"{len(pods)} pods on {cluster.describe()}; inflated to {args.ratio:g}x; "
          f"seeds {' '.join(map(str, args.seeds))}; {wall:.0f} s")  # fmt: skip
    print()
    heads = " | ".join(f"{level:.0%}" for level in args.levels)
    print(f"| policy | {heads} |")
    print("|---" * (len(args.levels) + 1) + "|")
    means: dict[str, list[float]] = {}
    for name in args.policies:
        means[name] = [statistics.mean(v) for v in table[name]]
        cells = " | ".join(
            f"{statistics.mean(v):.2f} ({min(v):.2f}..{max(v):.2f})" for v in table[name]
        )
        print(f"| {name} | {cells} |")
    artifact = {}
    if args.expected is not None:
        artifact = expected(args.expected, args.pods.stem, args.levels)
        for name in args.policies:
            values = artifact.get(ARTIFACT_NAMES.get(name, ""))
            if values:
                print(f"| {name} (paper's artifact) | " + " | ".join(f"{v:.2f}" for v in values)
                      + " |")  # fmt: skip
    if "fgd" in means and len(means) > 1:
        print()
        print("| level | best baseline | its unallocated % | FGD's | FGD's reduction |"
              + (" artifact: best baseline, FGD's reduction |" if artifact else ""))  # fmt: skip
        print("|---|---|---|---|---|" + ("---|" if artifact else ""))
        for i, level in enumerate(args.levels):
            others = {n: means[n][i] for n in means if n != "fgd"}
            best, cut = reduction(means["fgd"][i], others)
            line = (f"| {level:.0%} | {best} | {others[best]:.2f} | {means['fgd'][i]:.2f} | "
                    f"{cut:.0%} |")  # fmt: skip
            if artifact:
                theirs = {n: artifact[ARTIFACT_NAMES[n]][i] for n in others
                          if ARTIFACT_NAMES.get(n) in artifact}  # fmt: skip
                if theirs and "06-FGD" in artifact:
                    b, c = reduction(artifact["06-FGD"][i], theirs)
                    line += f" {b}, {c:.0%} |"
            print(line)


if __name__ == "__main__":
    main()
