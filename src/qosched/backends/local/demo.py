"""The bundled real workload: a few training jobs with deadlines, run end to end on this machine.

Each job is a real PyTorch training process. Users of a request-based scheduler over-provision
(each asks for every core), so ``fifo`` runs them one after another; ``qos`` is told only the
deadlines and sizes each job itself. The same jobs, arriving at the same offsets, run under both.
"""

from __future__ import annotations

import resource
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from qosched.backends.local.jobspec import Deadline, Resources, TrainingJobSpec
from qosched.backends.local.service import LocalService
from qosched.backends.local.store import JobState


@dataclass(frozen=True, slots=True)
class DemoJob:
    """A job of the bundled workload, submitted ``offset_s`` after the run starts."""

    offset_s: float
    spec: TrainingJobSpec


def bundled_jobs(cores: int, scale: float = 1.0) -> list[DemoJob]:
    """Four jobs whose deadlines a scheduler meets only by running them side by side on one core
    each; ``scale`` multiplies the work and the deadlines (tests use a small one)."""

    def job(name: str, workload: str, iterations: int, deadline_s: float, offset: float):
        return DemoJob(
            offset * scale,
            TrainingJobSpec(
                name=name,
                iterations=max(1, round(iterations * scale)),
                deadline=Deadline(relative_s=max(1, round(deadline_s * scale)), absolute_at=None),
                workload=workload,
                resources=Resources(min_cpus=1, max_cpus=cores),
                requested_cpus=cores,  # what an over-provisioning user asks for
            ),
        )

    return [
        job("cnn-a", "cnn", 500, 45, 0),
        job("transformer-a", "transformer", 700, 65, 5),
        job("cnn-b", "cnn", 400, 45, 15),
        job("transformer-b", "transformer", 500, 40, 25),
    ]


@dataclass(frozen=True, slots=True)
class JobOutcome:
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
    jobs: tuple[JobOutcome, ...]
    cpu_seconds_used: float  # CPU time the worker processes consumed
    core_seconds_allocated: float  # cores held by jobs, integrated over time

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
                        job["id"] not in predicted
                        and job["predicted_finish_at"] is not None
                        and job["iterations_done"] >= 0.1 * job["iterations"]
                    ):
                        predicted[job["id"]] = (now, job["predicted_finish_at"])
                if on_tick is not None:
                    on_tick(service, now - start)
                if now - start > timeout_s:
                    raise TimeoutError(f"{policy}: jobs still running after {timeout_s:.0f} s")
                time.sleep(0.5)
        finally:
            service.stop_workers()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall = time.time() - start
        outcomes = []
        for record in service.store.list():
            outcomes.append(
                JobOutcome(
                    record.name,
                    record.state.value,
                    record.submitted_at,
                    record.deadline_at,
                    record.finished_at if record.state is JobState.SUCCEEDED else None,
                    predicted.get(record.id),
                    record.attempts,
                )
            )
        allocated = _core_seconds(service, time.time())
        service.close()
    used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return RunReport(policy, wall, tuple(outcomes), used, allocated)


def _core_seconds(service: LocalService, end: float) -> float:
    """Cores held, integrated over time, from the store's audit log."""
    total = 0.0
    for record in service.store.list():
        held, since = 0, None
        for event in service.store.events(record.id):
            cores = None
            if event.kind == "state":
                cores = len(event.detail.get("cpus", [])) if event.detail["to"] == "running" else 0
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
