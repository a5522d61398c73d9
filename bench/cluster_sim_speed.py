"""How fast `qosched sim cluster` runs: one qos decision, the scaling curve, the ITP release, and
the ElasticFlow artifact's recorded times.

    python bench/cluster_sim_speed.py decision             # about a minute on 2 cores
    python bench/cluster_sim_speed.py scaling [--jobs 1000,3000,10000,30000,100000] [--policies qos]
                                              [--repeats K] [--save JSON | --load JSON...]
                                              [--plot PNG]
    python bench/cluster_sim_speed.py split [--jobs 3000,10000] [--policies qos,edf]
    python bench/cluster_sim_speed.py qos-steps [--jobs 3000]
    python bench/cluster_sim_speed.py compare --base MAIN/src [--jobs 10000,30000]
                                              [--policies fifo,edf]
    python bench/cluster_sim_speed.py itp --traces DIR     # DIR: elasticflow-traces.tar.gz unpacked
    python bench/cluster_sim_speed.py artifact --trace philly_103959.csv --nodes 32 [--repeats 3]
                                               [--base MAIN/src] [--peers ef-accessctrl]
                                               [--fidelity sound,artifact]
    python bench/cluster_sim_speed.py artifact --trace cluster10.csv --nodes 8    # Chronus

- decision: one qos ``allocate()`` with 1,000 active jobs on 128x8 = 1,024 GPUs (jobs as in
  bench/bench_cluster_sim.py ``active_states``, admitted one by one first), CPU milliseconds per
  call (median of the calls after the first), against the 5 ms target.
- scaling: generated traces at offered load 1.0 on 64x8 GPUs (``qosched trace generate --jobs N
  --load 1.0 --cluster-gpus 512 --seed 5``), each run as the whole ``qosched sim cluster --json``
  command in a subprocess: jobs against the command's wall and CPU seconds and the simulation's
  own wall seconds (``wall_s``), against the 1-minute target for 100,000 jobs. ``--repeats K``
  runs each size and policy K times (the median and range are printed and drawn); ``--save``
  keeps the runs, ``--load`` prints and draws saved ones (several files together) without
  running again.
- split: the scaling traces simulated in this process, each policy's CPU seconds split between
  its own calls (``on_arrival``, ``on_arrivals``, ``decide``, ``allocations``; a full-view
  policy's view is built in them) and the simulator's work, with the active jobs per decision:
  the floor the simulator sets under any policy.
- qos-steps: the scaling traces under ``qos`` in this process, its CPU seconds by the step of
  its admission and decision (`QualityOfService.allocate`'s steps, outermost first: a step
  called inside another counts to that one) and the simulator's own work beside them.
- compare: the scaling traces, each policy's whole command under another source tree (``--base``,
  main's ``src`` for a before-and-after) and under this one, CPU seconds side by side.
- itp: every cluster of the ITP trace release (``microsoft/elasticflow-traces``,
  ``elasticflow-traces.tar.gz``) at the size the ElasticFlow artifact simulates it on
  (``scheduler/run_fig8b.sh``), the whole command per cluster, the total against the 5-minute
  target, and cluster01 against the artifact's recorded time.
- artifact: qosched on a trace whose ElasticFlow-artifact time is recorded below, the whole
  ``qosched sim cluster`` command timed in a subprocess (the median of ``--repeats`` runs),
  against that record; with ``--base``, another tree's command beside it (rows marked "base"),
  the two run alternately and their outcomes (decisions, DSR) checked equal.

Wall seconds and CPU seconds both: the machine these numbers come from is shared, so wall time
there measures the neighbours too, and CPU time (``os.times`` of the children) is steadier but
not free of them either (caches, frequency). Repeat the key runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

import bench_cluster_sim  # a sibling script: bench/ is on sys.path when these run as scripts
from qosched.cluster.generate import GeneratorConfig, generate_trace
from qosched.cluster.policies import create_policy
from qosched.cluster.policies.base import Policy
from qosched.cluster.policies.events import Changes, Delta, ViewSource, as_event_policy
from qosched.cluster.simulator import ClusterSimulator
from qosched.cluster.spec import ClusterSpec
from qosched.cluster.state import ClusterView, JobState
from qosched.cluster.throughput import ThroughputModel
from qosched.cluster.traces import write_trace

TP = ThroughputModel.bundled("A100")
DECISION_TARGET_S = 0.005

#: The ElasticFlow artifact's own simulator (``scheduler.py --simulation=True --scheduling_slot=60
#: --gpu_type=A100``) on the traces below: (trace file name, nodes of 8 GPUs) -> {artifact policy:
#: [(wall seconds, CPU seconds or None, where it was recorded)]}. "here": under ``nice -n 10`` on
#: the shared 2-core machine, ``/usr/bin/time`` (docs/results/cluster-sim.md); "here, later": the
#: median of five runs under ``nice -n 5`` on the same machine more loaded (user + system CPU);
#: "issue 16": the whole artifact run as the issue records it, wall only.
ARTIFACT_S: dict[tuple[str, int], dict[str, list[tuple[float, float | None, str]]]] = {
    ("philly_103959.csv", 32): {
        "ef-accessctrl": [
            (53.9, 7.6, "here"),
            (28.4, 12.2, "here, later"),
            (9.6, None, "issue 16"),
        ],
        "edf": [(27.7, 2.4, "here")],
        "dlas-gpu": [(17.8, 2.7, "here")],
    },
    ("cluster01.csv", 64): {"ef-accessctrl": [(1365.0, None, "issue 16")]},
    # The artifact's Chronus (``chronus-scheduler/main.py``, options of ``run_fig8b.sh``), its
    # trace converted by its own scripts (docs/results/fidelity.md, section chronus).
    ("cluster10.csv", 8): {"time-aware-with-lease": [(3480.0, 2207.0, "here")]},
}
#: The ITP release's clusters and the nodes of 8 GPUs the artifact simulates each on
#: (``scheduler/run_fig8b.sh``: n64g8, n128g8, and n32g8 for cluster10).
ITP_NODES = {
    **dict.fromkeys(("cluster01", "cluster02", "cluster03", "cluster05", "cluster06"), 64),
    **dict.fromkeys(("cluster04", "cluster07", "cluster08", "cluster09"), 128),
    "cluster10": 32,
}
QOSCHED_PEER = {
    "ef-accessctrl": "elasticflow",
    "edf": "edf",
    "dlas-gpu": "las",
    "time-aware-with-lease": "chronus",
}
SCALING_TARGET = (100_000, 60.0)  # jobs, whole-command seconds
ITP_TARGET_S = 300.0


def decision(args: argparse.Namespace) -> None:
    cluster = ClusterSpec.from_flags(args.nodes, 8)
    states = bench_cluster_sim.active_states(
        TP, args.active, args.active, cluster_workers=cluster.total_workers
    )
    print(f"# One qos allocate(): {args.active} active jobs on {cluster.describe()}\n")
    print("| policy | admitted | guaranteed | first ms | re-plan ms (median) | vs 5 ms |")
    print("|---|---|---|---|---|---|")
    for name in ("qos", "elasticflow"):
        policy = create_policy(name)
        admitted: list[JobState] = []
        for state in states:
            if policy.admit(state, ClusterView(0.0, cluster, tuple(admitted), 30.0)):
                admitted.append(state)
        guaranteed = sum(1 for s in admitted if policy.is_guaranteed(s.job_id))
        view = ClusterView(0.0, cluster, tuple(admitted), 30.0)
        times = []
        for _ in range(args.repeats + 1):
            started = time.process_time()
            policy.allocate(view)
            times.append(time.process_time() - started)
        replan = statistics.median(times[1:])
        print(
            f"| {name} | {len(admitted)} | {guaranteed} | {times[0] * 1e3:.1f} | "
            f"{replan * 1e3:.1f} | {replan / DECISION_TARGET_S:.2f}x |"
        )


@dataclass(frozen=True)
class Timed:
    """One ``qosched sim cluster --json`` command, timed from outside."""

    wall_s: float  # the whole command, start-up and trace reading included
    cpu_s: float  # its user + system CPU
    sim_wall_s: float  # the simulation alone, as the command reports it
    decisions: int
    dsr: float


def run_command(
    trace: Path, nodes: int, policy: str, fidelity: str = "sound", src: Path | None = None
) -> Timed:
    """The whole command, timed; ``src``: run that source tree's qosched instead of this one."""
    command = [
        sys.executable, "-m", "qosched.cli.main",
        "sim", "cluster", "--trace", str(trace), "--nodes", str(nodes),
        "--gpus-per-node", "8", "--policy", policy, "--fidelity", fidelity, "--json",
    ]  # fmt: skip
    env = None if src is None else {**os.environ, "PYTHONPATH": str(src)}
    before, started = _children_cpu_s(), time.perf_counter()
    done = subprocess.run(command, check=True, capture_output=True, text=True, env=env)
    wall, cpu = time.perf_counter() - started, _children_cpu_s() - before
    report = json.loads(done.stdout)
    return Timed(
        wall, cpu, report["wall_s"], report["decisions"], report["deadline_satisfactory_ratio"]
    )


def scaling(args: argparse.Namespace) -> None:
    if args.load:
        runs = [run for path in args.load for run in load_scaling(path)]
    else:
        runs = measure_scaling(
            [int(n) for n in args.jobs.split(",")], args.policies.split(","), args.repeats
        )
        if args.save is not None:
            args.save.write_text(json.dumps([asdict(run) for run in runs], indent=1) + "\n")
    print_scaling(runs)
    if args.plot is not None:
        plot_scaling(runs, args.plot)
        print(f"\nwrote {args.plot}")


@dataclass(frozen=True)
class ScalingRun:
    """One whole command of the scaling curve."""

    jobs: int
    policy: str
    repeat: int
    timed: Timed


def scaling_trace(jobs: int):
    """The scaling curve's trace of ``jobs`` jobs (``qosched trace generate --jobs N --load 1.0
    --cluster-gpus 512 --seed 5``)."""
    return generate_trace(GeneratorConfig(jobs=jobs, load=1.0, cluster_workers=512, seed=5), TP)


def measure_scaling(jobs_list: list[int], policies: list[str], repeats: int) -> list[ScalingRun]:
    """Every (jobs, policy) ``repeats`` times, the repeats of one size alternating between the
    policies, so that a neighbour's burst on the machine does not fall on one policy alone."""
    runs = []
    with tempfile.TemporaryDirectory() as folder:
        for jobs in jobs_list:
            trace = Path(folder) / f"generated-{jobs}.csv"
            write_trace(scaling_trace(jobs), trace)
            for repeat in range(repeats):
                for name in policies:
                    runs.append(ScalingRun(jobs, name, repeat, run_command(trace, 64, name)))
                    print(
                        f"  {jobs} jobs, {name}, run {repeat + 1} of {repeats}: "
                        f"{runs[-1].timed.cpu_s:.1f} s CPU",
                        file=sys.stderr,
                        flush=True,
                    )
    return runs


class _TimedPolicy:
    """Wraps a policy, driven through the event interface (a full-view one through
    `FullView`, whose view is then built inside its calls): the CPU seconds spent in its calls
    (``on_arrival``, ``on_arrivals``, ``decide``, ``allocations``), and the active jobs at each
    ``decide``; every other attribute is the policy's own."""

    def __init__(self, policy: Policy) -> None:
        self._policy = as_event_policy(policy)
        self.cpu_s = 0.0
        self.decisions = 0
        self.active_jobs = 0
        self._active = 0

    def __getattr__(self, name: str):
        return getattr(self._policy, name)

    def _timed(self, method, *args):
        started = time.process_time()
        try:
            return method(*args)
        finally:
            self.cpu_s += time.process_time() - started

    def on_arrival(self, job: JobState, view: ViewSource) -> bool:
        return self._timed(self._policy.on_arrival, job, view)

    def on_arrivals(self, jobs, view: ViewSource) -> bool:
        return self._timed(self._policy.on_arrivals, jobs, view)

    def decide(self, changes: Changes) -> Delta:
        self.decisions += 1
        self._active += len(changes.arrived) - len(changes.ended)
        self.active_jobs += self._active
        return self._timed(self._policy.decide, changes)

    def allocations(self):
        return self._timed(self._policy.allocations)


def compare(args: argparse.Namespace) -> None:
    """The scaling traces under each policy, the whole command of another source tree (``--base``,
    e.g. main's ``src``) and of this one, one after the other per size and policy."""
    here = Path(__file__).resolve().parent.parent / "src"
    cluster = ClusterSpec.from_flags(64, 8)
    print(f"# Command CPU seconds, before and after, load 1.0 on {cluster.describe()}, seed 5\n")
    print(f"base: {args.base}; this: {here}\n")
    print("| jobs | policy | base CPU s | this CPU s | speed-up | decisions | DSR base / this |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        for jobs in (int(n) for n in args.jobs.split(",")):
            trace = Path(folder) / f"generated-{jobs}.csv"
            write_trace(scaling_trace(jobs), trace)
            for name in args.policies.split(","):
                base = run_command(trace, 64, name, src=args.base)
                this = run_command(trace, 64, name, src=here)
                print(
                    f"| {jobs} | {name} | {base.cpu_s:.1f} | {this.cpu_s:.1f} | "
                    f"{base.cpu_s / this.cpu_s:.1f}x | {base.decisions} / {this.decisions} | "
                    f"{base.dsr:.3f} / {this.dsr:.3f} |",
                    flush=True,
                )


def split(args: argparse.Namespace) -> None:
    """Each policy's run on the scaling traces in this process, its CPU split between the
    policy's calls and the simulator's own work."""
    cluster = ClusterSpec.from_flags(64, 8)
    print(f"# The simulator's share of a run, load 1.0 on {cluster.describe()}, seed 5\n")
    print(
        "| jobs | policy | CPU s | policy CPU s | simulator CPU s | decisions "
        "| simulator ms per decision | active jobs per decision |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for jobs in (int(n) for n in args.jobs.split(",")):
        trace = scaling_trace(jobs)
        for name in args.policies.split(","):
            policy = _TimedPolicy(create_policy(name))
            started = time.process_time()
            ClusterSimulator(cluster, TP, policy, trace).run()
            total = time.process_time() - started
            own = total - policy.cpu_s
            decisions = max(policy.decisions, 1)
            print(
                f"| {jobs} | {name} | {total:.1f} | {policy.cpu_s:.1f} | {own:.1f} | "
                f"{policy.decisions} | {own / decisions * 1e3:.2f} | "
                f"{policy.active_jobs / decisions:.0f} |",
                flush=True,
            )


#: What ``qos-steps`` times: ``admit`` (each arrival) and the steps of a decision, in order.
QOS_STEPS = (
    "admit",
    "_observe_all",
    "_renew_guarantees",
    "_give_planned",
    "_keep_best_effort_running",
    "_give_hopeful",
    "_give_the_rest",
    "_hand_out_spare",
    "_keep_beyond_plan",
    "_decision",
)


def _timed_qos(spent: dict[str, float]):
    """`QualityOfService` with each of ``QOS_STEPS`` adding its CPU seconds to ``spent``."""
    from qosched.cluster.policies.qos import QualityOfService

    depth = [0]

    def timed(name: str):
        method = getattr(QualityOfService, name)

        def call(self, *args, **kwargs):
            depth[0] += 1
            started = time.process_time()
            try:
                return method(self, *args, **kwargs)
            finally:
                depth[0] -= 1
                if not depth[0]:  # the outermost timed step takes the time
                    spent[name] += time.process_time() - started

        return call

    return type("TimedQos", (QualityOfService,), {name: timed(name) for name in QOS_STEPS})()


def qos_steps(args: argparse.Namespace) -> None:
    """``qos`` on the scaling traces, its CPU seconds by step and the simulator's beside them."""
    cluster = ClusterSpec.from_flags(64, 8)
    print(f"# qos's CPU by step, load 1.0 on {cluster.describe()}, seed 5\n")
    print("| jobs | decisions | CPU s | " + " | ".join(QOS_STEPS) + " | simulator |")
    print("|---|---|---|" + "---|" * (len(QOS_STEPS) + 1))
    for jobs in (int(n) for n in args.jobs.split(",")):
        spent = dict.fromkeys(QOS_STEPS, 0.0)
        policy = _timed_qos(spent)
        started = time.process_time()
        result = ClusterSimulator(cluster, TP, policy, scaling_trace(jobs)).run()
        total = time.process_time() - started
        own = total - sum(spent.values())
        print(
            f"| {jobs} | {result.decisions} | {total:.1f} | "
            + " | ".join(f"{spent[name]:.1f}" for name in QOS_STEPS)
            + f" | {own:.1f} |",
            flush=True,
        )


def load_scaling(path: Path) -> list[ScalingRun]:
    rows = json.loads(path.read_text())
    return [
        ScalingRun(row["jobs"], row["policy"], row["repeat"], Timed(**row["timed"])) for row in rows
    ]


def scaling_groups(runs: list[ScalingRun]) -> dict[tuple[int, str], list[Timed]]:
    """The runs of each (jobs, policy), in the order they were measured."""
    groups: dict[tuple[int, str], list[Timed]] = {}
    for run in runs:
        groups.setdefault((run.jobs, run.policy), []).append(run.timed)
    return groups


def print_scaling(runs: list[ScalingRun]) -> None:
    cluster = ClusterSpec.from_flags(64, 8)
    print(f"# Jobs against time, load 1.0 on {cluster.describe()}, seed 5, whole command\n")
    print(
        "| jobs | policy | runs | command CPU s, median (min-max) | command wall s, median "
        "| simulation wall s, median | decisions | sim ms per decision | DSR |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for (jobs, name), timed in scaling_groups(runs).items():
        cpu = [t.cpu_s for t in timed]
        sim = statistics.median(t.sim_wall_s for t in timed)
        print(
            f"| {jobs} | {name} | {len(timed)} | {statistics.median(cpu):.1f} "
            f"({min(cpu):.1f}-{max(cpu):.1f}) | {statistics.median(t.wall_s for t in timed):.1f} "
            f"| {sim:.1f} | {timed[0].decisions} | {sim / timed[0].decisions * 1e3:.2f} "
            f"| {timed[0].dsr:.3f} |"
        )
    target_jobs, target_s = SCALING_TARGET
    print(f"\nTarget: {target_jobs:,} jobs in {target_s:.0f} s.")
    for (jobs, name), timed in scaling_groups(runs).items():
        if jobs == target_jobs:
            wall = statistics.median(t.wall_s for t in timed)
            print(f"- {name}: {wall:.0f} s of wall time, {wall / target_s:.2f}x the target")


def runs_label(sizes: list[int], runs: list[list[float]]) -> str:
    """How many runs each point is, e.g. "3 runs each, 1 at 30,000 jobs"."""
    counts = [len(r) for r in runs]
    usual = statistics.mode(counts)
    others = [f"{n} at {jobs:,} jobs" for jobs, n in zip(sizes, counts, strict=True) if n != usual]
    return ", ".join([f"{usual} runs each", *others])


def plot_scaling(runs: list[ScalingRun], path: Path) -> None:
    """Jobs against the whole command's CPU seconds, log-log: each policy's median with its
    runs' range, and the target."""
    # Imported here: the other commands of this bench draw nothing.
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 5))
    ax = fig.subplots()
    groups = scaling_groups(runs)
    for name in dict.fromkeys(run.policy for run in runs):
        sizes = sorted(jobs for jobs, policy in groups if policy == name)
        cpu = [sorted(t.cpu_s for t in groups[jobs, name]) for jobs in sizes]
        median = np.array([statistics.median(c) for c in cpu])
        spread = np.array([median - [c[0] for c in cpu], [c[-1] for c in cpu] - median])
        ax.errorbar(
            sizes,
            median,
            yerr=spread,
            marker="o",
            capsize=3,
            label=f"{name} ({runs_label(sizes, cpu)})",
        )
    target_jobs, target_s = SCALING_TARGET
    smallest = min(run.jobs for run in runs)
    ax.plot(
        [smallest, target_jobs],
        [target_s * smallest / target_jobs, target_s],
        color="black",
        linestyle=":",
        label=f"the target's pace, {target_s / target_jobs * 1e3:.1f} ms per job",
    )
    ax.plot([target_jobs], [target_s], marker="*", markersize=14, color="black", linestyle="")
    ax.annotate(
        f"target: {target_jobs:,} jobs in {target_s:.0f} s",
        (target_jobs, target_s),
        textcoords="offset points",
        xytext=(-14, 4),
        va="bottom",
        ha="right",
        fontsize=9,
    )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("jobs in the trace (load 1.0, 64 x 8 GPUs)")
    ax.set_ylabel("whole command, CPU seconds (user + system)")
    ax.set_title("qosched sim cluster: trace size against time (median, range of the runs)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def itp(args: argparse.Namespace) -> None:
    missing = [name for name in ITP_NODES if not (args.traces / f"{name}.csv").is_file()]
    if missing:
        sys.exit(f"{args.traces} lacks {', '.join(missing)}.csv (unpack elasticflow-traces.tar.gz)")
    print(f"# The ITP trace release under {args.policy}, every cluster at the artifact's size\n")
    print(
        "| cluster | jobs | GPUs | command wall s | command CPU s | simulation wall s "
        "| decisions | DSR | artifact ElasticFlow wall s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    totals = [0, 0.0, 0.0, 0.0]
    for name, nodes in ITP_NODES.items():
        trace = args.traces / f"{name}.csv"
        jobs = sum(1 for _ in trace.open()) - 1
        timed = run_command(trace, nodes, args.policy)
        recorded = ARTIFACT_S.get((trace.name, nodes), {}).get("ef-accessctrl", [])
        theirs = "; ".join(f"{w:.0f} ({src}): {w / timed.wall_s:.0f}x" for w, _, src in recorded)
        print(
            f"| {name} | {jobs} | {nodes * 8} | {timed.wall_s:.1f} | {timed.cpu_s:.1f} | "
            f"{timed.sim_wall_s:.1f} | {timed.decisions} | {timed.dsr:.3f} | {theirs or '—'} |",
            flush=True,
        )
        for i, value in enumerate((jobs, timed.wall_s, timed.cpu_s, timed.sim_wall_s)):
            totals[i] += value
    jobs, wall, cpu, sim = totals
    print(f"| all | {jobs} |  | {wall:.1f} | {cpu:.1f} | {sim:.1f} |  |  |  |")
    print(f"\nTotal: {wall:.0f} s of wall time against the {ITP_TARGET_S:.0f} s target.")


def artifact(args: argparse.Namespace) -> None:
    recorded = ARTIFACT_S.get((args.trace.name, args.nodes))
    if recorded is None:
        known = ", ".join(f"{name} on {nodes}x8" for name, nodes in ARTIFACT_S)
        sys.exit(f"no artifact time recorded for {args.trace.name} on {args.nodes}x8 ({known})")
    print(f"# {args.trace.name} on {args.nodes}x8 GPUs: the whole command against the artifact\n")
    print(
        "| qosched policy (artifact's) | qosched wall s | qosched CPU s | artifact wall s "
        "| artifact CPU s | recorded | wall ratio | CPU ratio |"
    )
    print("|---|---|---|---|---|---|---|---|")
    here = Path(__file__).resolve().parent.parent / "src"
    trees = {"": here} if args.base is None else {"base ": args.base, "": here}
    peers = recorded if args.peers is None else args.peers.split(",")
    for theirs in peers:
        if theirs not in recorded:
            sys.exit(f"no artifact time recorded for {theirs} ({', '.join(recorded)})")
        ours = QOSCHED_PEER[theirs]
        for fidelity in args.fidelity.split(","):
            # The median of a few runs: one run on a shared machine measures the neighbours too.
            # With a base tree, its runs and this tree's alternate, so both see the same load.
            runs: dict[str, list[Timed]] = {label: [] for label in trees}
            for _ in range(args.repeats):
                for label, src in trees.items():
                    runs[label].append(run_command(args.trace, args.nodes, ours, fidelity, src))
            for label, tree_runs in runs.items():
                if {(r.decisions, r.dsr) for r in tree_runs} != {
                    (r.decisions, r.dsr) for r in runs[""]
                }:
                    sys.exit(f"{label}{ours} --fidelity {fidelity}: outcomes differ between trees")
                timed = Timed(
                    statistics.median(r.wall_s for r in tree_runs),
                    statistics.median(r.cpu_s for r in tree_runs),
                    statistics.median(r.sim_wall_s for r in tree_runs),
                    tree_runs[0].decisions,
                    tree_runs[0].dsr,
                )
                for their_wall, their_cpu, source in recorded[theirs]:
                    cpu = "—" if their_cpu is None else f"{their_cpu:.1f}"
                    cpu_ratio = "—" if their_cpu is None else f"{their_cpu / timed.cpu_s:.1f}x"
                    print(
                        f"| {label}{ours} --fidelity {fidelity} ({theirs}) | {timed.wall_s:.2f} | "
                        f"{timed.cpu_s:.2f} | {their_wall:.1f} | {cpu} | {source} | "
                        f"{their_wall / timed.wall_s:.1f}x | {cpu_ratio} |",
                        flush=True,
                    )


def _children_cpu_s() -> float:
    times = os.times()
    return times.children_user + times.children_system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("decision")
    p.add_argument("--nodes", type=int, default=128)
    p.add_argument("--active", type=int, default=1000)
    p.add_argument("--repeats", type=int, default=5)
    p.set_defaults(run=decision)
    p = commands.add_parser("scaling")
    p.add_argument("--jobs", default="1000,3000,10000,30000,100000")
    p.add_argument("--policies", default="qos")
    p.add_argument("--repeats", type=int, default=1, help="runs of each size and policy")
    p.add_argument("--save", type=Path, help="write every run to this JSON file")
    p.add_argument(
        "--load", type=Path, nargs="+", help="print (and plot) the runs of --save files together"
    )
    p.add_argument("--plot", type=Path, help="draw the curve into this PNG file")
    p.set_defaults(run=scaling)
    p = commands.add_parser("compare")
    p.add_argument("--base", type=Path, required=True, help="the other tree's src directory")
    p.add_argument("--jobs", default="10000,30000")
    p.add_argument("--policies", default="fifo,edf")
    p.set_defaults(run=compare)
    p = commands.add_parser("split")
    p.add_argument("--jobs", default="3000,10000")
    p.add_argument("--policies", default="qos,edf")
    p.set_defaults(run=split)
    p = commands.add_parser("qos-steps")
    p.add_argument("--jobs", default="3000")
    p.set_defaults(run=qos_steps)
    p = commands.add_parser("itp")
    p.add_argument("--traces", type=Path, required=True)
    p.add_argument("--policy", default="qos")
    p.set_defaults(run=itp)
    p = commands.add_parser("artifact")
    p.add_argument("--trace", type=Path, required=True)
    p.add_argument("--nodes", type=int, required=True)
    p.add_argument("--repeats", type=int, default=3, help="qosched runs; the median is printed")
    p.add_argument(
        "--base", type=Path, help="another tree's src (main's), run alternately with this one"
    )
    p.add_argument("--peers", help="the artifact's policies to run (default: all recorded)")
    p.add_argument("--fidelity", default="sound,artifact", help="the fidelities to run")
    p.set_defaults(run=artifact)
    args = parser.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
