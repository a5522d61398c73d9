"""Build the bundled CPU speed tables: measured on this machine's cores, extended by a model.

    python bench/measure_cpu_speeds.py [--iterations 15] [--cores-per-node 32]
                                       [--rounds 3] [--network-gbit 10] [--network-latency-us 50]
                                       [--out src/qosched/data/throughputs/CPU]

What is measured, on this machine, with ``OMP_WAIT_POLICY=PASSIVE`` (as the local runner sets):

- ``c(b)``: the real training-iteration time (data + forward + backward + optimizer step) of each
  built-in workload (``qosched.workloads``: ``cnn``, ``transformer``) at per-worker batch ``b`` on
  one core (``torch.set_num_threads(1)``, affinity to one core), for every ``b`` a table needs;
- ``T2(B)``: the same at each global batch ``B`` on two cores, two ways: data-parallel (two
  processes, one per core, half the batch each, gradients all-reduced with gloo) and two intra-op
  threads of one process (what the local runner does with two cores).

Every time is the median of ``--iterations`` timed iterations after a warm-up, taken in
``--rounds`` rounds over all measurements with the lowest median kept, because other processes
may share the cores. The one core used is the faster of this machine's cores on a short probe.

What is modelled, for ``k`` workers (one per core) on nodes of ``--cores-per-node`` cores:
synchronous data-parallel SGD, each worker computes ``B/k`` samples, then gradients are
all-reduced::

    t(k) = c(B/k) + allreduce(k)
    allreduce(k) = 2(m-1)/m * P / BW_mem                     (ring inside a node, m = min(k, node))
                 + [n > 1] * (2(n-1)/n * P / BW_net + 2(n-1) * latency)   (ring across n nodes)

``P`` is the workload's parameter bytes (float32), ``BW_mem`` this machine's measured memory
bandwidth (``qosched.hardware.measure``), ``BW_net`` and ``latency`` the stated network. A count
with ``B/k < 1`` (less than one sample per worker) is left empty. Iterations/s = ``1/t(k)``; at
one core it is the measured ``1/c(B)``. The model's prediction of two cores, ``c(B/2) +
allreduce(2)``, is compared with the measured ``T2(B)`` and the error written to the README.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

WORKLOADS = ("cnn", "transformer")
GLOBAL_BATCHES = (32, 64, 128, 256)
COUNTS = (1, 2, 4, 8, 16, 32, 64)
WARMUP = 3
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "src/qosched/data/throughputs/CPU"


@dataclass(frozen=True, slots=True)
class Network:
    cores_per_node: int
    bandwidth_bytes_s: float
    latency_s: float


def iteration_time(workload: str, batch: int, cores: set[int], iterations: int) -> float:
    """Median seconds of one training iteration of ``workload`` at ``batch`` on ``cores``."""
    import torch

    from qosched.workloads import get_workload

    os.sched_setaffinity(0, cores)
    torch.set_num_threads(len(cores))
    factory = get_workload(workload)
    state = factory.build(seed=0, batch_size=batch)
    for _ in range(WARMUP):
        factory.step(state)
    times = []
    for _ in range(iterations):
        start = time.perf_counter()
        factory.step(state)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _data_parallel_rank(
    rank: int, workload: str, batch: int, cores: list[int], port: int, iterations: int, out
) -> None:
    import torch
    import torch.distributed as dist

    from qosched.workloads import get_workload

    os.sched_setaffinity(0, {cores[rank]})
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=len(cores)
    )
    factory = get_workload(workload)
    state = factory.build(seed=rank, batch_size=batch // len(cores))
    times = []
    for i in range(WARMUP + iterations):
        dist.barrier()
        start = time.perf_counter()
        factory.step(state)
        # One bucket of all gradients, as DDP sends them; averaged, as synchronous SGD does.
        flat = torch.cat([p.grad.reshape(-1) for p in state.model.parameters()])
        dist.all_reduce(flat)
        flat /= len(cores)
        if i >= WARMUP:
            times.append(time.perf_counter() - start)
    dist.destroy_process_group()
    if rank == 0:
        out.put(statistics.median(times))


def data_parallel_time(workload: str, batch: int, cores: list[int], iterations: int) -> float:
    """Median seconds of one synchronous data-parallel iteration: one process per core, each on
    ``batch / len(cores)`` samples, gradients all-reduced with gloo over loopback."""
    import multiprocessing
    import socket

    with socket.socket() as probe:  # a free port for the rendezvous
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    ranks = [
        context.Process(
            target=_data_parallel_rank,
            args=(rank, workload, batch, cores, port, iterations, out),
        )
        for rank in range(len(cores))
    ]
    for process in ranks:
        process.start()
    result = out.get(timeout=600)
    for process in ranks:
        process.join()
    return result


def parameter_bytes(workload: str) -> int:
    from qosched.workloads import get_workload

    state = get_workload(workload).build(seed=0, batch_size=1)
    return sum(p.numel() * p.element_size() for p in state.model.parameters())


def allreduce_s(workers: int, param_bytes: int, memory_bw: float, net: Network) -> float:
    """Seconds of one gradient all-reduce among ``workers`` workers, as in the module docstring."""
    in_node = min(workers, net.cores_per_node)
    nodes = math.ceil(workers / net.cores_per_node)
    seconds = 2 * (in_node - 1) / in_node * param_bytes / memory_bw
    if nodes > 1:
        seconds += 2 * (nodes - 1) / nodes * param_bytes / net.bandwidth_bytes_s
        seconds += 2 * (nodes - 1) * net.latency_s
    return seconds


def fastest_core(cores: list[int], iterations: int) -> int:
    """The core with the shortest median ``cnn`` iteration: another process may load the other."""
    probe = {core: iteration_time("cnn", 64, {core}, iterations) for core in cores}
    return min(probe, key=probe.__getitem__)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=15, help="timed iterations per median")
    parser.add_argument(
        "--rounds", type=int, default=3, help="medians per measurement; lowest kept"
    )
    parser.add_argument("--cores-per-node", type=int, default=32)
    parser.add_argument("--network-gbit", type=float, default=10.0, help="between nodes, Gb/s")
    parser.add_argument("--network-latency-us", type=float, default=50.0, help="per ring step")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch starts its thread pool

    from qosched.hardware.measure import cpu_model_name, measure_cpu

    net = Network(args.cores_per_node, args.network_gbit * 1e9 / 8, args.network_latency_us * 1e-6)
    cpu = measure_cpu()
    available = sorted(os.sched_getaffinity(0))
    if len(available) < 2:
        raise SystemExit("needs two usable cores to measure the two-core time")
    pair = set(available[:2])
    core = fastest_core(available[:2], args.iterations)

    # Per-worker batches every table cell needs: B/k for each global batch B and count k.
    per_worker = sorted({b // k for b in GLOBAL_BATCHES for k in COUNTS if b % k == 0 and b >= k})
    load_before = Path("/proc/loadavg").read_text().split()[0]
    # Rounds run one after the other over every measurement, so a burst of load from another
    # process hits one round's median of a measurement, not all of them; the lowest is kept.
    single: dict[tuple[str, int], float] = {}
    threads: dict[tuple[str, int], float] = {}
    parallel: dict[tuple[str, int], float] = {}
    for _ in range(args.rounds):
        for workload in WORKLOADS:
            for b in per_worker:
                t = iteration_time(workload, b, {core}, args.iterations)
                single[workload, b] = min(t, single.get((workload, b), math.inf))
            for batch in GLOBAL_BATCHES:
                t = iteration_time(workload, batch, pair, args.iterations)
                threads[workload, batch] = min(t, threads.get((workload, batch), math.inf))
                t = data_parallel_time(workload, batch, sorted(pair), args.iterations)
                parallel[workload, batch] = min(t, parallel.get((workload, batch), math.inf))
    rows = []
    tables: dict[str, dict[int, dict[int, float]]] = {}
    singles: dict[str, dict[int, float]] = {}
    for workload in WORKLOADS:
        params = parameter_bytes(workload)
        singles[workload] = {b: single[workload, b] for b in per_worker}
        tables[workload] = {}
        for batch in GLOBAL_BATCHES:
            key = (workload, batch)
            modelled = single[workload, batch // 2] + allreduce_s(
                2, params, cpu.memory_bandwidth, net
            )
            rows.append(
                (workload, batch, params, single[key], threads[key], parallel[key], modelled)
            )
            speeds = {}
            for k in COUNTS:
                if batch % k or batch < k:
                    continue
                t = single[workload, batch // k] + allreduce_s(k, params, cpu.memory_bandwidth, net)
                speeds[k] = 1.0 / t
            tables[workload][batch] = speeds
        print(
            f"{workload}: "
            + ", ".join(f"{b}: {single[workload, b] * 1e3:.2f} ms" for b in per_worker)
        )

    args.out.mkdir(parents=True, exist_ok=True)
    for workload, table in tables.items():
        lines = ["global_batch_size," + ",".join(map(str, COUNTS))]
        for batch, speeds in table.items():
            cells = [f"{speeds[k]:.6g}" if k in speeds else "" for k in COUNTS]
            lines.append(f"{batch}," + ",".join(cells))
        (args.out / f"{workload}.csv").write_text("\n".join(lines) + "\n")

    load_after = Path("/proc/loadavg").read_text().split()[0]
    dp_errors = [(m - p) / p for *_, p, m in rows]
    thread_errors = [(m - t) / t for *_, t, _, m in rows]
    measured_header = (
        "| workload | global batch | parameter bytes | 1 core | 2 cores data-parallel "
        "| 2 cores threads | model 2 cores | error vs data-parallel | error vs threads |\n"
        "|---|---|---|---|---|---|---|---|---|"
    )
    measured_rows = "\n".join(
        f"| {w} | {b} | {p:,} | {t1 * 1e3:.3f} | {tp * 1e3:.3f} | {tt * 1e3:.3f} | "
        f"{m * 1e3:.3f} | {(m - tp) / tp:+.1%} | {(m - tt) / tt:+.1%} |"
        for w, b, p, t1, tt, tp, m in rows
    )
    single_table = "\n".join(
        [
            "| workload | " + " | ".join(f"b={b}" for b in per_worker) + " |",
            "|---|" + "---|" * len(per_worker),
            *(
                f"| {w} | " + " | ".join(f"{t[b] * 1e3:.3f}" for b in per_worker) + " |"
                for w, t in singles.items()
            ),
        ]
    )
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
    measured_header = (
        "| workload | global batch | parameter bytes | 1 core | 2 cores data-parallel "
        "| 2 cores threads | model 2 cores | error vs data-parallel | error vs threads |\n"
        "|---|---|---|---|---|---|---|---|---|"
    )
    readme = f"""# CPU speed tables

Iterations per second of qosched's built-in training workloads (`qosched.workloads`: `cnn`,
`transformer`) as synchronous data-parallel jobs on CPU cores: rows are the global batch size,
columns the number of workers (one worker = one CPU core: 1, 2, 4, … 64). An empty cell means
fewer than one sample per worker. Made by `bench/measure_cpu_speeds.py` on {when}; rerun it to
rebuild them for another machine.

## Measured

On this machine: {cpu_model_name()}, {len(available)} usable cores, memory bandwidth
{cpu.memory_bandwidth / 1e9:.1f} GB/s (measured by `qosched.hardware.measure`). Each time is the
median of {args.iterations} training iterations (seeded synthetic data + forward + backward +
optimizer step) after {WARMUP} warm-up iterations, with `OMP_WAIT_POLICY=PASSIVE`; one core =
`torch.set_num_threads(1)` and affinity to core {core} (the faster of the two on a probe). Each
measurement was taken {args.rounds} times in rounds over all measurements, and the lowest of its
medians kept: other processes share this machine's cores now and then, which is why medians are
taken, and why the least disturbed round is kept.

Two cores were measured two ways: *data-parallel*, as the model assumes (two processes, one per
core, each on half the batch, gradients all-reduced with gloo over loopback; the time of a step
includes the all-reduce), and *threads* (one process with two intra-op threads, what qosched's
local runner does for a job given two cores). Times in ms; error = (model - measured) / measured.

{measured_header}
{measured_rows}

Model error on two cores against the data-parallel measurement: mean absolute
{statistics.mean(abs(e) for e in dp_errors):.1%}, largest {max(abs(e) for e in dp_errors):.1%};
against two threads: mean absolute {statistics.mean(abs(e) for e in thread_errors):.1%}, largest
{max(abs(e) for e in thread_errors):.1%}. The 1-minute load average was {load_before} before and
{load_after} after the measurements (this machine has {len(available)} cores): a load near or
above 1 means another process was running on one of the two cores for much of the time, which
slows every two-core measurement (its slower core holds the other back) far more than the
one-core measurement on the less loaded core.

Single-core times at every per-worker batch used (ms):

{single_table}

## Modelled

For `k` workers, one per core, on nodes of {net.cores_per_node} cores (counts above
{net.cores_per_node} cross nodes):

    t(k) = c(B/k) + allreduce(k)
    allreduce(k) = 2(m-1)/m * P / BW_mem + [n > 1] * (2(n-1)/n * P / BW_net + 2(n-1) * latency)

with `c(b)` the measured one-core time at per-worker batch `b`, `m = min(k, {net.cores_per_node})`
workers per node, `n = ceil(k / {net.cores_per_node})` nodes, `P` the parameter bytes above (float32
gradients), `BW_mem` = {cpu.memory_bandwidth / 1e9:.1f} GB/s (measured), and an assumed network
of {args.network_gbit:g} Gb/s Ethernet with {args.network_latency_us:g} µs per ring step.
Iterations/s = `1/t(k)`; the 1-core column is the measured `1/c(B)`. The model leaves out what
one machine with two cores cannot show: memory-bandwidth contention among many cores of one
socket, stragglers, and overlap of communication with the backward pass.
"""
    (args.out / "README.md").write_text(readme)
    print(readme)


if __name__ == "__main__":
    main()
