"""Random inputs chosen to break qosched, through the command line as a user runs it.

    python bench/hostile_inputs.py cluster [--seeds 0:40] [--timeout 300]
    python bench/hostile_inputs.py gpushare [--seeds 0:40] [--timeout 300]

- cluster: a random trace per seed (1-40 jobs in bursts of simultaneous arrivals, 1 to 10^7
  iterations, deadlines from 0.001x to 100x the run time, best-effort jobs, 1-8 nodes of 8 GPUs)
  through ``qosched sim cluster --policy all`` under both fidelities.
- gpushare: a random apps spec per seed (1-5 apps of explicit kernels of 1 us to 0.1 s, bandwidth
  up to 5x the GPU's, open and closed loops, goals met by nothing: ``p99_latency_ms: 0.0001``,
  ``throughput_rps: 1e9``) through ``qosched gpu sim`` under every sharing policy.

Each run is judged by how it ends: exit 0, or exit 2 with a ``qosched: error:`` line (the input
refused, with its reason), is a pass; a traceback, any other exit or running past ``--timeout``
is a failure, printed with its seed so it can be run again. The slowest runs are listed too. The
machine is shared, so the seconds are wall time and only rough.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from qosched.cluster.throughput import ThroughputModel
from qosched.gpushare.policies import policy_names

QOSCHED = [sys.executable, "-m", "qosched.cli.main"]


def random_trace(seed: int, tables: ThroughputModel) -> tuple[str, int]:
    """A trace's text and the nodes it runs on."""
    rng = random.Random(seed)
    jobs, nodes = rng.randint(1, 40), rng.choice([1, 2, 4, 8])
    pairs = [(m, b) for m in tables.models for b in tables.batch_sizes(m)]
    lines = ["job_id,submit_s,model,batch_size,iterations,deadline_s,requested_gpus,duration_s"]
    now = 0.0
    for index in range(jobs):
        now = round(now + rng.choice([0, 0, 0.001, 1, 60, 600, 3600 * rng.random()]), 3)
        model, batch = rng.choice(pairs)
        curve = tables.curve(model, batch)
        gpus = rng.choice([g for g in curve.measured if g <= 8 * nodes] or [1])
        iterations = rng.choice([1, 2, 10, 1000, 100_000, 10**7])
        run_s = iterations / curve.rate(gpus)
        deadline = ""
        if rng.random() >= 0.15:
            slack = rng.choice([1e-3, 0.5, 1, 1.5, 100]) * run_s + rng.choice([0, 0.001, 1])
            deadline = f"{max(now + slack, now + 0.002):.3f}"
        lines.append(
            f"{index},{now:.3f},{model},{batch},{iterations},{deadline},{gpus},{run_s:.3f}"
        )
    return "\n".join(lines) + "\n", nodes


def random_spec(seed: int) -> str:
    """An apps spec of explicit kernels on an A100."""
    rng = random.Random(seed)

    def kernel(index: int) -> str:
        time_s = 10 ** rng.uniform(-6, -1)
        bandwidth = 10 ** rng.uniform(-3, 0.7)  # share of the GPU's 2 TB/s, above 1 at times
        return (
            f"      - {{name: k{index}, op: o{index}, grid: [{rng.randint(1, 5000)}, 1, 1], "
            f"block: [{rng.choice([32, 256, 1024])}, 1, 1], "
            f"registers_per_thread: {rng.choice([16, 32, 64])}, "
            f"shared_bytes_per_block: {rng.choice([0, 49152])}, "
            f"sms: {rng.choice([1, 2, 54, 108])}, "
            f"occupancy: {rng.choice([0.01, 0.5, 1.0])}, flops: {rng.uniform(0, 1e10):.3e}, "
            f"bytes: {bandwidth * 2e12 * time_s:.3e}, bound: {rng.choice(['compute', 'memory'])}, "
            f"time_s: {time_s:.3e}}}"
        )

    goals = ["best_effort", "{p99_slowdown: 1.0}", "{p99_slowdown: 1.5}",
             "{p99_latency_ms: 0.0001}", "{throughput_share: 1.0}", "{throughput_share: 0.01}",
             "{throughput_rps: 1e9}", "{throughput_rps: 1}", None]  # fmt: skip
    lines = ["gpu: A100", f"duration_s: {rng.choice([0.001, 0.01, 0.05])}",
             f"seed: {rng.randint(0, 99)}", "apps:"]  # fmt: skip
    for app in range(rng.randint(1, 5)):
        lines += [f"  - name: a{app}", f"    priority: {rng.randint(0, 3)}"]
        if rng.random() < 0.5:
            lines.append("    closed_loop: true")
        else:
            lines.append(f"    arrivals: {{poisson_rps: {10 ** rng.uniform(0, 4):.3f}}}")
        goal = rng.choice(goals)
        if goal:
            lines.append(f"    goal: {goal}")
        lines.append("    kernels:")
        lines += [kernel(i) for i in range(rng.randint(1, 4))]
    return "\n".join(lines) + "\n"


def judge(argv: list[str], timeout_s: float) -> tuple[str, float, str]:
    """("pass" | "refused" | "FAIL" | "TIMEOUT", wall seconds, the last line of stderr)."""
    started = time.perf_counter()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return "TIMEOUT", time.perf_counter() - started, ""
    wall = time.perf_counter() - started
    last = (done.stderr.strip().splitlines() or [""])[-1]
    if done.returncode == 0:
        return "pass", wall, ""
    if done.returncode == 2 and last.startswith("qosched: error:"):
        return "refused", wall, last
    return "FAIL", wall, last


def seeds(text: str) -> range:
    first, _, last = text.partition(":")
    return range(int(first), int(last))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("level", choices=["cluster", "gpushare"])
    parser.add_argument("--seeds", type=seeds, default=range(0, 40), help="FIRST:LAST (0:40)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per run (300)")
    args = parser.parse_args()
    runs: list[tuple[str, str, float, str]] = []  # (verdict, what, seconds, message)
    tables = ThroughputModel.bundled("A100")
    with tempfile.TemporaryDirectory() as folder:
        for seed in args.seeds:
            if args.level == "cluster":
                text, nodes = random_trace(seed, tables)
                path = Path(folder) / f"trace_{seed}.csv"
                path.write_text(text)
                cases = [
                    (f"seed {seed} --fidelity {fidelity}",
                     [*QOSCHED, "sim", "cluster", "--trace", str(path), "--nodes", str(nodes),
                      "--gpus-per-node", "8", "--policy", "all", "--fidelity", fidelity,
                      "--json", "--seed", str(seed)])
                    for fidelity in ("sound", "artifact")
                ]  # fmt: skip
            else:
                path = Path(folder) / f"apps_{seed}.yaml"
                path.write_text(random_spec(seed))
                cases = [
                    (f"seed {seed} --policy {name}",
                     [*QOSCHED, "gpu", "sim", str(path), "--policy", name, "--json"])
                    for name in policy_names()
                ]  # fmt: skip
            for what, argv in cases:
                verdict, wall, message = judge(argv, args.timeout)
                runs.append((verdict, what, wall, message))
                if verdict in ("FAIL", "TIMEOUT"):
                    print(f"{verdict} {what}: {message}", flush=True)
    counts = {v: sum(1 for r in runs if r[0] == v) for v in ("pass", "refused", "FAIL", "TIMEOUT")}
    print(f"{args.level}: {len(runs)} runs over seeds {args.seeds.start}:{args.seeds.stop}: "
          + ", ".join(f"{n} {v}" for v, n in counts.items()))  # fmt: skip
    for verdict, what, wall, message in sorted(runs, key=lambda r: -r[2])[:5]:
        print(f"  slowest: {what}: {wall:.1f} s ({verdict}){': ' + message if message else ''}")
    refused = sorted({r[3] for r in runs if r[0] == "refused"})
    for message in refused[:5]:
        print(f"  refused, e.g.: {message}")
    return 1 if counts["FAIL"] or counts["TIMEOUT"] else 0


if __name__ == "__main__":
    sys.exit(main())
