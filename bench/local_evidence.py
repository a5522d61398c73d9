"""Evidence for the local service: real training jobs on this machine's cores.

    python bench/local_evidence.py workload [--repeats 2]   # about 3 min per repeat on 2 cores
    python bench/local_evidence.py commands [--repeats 2]   # about 2 min per repeat
    python bench/local_evidence.py resize                   # about 1 min
    python bench/local_evidence.py predictions DIR          # seconds: replays kept stores

- workload: the bundled real workload (``qosched demo``) under ``qos`` and under ``fifo`` with
  the users' over-provisioned requests: deadlines met, CPU time used per core-second allocated,
  and the prediction error of the real jobs against their progress (from each job's own
  progress samples in the store, under either policy: the predictor ``qos`` keeps, fed the
  samples up to a point, predicts the remaining time on the job's cores, compared with the
  remaining time at the speed the job then ran at there).
- commands: the same prediction error on command jobs: a user's own PyTorch script
  (``bench/command_train.py``, reporting with ``qosched.job.report``), a long job and a short
  one arriving 2 s after it, under ``qos`` and ``fifo``. Never seen before, so they start on the
  placeholder speed and allow best effort.
- resize: what a re-size costs. In place: a running runner's allocation is rewritten, timed
  from the write to the runner's ``resize`` event, plus how much longer the iterations around
  it took. By restart (what a re-size would cost without the in-place path): SIGTERM to exit
  (checkpoint), and launch to first progress of the restarted runner.
- predictions: the prediction tables again from the stores a ``workload`` or ``commands`` run
  kept (``--keep DIR``): a change to the predictor is scored on the same jobs' progress in
  seconds, without running them again.

Every number comes from real processes on this machine; the tables print the machine's CPU.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import math
import os
import platform
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from qosched.backends.local.cpu_use import CHECKPOINTING, ENDING, STARTING, Breakdown
from qosched.backends.local.demo import DemoJob, RunReport, calibrated_plan, run_workload
from qosched.backends.local.process import launch_runner
from qosched.backends.local.progress import RunnerEvent, read_progress
from qosched.backends.local.speed_memory import measured_rates, remembered_curve, speed_key
from qosched.backends.local.speeds import SPEED_RECENT_S, prior_curve
from qosched.backends.local.store import JobRecord, Lifecycle, Store
from qosched.cluster.predict import OnlinePredictor, Prediction, relative_error
from qosched.cluster.throughput import SpeedCurve
from qosched.trainingjob.jobspec import Deadline, Resources, TrainingJobSpec
from qosched.trainingjob.protocol import (
    ALLOCATION_FILE,
    PROGRESS_FILE,
    Allocation,
    RunnerJob,
    write_allocation,
    write_job_folder,
)

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


#: What a prediction is checked against, per sample: the speed the job then ran at on the same
#: cores until they changed (or its work was done: its real remaining time there); the speed over
#: the next ``WINDOW_S`` seconds only; and, as the floor of that short check, how far the next
#: ``WINDOW_S`` seconds stray from the whole stretch's own mean speed (no predictor does better on
#: average than knowing that mean).
HORIZONS = ("to_change", "next_window", "window_floor")


class Predictor(Protocol):
    """What the replay asks of a predictor (`OnlinePredictor`'s own methods)."""

    last_iterations: float | None

    def observe(self, time_s: float, iterations_done: float, workers: int) -> None: ...
    def restart(self, time_s: float, iterations_done: float) -> None: ...
    def predict(self, workers: int) -> Prediction: ...


#: A job's predictor in a replay, from its prior curve and its record.
PredictorFactory = Callable[[SpeedCurve, JobRecord], Predictor]


def qos_predictor(curve: SpeedCurve, record: JobRecord) -> OnlinePredictor:
    """The predictor ``qos`` keeps for a job in the service, from its prior ``curve``."""
    return OnlinePredictor.from_curve(curve, confidence=0.2, recent_s=SPEED_RECENT_S)


@dataclass(frozen=True, slots=True)
class PredictionPoint:
    """One scored prediction: at a progress sample of a job, ``done`` of its work done on
    ``cpus`` cores (for ``since_change_s`` of this run on them), the speed ``predicted`` there
    against the speed it then ran at until its cores changed or its work was done
    (``realised_stretch``, over the next ``stretch_s``) and over the next ``WINDOW_S`` only
    (``realised_window``); ``others_changed``: another job of the store started or ended
    within that stretch (a neighbour on the machine's other cores)."""

    job: str
    done: float
    cpus: int
    since_change_s: float
    stretch_s: float
    predicted: float
    realised_stretch: float
    realised_window: float
    others_changed: bool

    def bucket(self) -> tuple[float, float] | None:
        return next((b for b in BUCKETS if b[0] <= self.done < b[1]), None)


def prediction_errors(
    store: Store, make_predictor: PredictorFactory = qos_predictor
) -> dict[str, dict[tuple[float, float], list[float]]]:
    """Per horizon (``HORIZONS``) and bucket of work done: the error of the remaining time
    predicted from the speed predicted on the job's current cores, against the remaining time at
    the speed it then ran at there. The predictor is the one ``qos`` keeps for the job in the
    service (its prior, with what earlier jobs of its speed key had measured by its submission,
    and its memory), fed the job's samples up to that point; ``make_predictor`` replaces it."""
    errors = {horizon: {bucket: [] for bucket in BUCKETS} for horizon in HORIZONS}
    for point in prediction_points(store, make_predictor):
        bucket = point.bucket()
        # Remaining time, not speed: |R/predicted - R/realised| / (R/realised), which for
        # a speed predicted too high is less than the speed's own relative error.
        for horizon, guess, realised in (
            ("to_change", point.predicted, point.realised_stretch),
            ("next_window", point.predicted, point.realised_window),
            ("window_floor", point.realised_stretch, point.realised_window),
        ):
            errors[horizon][bucket].append(relative_error(1.0 / guess, 1.0 / realised))
    return errors


def prediction_points(
    store: Store, make_predictor: PredictorFactory = qos_predictor
) -> Iterator[PredictionPoint]:
    """Every prediction `prediction_errors` scores, in the store's order (see there)."""
    every = store.list()  # a job that failed or was cancelled left its speeds too
    changes = sorted(t for r in every for t in (r.started_at, r.finished_at) if t is not None)
    for record in store.list([Lifecycle.SUCCEEDED]):
        samples = store.progress(record.id)
        prior = remembered_curve(
            prior_curve(record.spec, len(os.sched_getaffinity(0))),
            _remembered_at_submission(store, record, every),
        )
        # A job measured first (profiling) has no prediction until it is admitted, on what it
        # measured: from then on, as the service's policy has it.
        admitted_at, measured = _admission(store, record.id)
        prior = remembered_curve(prior, measured)
        predictor = make_predictor(prior, record)
        own = {record.started_at, record.finished_at}
        clock = 0.0  # compute time: the samples' gaps, so pauses between runs do not count
        changed_at = 0.0  # the clock when this run on these cores began
        for i, sample in enumerate(samples):
            # The first sample of a run only starts an interval, as in the service, which
            # measures the speed from a run's first report on (a command's start-up before it
            # is running time, but no measure of its speed).
            previous = samples[i - 1] if i else None
            if _same_run(previous, sample):
                clock += sample.t - previous.t
            else:
                changed_at = clock
            if sample.t < admitted_at:
                continue
            if sample.iteration < (predictor.last_iterations or 0):
                predictor.restart(clock, sample.iteration)  # resumed from an older checkpoint
            predictor.observe(clock, sample.iteration, sample.cpus)
            stretch = _stretch(samples[i + 1 :], sample, record.spec.iterations)
            window = [later for later in stretch if later.t - sample.t <= WINDOW_S]
            if not window or window[-1].t - sample.t < WINDOW_S / 2:
                continue
            done = sample.iteration / record.spec.iterations
            if not any(b[0] <= done < b[1] for b in BUCKETS):
                continue
            realised_window = _speed(sample, window[-1])
            realised_stretch = _speed(sample, stretch[-1])
            if realised_window <= 0 or realised_stretch <= 0:
                continue
            end = stretch[-1].t
            first = bisect.bisect_right(changes, sample.t)
            others = any(t not in own for t in changes[first : bisect.bisect_left(changes, end)])
            yield PredictionPoint(
                record.name,
                done,
                sample.cpus,
                clock - changed_at,
                end - sample.t,
                predictor.predict(sample.cpus).rate,
                realised_stretch,
                realised_window,
                others,
            )


def _stretch(later_samples, sample, iterations: int) -> list:
    """The samples after ``sample`` on the same cores in the same run, up to the one where the
    job's work is done (the time a command then takes to exit is not in the remaining time
    predicted: iterations left / speed)."""
    stretch = []
    for later in later_samples:
        if not _same_run(stretch[-1] if stretch else sample, later):
            break
        stretch.append(later)
        if later.iteration >= iterations:
            break
    return stretch


def _speed(first, last) -> float:
    return (last.iteration - first.iteration) / (last.t - first.t)


def _admission(store: Store, job_id: str) -> tuple[float, dict[int, float]]:
    """When the job was admitted (its ``admitted`` event; its submission when it has none) and
    the speeds it measured before, per worker count (none unless it was profiling)."""
    for event in store.events(job_id):
        if event.kind == "admitted":
            measured = event.detail.get("measured") or {}
            return event.t, {int(w): float(r) for w, r in measured.items()}
    return -math.inf, {}


def _remembered_at_submission(store: Store, record, records) -> dict[int, float]:
    """What the service remembered under the job's speed key when the job was submitted: per
    count, the speed measured by the last job of that key to finish before it (speed_memory)."""
    key = speed_key(record.spec)
    rates: dict[int, float] = {}
    earlier = [
        r
        for r in records
        if r.finished_at is not None
        and r.finished_at < record.submitted_at
        and r.spec is not None
        and speed_key(r.spec) == key
    ]
    for other in sorted(earlier, key=lambda r: r.finished_at):
        samples = [(s.t, s.iteration, s.cpus) for s in store.progress(other.id)]
        rates.update(measured_rates(samples))
    return rates


def prediction_table(errors: dict[str, dict[tuple[float, float], list[float]]]) -> str:
    """Samples, median error, p90 error and share within 10% per bucket, policies side by side."""
    policies = list(errors)
    head = " | ".join(f"{p}: samples | median | p90 | within 10%" for p in policies)
    lines = [f"| work done | {head} |", "|---|" + "---|" * 4 * len(policies)]
    for bucket in BUCKETS:
        cells = []
        for policy in policies:
            values = sorted(errors[policy][bucket])
            if not values:
                cells.append("0 | - | - | -")
                continue
            p90 = values[min(len(values) - 1, int(0.9 * len(values)))]
            within = sum(v <= 0.10 for v in values) / len(values)
            cells.append(
                f"{len(values)} | {statistics.median(values):.1%} | {p90:.1%} | {within:.0%}"
            )
        lines.append(f"| {bucket[0]:.0%}-{bucket[1]:.0%} | {' | '.join(cells)} |")
    return "\n".join(lines)


Errors = dict[str, dict[str, dict[tuple[float, float], list[float]]]]  # horizon, policy, bucket


def no_errors(policies: tuple[str, ...]) -> Errors:
    return {h: {p: {b: [] for b in BUCKETS} for p in policies} for h in HORIZONS}


def add_errors(errors: Errors, policy: str, found: dict) -> None:
    for horizon, buckets in found.items():
        for bucket, values in buckets.items():
            errors[horizon][policy][bucket].extend(values)


def print_predictions(errors: Errors) -> None:
    """The three tables of ``HORIZONS``, each policy beside the other."""
    print(
        "The remaining time predicted at a job's current cores (the predictor `qos` keeps, "
        "replayed on each policy's jobs) against the time the job then took there: *remaining "
        "time on its cores*: at the speed it ran at until its cores changed or its work was "
        f"done (at least {WINDOW_S / 2:g} s later); *next {WINDOW_S:g} s*: at the speed of the "
        f"next {WINDOW_S:g} s only. *Floor of the {WINDOW_S:g} s check*: the same short check "
        "made with the stretch's own mean speed in place of the prediction: how much the "
        f"speed of {WINDOW_S:g} s strays from the speed the job held there, which no "
        "prediction made before can know.\n"
    )
    titles = {
        "to_change": "Remaining time on its cores",
        "next_window": f"Next {WINDOW_S:g} s",
        "window_floor": f"Floor of the {WINDOW_S:g} s check",
    }
    for horizon in HORIZONS:
        print(f"\n### {titles[horizon]}\n")
        print(prediction_table(errors[horizon]))


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
    errors = no_errors(("qos", "fifo"))
    totals: dict[str, list[RunReport]] = {"qos": [], "fifo": []}
    for repeat in range(1, args.repeats + 1):
        # Each repeat calibrates anew, as every `qosched demo` does.
        plan = calibrated_plan(cores)
        for policy in ("qos", "fifo"):
            with tempfile.TemporaryDirectory() as home:
                report = run_workload(policy, plan.jobs, home=Path(home))
                with Store(Path(home) / policy / "state.db") as store:
                    add_errors(errors, policy, prediction_errors(store))
                keep_store(args.keep, Path(home) / policy / "state.db", policy, repeat)
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
    print("\n## Prediction error of the real jobs against their progress\n")
    print_predictions(errors)
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


def command_jobs(cores: int) -> list[DemoJob]:
    """A long command job asking for every core, and a short one 2 s later (bench/command_train.py:
    about 11 iterations/s on one core of the development machine)."""
    script = str(Path(__file__).with_name("command_train.py"))

    def spec(name: str, iterations: int, deadline_s: int) -> TrainingJobSpec:
        return TrainingJobSpec(
            name=name,
            iterations=iterations,
            deadline=Deadline(relative_s=deadline_s),
            command=(sys.executable, script),
            resources=Resources(min_cpus=1, max_cpus=cores),
            requested_cpus=cores,
            best_effort=True,
        )

    return [
        DemoJob(0.0, spec("command-long", 400, 120)),
        DemoJob(2.0, spec("command-short", 120, 30)),
    ]


def command_predictions(args: argparse.Namespace) -> None:
    cores = len(os.sched_getaffinity(0))
    print(
        f"# Prediction error on command jobs: {cores} cores of {cpu_model()}, "
        f"{args.repeats} repeat(s)\n"
    )
    print("| repeat | policy | per job: done in / deadline s | wall s |")
    print("|---|---|---|---|")
    errors = no_errors(("qos", "fifo"))
    for repeat in range(1, args.repeats + 1):
        for policy in ("qos", "fifo"):
            with tempfile.TemporaryDirectory() as home:
                report = run_workload(policy, command_jobs(cores), home=Path(home))
                with Store(Path(home) / policy / "state.db") as store:
                    add_errors(errors, policy, prediction_errors(store))
                keep_store(args.keep, Path(home) / policy / "state.db", policy, repeat)
            cells = ", ".join(
                f"{job.name} {_done(job)} / {job.deadline_at - job.submitted_at:.0f}"
                for job in report.jobs
            )
            print(f"| {repeat} | {policy} | {cells} | {report.wall_s:.0f} |")
    print("\n## Prediction error of the command jobs against their progress\n")
    print_predictions(errors)


def keep_store(folder: Path | None, store: Path, policy: str, repeat: int) -> None:
    """A copy of a run's store in ``folder`` (when given), named ``POLICY-REPEAT.db``: SQLite's
    own backup, which takes what the store's write-ahead log still holds too."""
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        with (
            contextlib.closing(sqlite3.connect(store)) as source,
            contextlib.closing(sqlite3.connect(folder / f"{policy}-{repeat}.db")) as copy,
        ):
            source.backup(copy)


def replay_predictions(args: argparse.Namespace) -> None:
    kept = sorted(args.folder.glob("*-*.db"))
    if not kept:
        sys.exit(f"no kept stores (POLICY-REPEAT.db) in {args.folder}")
    policies = tuple(dict.fromkeys(path.stem.rsplit("-", 1)[0] for path in kept))
    errors = no_errors(policies)
    for path in kept:
        with Store(path) as store:
            add_errors(errors, path.stem.rsplit("-", 1)[0], prediction_errors(store))
    print(f"# Prediction error replayed on {len(kept)} kept stores in {args.folder}\n")
    print_predictions(errors)


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
    c = commands.add_parser("commands", help="prediction error on command jobs, qos and fifo")
    for runs in (w, c):
        runs.add_argument("--repeats", type=int, default=1)
        runs.add_argument(
            "--keep", type=Path, metavar="DIR", help="keep each run's store here, to replay"
        )
    w.set_defaults(run=workload)
    c.set_defaults(run=command_predictions)
    p = commands.add_parser("predictions", help="the prediction tables from kept stores")
    p.add_argument("folder", type=Path, metavar="DIR")
    p.set_defaults(run=replay_predictions)
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
