"""The bundled real workload: a few training jobs with deadlines, run end to end on this machine.

Each job is a real PyTorch training process. Users of a request-based scheduler over-provision
(each asks for every core), so ``fifo`` runs them one after another; ``qos`` is told only the
deadlines and sizes each job itself. The same jobs, arriving at the same offsets, run under both.

The deadlines are not fixed seconds: the workloads' speeds are measured on this machine first
(``calibrate``), and each deadline is set so that running the jobs side by side meets it with a
margin while running them one after another cannot. Two pairs arrive one after the other: a
long job, then, two seconds later, a short urgent one that must not wait behind it.
"""

from __future__ import annotations

import math
import resource
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from qosched.backends.local.calibrate import SpeedMeasurement, measure_side_by_side_and_alone
from qosched.backends.local.cpu_use import ENDING, Breakdown, job_breakdown
from qosched.backends.local.progress import read_progress
from qosched.backends.local.service import LocalService
from qosched.backends.local.store import Lifecycle
from qosched.core.errors import InputError
from qosched.trainingjob.jobspec import Deadline, Resources, TrainingJobSpec
from qosched.trainingjob.protocol import PROGRESS_FILE


@dataclass(frozen=True, slots=True)
class DemoJob:
    """A job of the bundled workload, submitted ``offset_s`` after the run starts."""

    offset_s: float
    spec: TrainingJobSpec


#: The two pairs of the workload: a long job, then a short urgent one arriving just after it.
PAIRS = (("cnn", "transformer"), ("transformer", "cnn"))
#: A long job's work is this many times its short partner's (in seconds side by side).
LONG_OVER_SHORT = 3.0
#: Seconds a short job's work takes side by side, tried in order: the first that makes running
#: the jobs one after another clearly miss is chosen (shorter keeps the demo short).
SHORT_S_CHOICES = tuple(range(10, 41, 2))
#: Running one after another must miss a short job's deadline by this factor at least.
CLEAR_MISS = 1.2


@dataclass(frozen=True, slots=True)
class DemoPlan:
    """The calibrated workload and what each way of running it is expected to give.

    Side by side: every job on ``lane_cores`` cores from its arrival (what ``qos`` can do).
    One after another: each job on all cores in arrival order (what ``fifo`` does with
    over-provisioned requests). Times are seconds from each job's arrival.
    """

    jobs: tuple[DemoJob, ...]
    cores: int
    lane_cores: int
    startup_s: float
    side_by_side_s: dict[str, float]
    one_after_another_s: dict[str, float]

    def deadline_s(self, name: str) -> int:
        job = next(job for job in self.jobs if job.spec.name == name)
        assert job.spec.deadline.relative_s is not None
        return job.spec.deadline.relative_s


def plan_jobs(
    speeds: Mapping[tuple[str, int], SpeedMeasurement],
    cores: int,
    *,
    margin: float = 1.5,
    tick_s: float = 2.0,
    gap_s: float = 2.0,
) -> DemoPlan:
    """Deadlines that running the jobs side by side meets with ``margin`` to spare and running
    them one after another misses, from speeds measured on this machine.

    A deadline is ``margin`` x the job's time side by side plus an allowance of two starts
    (a start and a restart) and one decision tick. ``speeds`` holds each workload of ``PAIRS``
    at ``cores // 2`` cores (measured side by side) and at ``cores`` cores (alone).
    """
    if cores < 2:
        raise InputError(
            f"the demo runs jobs side by side and needs at least 2 cores, got {cores}",
            field="cpus",
        )
    lane = cores // 2
    startup = max(found.startup_s for found in speeds.values())
    allowance = 2 * startup + tick_s

    def rate(workload: str, count: int) -> float:
        return speeds[(workload, count)].rate

    def build(short_s: float) -> DemoPlan:
        jobs: list[DemoJob] = []
        side: dict[str, float] = {}
        sequential: dict[str, float] = {}
        offset = 0.0
        for index, (long_workload, short_workload) in enumerate(PAIRS):
            long_name = f"{long_workload}-long-{index + 1}"
            short_name = f"{short_workload}-urgent-{index + 1}"
            long_work = max(1, round(LONG_OVER_SHORT * short_s * rate(long_workload, lane)))
            short_work = max(1, round(short_s * rate(short_workload, lane)))
            side[long_name] = long_work / rate(long_workload, lane) + startup
            side[short_name] = short_work / rate(short_workload, lane) + startup
            long_alone = startup + long_work / rate(long_workload, cores)
            short_alone = startup + short_work / rate(short_workload, cores)
            sequential[long_name] = long_alone
            sequential[short_name] = long_alone + short_alone - gap_s
            for name, workload, work, at in (
                (long_name, long_workload, long_work, offset),
                (short_name, short_workload, short_work, offset + gap_s),
            ):
                deadline = math.ceil(margin * (side[name] - startup) + allowance)
                jobs.append(DemoJob(at, _demo_spec(name, workload, work, deadline, cores)))
            # The next pair comes once this one is done side by side, with a start to spare.
            offset += max(side[long_name], gap_s + side[short_name]) + allowance
        return DemoPlan(tuple(jobs), cores, lane, startup, side, sequential)

    plan = build(SHORT_S_CHOICES[-1])
    for short_s in SHORT_S_CHOICES:
        candidate = build(short_s)
        if all(
            candidate.one_after_another_s[job.spec.name]
            > CLEAR_MISS * candidate.deadline_s(job.spec.name)
            for job in candidate.jobs
            if "urgent" in job.spec.name
        ):
            plan = candidate
            break
    return plan


def _demo_spec(name: str, workload: str, iterations: int, deadline_s: int, cores: int):
    return TrainingJobSpec(
        name=name,
        iterations=iterations,
        deadline=Deadline(relative_s=deadline_s),
        workload=workload,
        resources=Resources(min_cpus=1, max_cpus=cores),
        requested_cpus=cores,  # what an over-provisioning user asks for
    )


def calibrated_plan(
    cpus: tuple[int, ...], *, seconds: float = 4.0, on_progress: Callable[[str], None] | None = None
) -> DemoPlan:
    """Measure the workloads on ``cpus`` (about half a minute), then plan the demo on them."""
    if len(cpus) < 2:
        plan_jobs({}, len(cpus))  # raises the InputError that explains why
    workloads = tuple(dict.fromkeys(workload for pair in PAIRS for workload in pair))
    speeds = measure_side_by_side_and_alone(
        workloads, cpus, len(cpus) // 2, seconds=seconds, on_progress=on_progress
    )
    return plan_jobs({key: found for key, found in speeds.items()}, len(cpus))


@dataclass(frozen=True, slots=True)
class DemoOutcome:
    """What became of one demo job: its state, times, first prediction and attempts."""

    name: str
    state: str
    submitted_at: float
    deadline_at: float
    finished_at: float | None
    # (when, predicted finish) from the first prediction after the job had done 10% of its work
    prediction_10pct: tuple[float, float] | None
    attempts: int

    @property
    def met(self) -> bool:
        return self.finished_at is not None and self.finished_at <= self.deadline_at


@dataclass(frozen=True, slots=True)
class RunReport:
    policy: str
    wall_s: float
    jobs: tuple[DemoOutcome, ...]
    cpu_seconds_used: float  # CPU time the runner processes consumed
    core_seconds_allocated: float  # cores held by jobs, integrated over time
    # Where the core-seconds went, by phase; the runners' CPU time they did not report (after
    # their last event) is counted as ending.
    breakdown: Breakdown | None = None

    @property
    def met(self) -> int:
        return sum(job.met for job in self.jobs)

    @property
    def utilisation(self) -> float | None:
        if self.core_seconds_allocated <= 0:
            return None
        return self.cpu_seconds_used / self.core_seconds_allocated

    @property
    def prediction_errors(self) -> list[float]:
        """|predicted - actual| / actual remaining time, for the 10%-done predictions."""
        errors = []
        for job in self.jobs:
            if job.prediction_10pct is not None and job.finished_at is not None:
                made, finish = job.prediction_10pct
                if job.finished_at > made:
                    errors.append(abs(finish - job.finished_at) / (job.finished_at - made))
        return errors


def run_workload(
    policy: str,
    jobs: Sequence[DemoJob],
    *,
    cpus: tuple[int, ...] | None = None,
    home: Path | None = None,
    timeout_s: float = 900.0,
    on_tick: Callable[[LocalService, float], None] | None = None,
) -> RunReport:
    """Run ``jobs`` under ``policy`` on a fresh service until all finish; measure the run."""
    with tempfile.TemporaryDirectory(prefix="qosched-demo-") as scratch:
        root = home or Path(scratch)
        service = LocalService.open(root / policy, cpus=cpus, policy=policy, tick_s=2.0)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.time()
        pending = sorted(jobs, key=lambda j: j.offset_s)
        predicted: dict[str, tuple[float, float]] = {}
        try:
            while pending or not service.idle():
                now = time.time()
                while pending and now - start >= pending[0].offset_s:
                    service.submit_spec(pending.pop(0).spec)
                service.step()
                for job in service.jobs():
                    if (
                        job.id not in predicted
                        and job.predicted_finish_at is not None
                        and job.iterations is not None
                        and job.iterations_done >= 0.1 * job.iterations
                    ):
                        predicted[job.id] = (now, job.predicted_finish_at)
                if on_tick is not None:
                    on_tick(service, now - start)
                if now - start > timeout_s:
                    raise TimeoutError(f"{policy}: jobs still running after {timeout_s:.0f} s")
                # Woken early by a runner's exit, so its cores go on at once.
                next_arrival = pending[0].offset_s - (time.time() - start) if pending else 0.5
                service.wait_for_exit(max(0.0, min(0.5, next_arrival)))
        finally:
            service.stop_runners()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall = time.time() - start
        outcomes = []
        for record in service.store.list():
            outcomes.append(
                DemoOutcome(
                    record.name,
                    record.state.value,
                    record.submitted_at,
                    record.deadline_at,
                    record.finished_at if record.state is Lifecycle.SUCCEEDED else None,
                    predicted.get(record.id),
                    record.attempts,
                )
            )
        end = time.time()
        allocated = _core_seconds(service, end)
        breakdown = _breakdown(service, end)
        service.close()
    used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    breakdown.used[ENDING] += max(0.0, used - breakdown.used_total)
    return RunReport(policy, wall, tuple(outcomes), used, allocated, breakdown)


def _breakdown(service: LocalService, end: float) -> Breakdown:
    """Every job's breakdown (``cpu_use``), summed."""
    total = Breakdown()
    for record in service.store.list():
        progress = service.home / "jobs" / record.id / PROGRESS_FILE
        total.add(job_breakdown(service.store.events(record.id), read_progress(progress), end))
    return total


def _core_seconds(service: LocalService, end: float) -> float:
    """Cores held, integrated over time, from the store's audit log."""
    total = 0.0
    for record in service.store.list():
        held, since = 0, None
        for event in service.store.events(record.id):
            cores = None
            if event.kind == "state":
                cores = (
                    len(event.detail.get("cpus", []))
                    if event.detail["to"] == Lifecycle.RUNNING
                    else 0
                )
            elif event.kind == "allocation":
                cores = len(event.detail["to"])
            if cores is None:
                continue
            if since is not None:
                total += held * (event.t - since)
            held, since = cores, event.t
        if since is not None and held:
            total += held * (end - since)
    return total


def median_or_none(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None
