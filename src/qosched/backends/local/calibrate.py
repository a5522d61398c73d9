"""How fast the built-in workloads train on this machine, measured by the real runner.

A demo with fixed deadlines holds only on the machine it was tuned on: a little slower or busier
and ``qos`` misses by a second. So the demo first measures: each workload runs in the real
runner process (``python -m qosched.backends.local.runner``) on the core counts the demo will
use, for a few seconds, and its progress lines give its speed; the time from launch to the first
progress line is what a start costs (importing torch, building the model). Measuring through the
runner, not in this process, counts exactly what a job pays: its process, its pinning, its
thread settings and the contention of a neighbour running at the same time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from qosched.backends.local.process import launch_runner
from qosched.backends.local.progress import RunnerEvent, read_progress
from qosched.trainingjob.protocol import (
    PROGRESS_FILE,
    Allocation,
    RunnerJob,
    write_job_folder,
)

#: Iterations a measurement asks for: more than any measurement can do in its time.
_ENDLESS = 10**9
#: Progress samples after the first one that a speed needs, at least (the runner reports
#: every 0.5 s).
_MIN_SAMPLES = 4


@dataclass(frozen=True, slots=True)
class SpeedMeasurement:
    """One workload on ``cores`` cores: iterations per second, and seconds from launch to its
    first progress line."""

    workload: str
    cores: tuple[int, ...]
    rate: float
    startup_s: float


@dataclass(frozen=True, slots=True)
class _Running:
    workload: str
    cores: tuple[int, ...]
    job_dir: Path
    process: subprocess.Popen
    launched: float


def measure(
    runs: Sequence[tuple[str, tuple[int, ...]]],
    *,
    seconds: float = 4.0,
    timeout_s: float = 120.0,
    python: str = sys.executable,
) -> list[SpeedMeasurement]:
    """Run each ``(workload, cores)`` at the same time (their cores must not overlap: they
    share the machine as jobs side by side do) for ``seconds`` after its first progress line,
    and measure it. RuntimeError if a runner fails or reports too little in ``timeout_s``."""
    taken = [core for _, cores in runs for core in cores]
    if len(taken) != len(set(taken)):
        raise ValueError(f"measurements running together must not share cores: {runs}")
    with tempfile.TemporaryDirectory(prefix="qosched-calibrate-") as scratch:
        running = [
            _launch(workload, cores, Path(scratch) / f"{index}-{workload}", python)
            for index, (workload, cores) in enumerate(runs)
        ]
        try:
            return [_wait_for_speed(run, seconds, timeout_s) for run in running]
        finally:
            for run in running:
                _stop(run.process)


def _launch(workload: str, cores: tuple[int, ...], job_dir: Path, python: str) -> _Running:
    job = RunnerJob(
        job_id=f"calibrate-{workload}",
        workload=workload,
        command=None,
        iterations=_ENDLESS,
        seed=0,
        checkpoint_every=_ENDLESS,
    )
    write_job_folder(job_dir, job, Allocation(cores, 1))
    launched = time.time()
    process = launch_runner(
        job_dir,
        python=python,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        own_session=True,
    )
    return _Running(workload, cores, job_dir, process, launched)


def _wait_for_speed(run: _Running, seconds: float, timeout_s: float) -> SpeedMeasurement:
    deadline = run.launched + timeout_s
    while True:
        events = [
            event
            for event in read_progress(run.job_dir / PROGRESS_FILE)
            if event.event is RunnerEvent.PROGRESS and event.iteration is not None
        ]
        if len(events) > _MIN_SAMPLES and events[-1].t - events[0].t >= seconds:
            first, last = events[0], events[-1]
            rate = (last.iteration - first.iteration) / (last.t - first.t)
            return SpeedMeasurement(run.workload, run.cores, rate, first.t - run.launched)
        if run.process.poll() is not None:
            error = run.process.stderr.read().decode(errors="replace")[-2000:]
            raise RuntimeError(
                f"measuring {run.workload} on cores {list(run.cores)}: the runner exited with "
                f"code {run.process.returncode}\n{error}"
            )
        if time.time() > deadline:
            raise RuntimeError(
                f"measuring {run.workload} on cores {list(run.cores)}: too little progress in "
                f"{timeout_s:.0f} s"
            )
        time.sleep(0.2)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    if process.stderr is not None:
        process.stderr.close()


def measure_side_by_side_and_alone(
    workloads: Sequence[str],
    cpus: tuple[int, ...],
    lane_cores: int,
    *,
    seconds: float = 4.0,
    on_progress: Callable[[str], None] | None = None,
) -> dict[tuple[str, int], SpeedMeasurement]:
    """Each workload on ``lane_cores`` cores with the others beside it (all at once, on
    disjoint cores), then each alone on all of ``cpus``: keyed ``(workload, core count)``."""
    if lane_cores * len(workloads) > len(cpus):
        raise ValueError(
            f"{len(workloads)} workloads on {lane_cores} cores each need more than "
            f"{len(cpus)} cores"
        )
    note = on_progress or (lambda _: None)
    results: dict[tuple[str, int], SpeedMeasurement] = {}
    lanes = [
        (workload, cpus[index * lane_cores : (index + 1) * lane_cores])
        for index, workload in enumerate(workloads)
    ]
    note(f"measuring {', '.join(workloads)} side by side on {lane_cores} core(s) each")
    for found in measure(lanes, seconds=seconds):
        results[(found.workload, lane_cores)] = found
    for workload in workloads:
        if len(cpus) == lane_cores:
            continue
        note(f"measuring {workload} alone on {len(cpus)} cores")
        (found,) = measure([(workload, cpus)], seconds=seconds)
        results[(workload, len(cpus))] = found
    return results
