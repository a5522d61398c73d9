"""Evidence for the local service: real training jobs on this machine's cores.

    python bench/local_evidence.py workload [--repeats 2]   # about 3 min per repeat on 2 cores
    python bench/local_evidence.py resize                   # about 1 min

- workload: the bundled real workload (``qosched demo``) under ``qos`` and under ``fifo`` with
  the users' over-provisioned requests: deadlines met, CPU time used per core-second allocated,
  and the prediction error of the real jobs against their progress (from each qos job's own
  progress samples in the store: the predictor ``qos`` uses, fed the samples up to a point,
  predicts the speed on the job's cores, compared with the speed the job then ran at there).
- resize: what a re-size costs. In place: a running runner's allocation is rewritten, timed
  from the write to the runner's ``resize`` event, plus how much longer the iterations around
  it took. By restart (what a re-size would cost without the in-place path): SIGTERM to exit
  (checkpoint), and launch to first progress of the restarted runner.

Every number comes from real processes on this machine; the tables print the machine's CPU.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from qosched.backends.local.cpu_use import CHECKPOINTING, ENDING, STARTING, Breakdown
from qosched.backends.local.demo import RunReport, calibrated_plan, run_workload
from qosched.backends.local.process import launch_runner
from qosched.backends.local.progress import RunnerEvent, read_progress
from qosched.backends.local.protocol import (
    ALLOCATION_FILE,
    PROGRESS_FILE,
    Allocation,
    RunnerJob,
    write_allocation,
    write_job_folder,
)
from qosched.backends.local.speeds import prior_curve
from qosched.backends.local.store import Lifecycle, Store
from qosched.cluster.predict import OnlinePredictor

BUCKETS = ((0.0, 0.05), (0.05, 0.10), (0.10, 0.25), (0.25, 0.50), (0.50, 0.90))
WINDOW_S = 4.0
MAX_REPORT_GAP_S = 2.0  # runners report progress every 0.5 s while they run


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def prediction_errors(store: Store) -> dict[tuple[float, float], list[float]]:
    """Per bucket of work done: the error of the predicted speed on the job's current cores
    against the speed it then ran at there (over the next ``WINDOW_S`` seconds on the same
    count): the error of the predicted remaining time at that allocation. The predictor is the
    one ``qos`` uses, fed the job's samples up to that point."""
    errors: dict[tuple[float, float], list[float]] = {bucket: [] for bucket in BUCKETS}
    for record in store.list([Lifecycle.SUCCEEDED]):
        samples = store.progress(record.id)
        predictor = OnlinePredictor.from_curve(
            prior_curve(record.spec, len(os.sched_getaffinity(0))), confidence=0.2
        )
        clock = 0.0  # compute time: the samples' gaps, so pauses between runs do not count
        for i, sample in enumerate(samples):
            previous = samples[i - 1] if i else None
            if _same_run(previous, sample):
                clock += sample.t - previous.t
            predictor.observe(clock, sample.iteration, sample.cpus)
            ahead = []
            for later in samples[i + 1 :]:
                if later.t - sample.t > WINDOW_S or not _same_run(
                    ahead[-1] if ahead else sample, later
                ):
                    break
                ahead.append(later)
            if not ahead or ahead[-1].t - sample.t < WINDOW_S / 2:
                continue
            realised = (ahead[-1].iteration - sample.iteration) / (ahead[-1].t - sample.t)
            done = sample.iteration / record.spec.iterations
            bucket = next((b for b in BUCKETS if b[0] <= done < b[1]), None)
            if bucket is None or realised <= 0:
                continue
            predicted = predictor.predict(sample.cpus).rate
            errors[bucket].append(abs(predicted - realised) / realised)
    return errors


def _same_run(earlier, later) -> bool:
    """Two consecutive samples of one uninterrupted run on the same cores: a longer gap than a
    few report intervals is a pre-emption or a restart, whose downtime is not compute time."""
    return (
        earlier is not None
        and later.cpus == earlier.cpus
        and later.t - earlier.t <= MAX_REPORT_GAP_S
    )


def workload(args: argparse.Namespace) -> None:
    cores = tuple(sorted(os.sched_getaffinity(0)))
    print(
        f"# The bundled real workload under qos and fifo: {len(cores)} cores of {cpu_model()}, "
        f"{args.repeats} repeat(s)\n"
    )
    print(
        "Four real PyTorch training jobs (`qosched demo`), each asking for every core (the "
        "over-provisioning users of the paper); `fifo` honours the requests, `qos` sees only "
        "the deadlines, which each repeat sets anew from the workloads' speeds measured on "
        "this machine just before it. *CPU use* = CPU time of the runner processes / "
        "core-seconds allocated.\n"
    )
    print("| repeat | policy | deadlines met | per job: done in / deadline s | CPU use | wall s |")
    print("|---|---|---|---|---|---|")
    errors: dict[tuple[float, float], list[float]] = {bucket: [] for bucket in BUCKETS}
    totals: dict[str, list[RunReport]] = {"qos": [], "fifo": []}
    for repeat in range(1, args.repeats + 1):
        # Each repeat calibrates anew, as every `qosched demo` does.
        plan = calibrated_plan(cores)
        for policy in ("qos", "fifo"):
            with tempfile.TemporaryDirectory() as home:
                report = run_workload(policy, plan.jobs, home=Path(home))
                if policy == "qos":
                    with Store(Path(home) / policy / "state.db") as store:
                        for bucket, values in prediction_errors(store).items():
                            errors[bucket].extend(values)
            totals[policy].append(report)
            cells = ", ".join(
                f"{job.name} {_done(job)} / {job.deadline_at - job.submitted_at:.0f}"
                for job in report.jobs
            )
            use = "-" if report.utilisation is None else f"{report.utilisation:.0%}"
            print(
                f"| {repeat} | {policy} | {report.met} of {len(report.jobs)} | {cells} | {use} | "
                f"{report.wall_s:.0f} |"
            )
    print("\n## Prediction error of the real qos jobs against their progress\n")
    print(
        f"Predicted speed on the job's current cores against the speed it then ran at there "
        f"(next {WINDOW_S:g} s), i.e. the error of the predicted remaining time at that "
        "allocation.\n"
    )
    print("| work done | samples | median error | p90 error | within 10% |")
    print("|---|---|---|---|---|")
    for (low, high), values in errors.items():
        if not values:
            print(f"| {low:.0%}-{high:.0%} | 0 | - | - | - |")
            continue
        values.sort()
        p90 = values[min(len(values) - 1, int(0.9 * len(values)))]
        within = sum(v <= 0.10 for v in values) / len(values)
        print(
            f"| {low:.0%}-{high:.0%} | {len(values)} | {statistics.median(values):.1%} | "
            f"{p90:.1%} | {within:.0%} |"
        )
    print_breakdown(totals)
    for policy, reports in totals.items():
        met = sum(r.met for r in reports)
        jobs = sum(len(r.jobs) for r in reports)
        per_repeat = [r.met for r in reports]
        print(
            f"\n- {policy}: deadlines met per repeat: {per_repeat} (min {min(per_repeat)}, "
            f"max {max(per_repeat)} of {len(reports[0].jobs)})"
        )
        use = [r.utilisation for r in reports if r.utilisation is not None]
        mean_use = f"{statistics.fmean(use):.0%}" if use else "-"
        print(
            f"\n- {policy}: {met} of {jobs} deadlines met; CPU use of allocated cores "
            f"{mean_use} (mean over repeats)."
        )


def print_breakdown(totals: dict[str, list[RunReport]]) -> None:
    """Where each policy's allocated core-seconds went, over all repeats (``cpu_use``)."""
    summed: dict[str, Breakdown] = {}
    for policy, reports in totals.items():
        summed[policy] = Breakdown()
        for report in reports:
            if report.breakdown is not None:
                summed[policy].add(report.breakdown)
    counts = sorted({cores for found in summed.values() for cores in found.running_by_cores})
    print("\n## Where the allocated core-seconds went\n")
    print(
        "Core-seconds held in each stretch of the jobs' lives (share of all held); *busy*: the "
        "CPU time the runners used there, *waited*: the time their threads were ready to run "
        "but other work held the core (the kernel's run-queue wait), both as a share of what "
        "was held there. Start-up: launch to the runner's `start` event (Python, PyTorch, the "
        "model); running: `start` to `done`, on the cores held then, less checkpoints; "
        "checkpointing: the saves, as the runner timed them; ending: the last event to the "
        "service seeing the runner gone, with the runners' CPU time after their last event. "
        "Summed over the repeats. What is neither busy nor waited is idle: a core held "
        "with no thread of the job ready to run on it. The last two columns are seconds "
        "of wall time, median and most, over the launches and the runners' endings.\n"
    )
    running = [f"running on {cores} core{'s' if cores > 1 else ''}" for cores in counts]
    head = ["policy", "allocated core-s", STARTING, *running, CHECKPOINTING, ENDING]
    tail = ["CPU use", "waited", "s per start-up", "s per ending"]
    print("| " + " | ".join([*head, *tail]) + " |")
    print("|" + "---|" * (len(head) + len(tail)))
    for policy, found in summed.items():
        total = found.held_total
        cells = [policy, f"{total:.0f}"]
        cells.append(
            _cell(found.held[STARTING], found.used[STARTING], found.waited[STARTING], total)
        )
        for cores in counts:
            held, used, waited = found.running_by_cores.get(cores, (0.0, 0.0, 0.0))
            cells.append(_cell(held, used, waited, total))
        for phase in (CHECKPOINTING, ENDING):
            cells.append(_cell(found.held[phase], found.used[phase], found.waited[phase], total))
        cells.append(f"{found.used_total / total:.0%}" if total else "-")
        cells.append(f"{found.waited_total / total:.0%}" if total else "-")
        for phase in (STARTING, ENDING):
            seconds = found.stretches[phase]
            cells.append(
                f"{statistics.median(seconds):.2f} ({max(seconds):.2f}), n={len(seconds)}"
                if seconds
                else "-"
            )
        print("| " + " | ".join(cells) + " |")


def _cell(held: float, used: float, waited: float, total: float) -> str:
    if held <= 0:
        return "-"
    return f"{held:.1f} ({held / total:.0%}): {used / held:.0%} busy, {waited / held:.0%} waited"


def _done(job) -> str:
    if job.finished_at is None:
        return job.state
    return f"{job.finished_at - job.submitted_at:.0f}" + ("" if job.met else " (missed)")


# -- resize -------------------------------------------------------------------------------------


def _wait_for(job_dir: Path, predicate, timeout_s: float = 120.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for event in read_progress(job_dir / PROGRESS_FILE):
            if predicate(event):
                return event
        time.sleep(0.01)
    raise TimeoutError("the runner did not report in time")


def resize(args: argparse.Namespace) -> None:
    cores = tuple(sorted(os.sched_getaffinity(0)))
    if len(cores) < 2:
        sys.exit("resize needs at least two cores")
    print(f"# What a re-size costs: {cpu_model()}, cnn workload\n")
    in_place, restart_stop, restart_start = [], [], []
    with tempfile.TemporaryDirectory() as root:
        job_dir = Path(root) / "job"
        job = RunnerJob("job", "cnn", None, 100_000, 0, 10_000)
        write_job_folder(job_dir, job, Allocation(cores[:1], 1))
        runner = launch_runner(job_dir, stderr=subprocess.DEVNULL)
        _wait_for(job_dir, lambda e: e.event is RunnerEvent.PROGRESS)
        for version in range(2, 2 + 2 * args.resizes):
            chosen = cores[:2] if version % 2 == 0 else cores[:1]
            written = time.time()
            write_allocation(job_dir / ALLOCATION_FILE, Allocation(chosen, version))
            event = _wait_for(
                job_dir, lambda e, v=version: e.event is RunnerEvent.RESIZE and e.version == v
            )
            in_place.append(event.t - written)
            time.sleep(1.0)
        # By restart: stop with SIGTERM (checkpoint), start again, wait for progress.
        for _ in range(args.restarts):
            stopped = time.time()
            runner.send_signal(signal.SIGTERM)
            runner.wait(timeout=120)
            restart_stop.append(time.time() - stopped)
            before = len(read_progress(job_dir / PROGRESS_FILE))
            started = time.time()
            runner = launch_runner(job_dir, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                events = read_progress(job_dir / PROGRESS_FILE)[before:]
                if any(e.event is RunnerEvent.PROGRESS for e in events):
                    break
                time.sleep(0.01)
            restart_start.append(time.time() - started)
        runner.send_signal(signal.SIGTERM)
        runner.wait(timeout=120)
    print("| re-size | samples | median s | max s |")
    print("|---|---|---|---|")
    for name, values in (
        ("in place: allocation written -> runner re-pinned", in_place),
        ("restart: SIGTERM -> checkpointed and exited", restart_stop),
        ("restart: launch -> first progress report", restart_start),
    ):
        print(f"| {name} | {len(values)} | {statistics.median(values):.3f} | {max(values):.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    w = commands.add_parser("workload", help="qos vs fifo on the bundled real workload")
    w.add_argument("--repeats", type=int, default=1)
    w.set_defaults(run=workload)
    r = commands.add_parser("resize", help="the cost of a re-size, in place and by restart")
    r.add_argument("--resizes", type=int, default=5)
    r.add_argument("--restarts", type=int, default=3)
    r.set_defaults(run=resize)
    args = parser.parse_args()
    started = time.perf_counter()
    args.run(args)
    print(f"\n_wall time: {time.perf_counter() - started:.0f} s_")


if __name__ == "__main__":
    main()
