"""Job directories and runner processes for the local-runner tests (imported by name: pytest puts
this folder on sys.path)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from qosched.backends.local.process import launch_runner
from qosched.backends.local.progress import ProgressEvent, RunnerEvent, read_progress
from qosched.backends.local.service import RUNNER_LOG
from qosched.trainingjob.protocol import (
    ALLOCATION_FILE,
    PROGRESS_FILE,
    Allocation,
    RunnerJob,
    write_allocation,
    write_job_folder,
)

#: The start of a command's script that forks a process which leaves the command's process group
#: (``setsid``), ignores SIGTERM, writes its pid to ``escaped.pid`` in the job folder and sleeps.
ESCAPE = """
import json, os, signal, time
if os.fork() == 0:
    os.setsid()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with open(os.environ["QOSCHED_JOB_DIR"] + "/escaped.pid", "w") as out:
        out.write(str(os.getpid()))
    time.sleep(120)
    os._exit(0)
"""

WAIT_S = 60.0  # generous: the machine may be busy with other test runs


def make_job_dir(
    root: Path,
    *,
    job_id: str = "job-1",
    workload: str | None = "cnn",
    command: list[str] | None = None,
    iterations: int = 20,
    seed: int = 0,
    checkpoint_every: int = 10,
    batch_size: int | None = None,
    cpus: tuple[int, ...] | None = (0,),
) -> Path:
    job_dir = root / job_id
    spec = RunnerJob(
        job_id,
        workload,
        tuple(command) if command is not None else None,
        iterations,
        seed,
        checkpoint_every,
        batch_size,
    )
    write_job_folder(job_dir, spec, Allocation(cpus, 1) if cpus is not None else None)
    return job_dir


def set_allocation(job_dir: Path, cpus: tuple[int, ...], version: int) -> None:
    write_allocation(job_dir / ALLOCATION_FILE, Allocation(cpus, version))


def events(job_dir: Path) -> list[ProgressEvent]:
    return read_progress(job_dir / PROGRESS_FILE)


def log_of(job_dir: Path) -> str:
    """What the runner printed, for assertion messages."""
    path = job_dir / RUNNER_LOG
    return path.read_text() if path.exists() else ""


class Runners:
    """Starts runner processes and kills any still running when the test ends."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[bytes]] = []

    def start(self, job_dir: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        with open(job_dir / RUNNER_LOG, "ab") as log:
            process = launch_runner(job_dir, stdout=log, env={**os.environ, **(env or {})})
        self.started.append(process)
        return process

    def run(self, job_dir: Path, env: dict[str, str] | None = None) -> int:
        process = self.start(job_dir, env)
        return process.wait(timeout=WAIT_S)

    def stop_all(self) -> None:
        for process in self.started:
            if process.poll() is None:
                process.kill()
                process.wait()


def wait_for(
    job_dir: Path,
    process: subprocess.Popen[bytes],
    matches: Callable[[ProgressEvent], bool],
    what: str,
) -> ProgressEvent:
    """The first progress event that ``matches``; fails if the runner exits or time runs out."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        for event in events(job_dir):
            if matches(event):
                return event
        if process.poll() is not None:
            break
        time.sleep(0.05)
    got = [(e.event.value, e.iteration) for e in events(job_dir)]
    pytest.fail(
        f"no {what} event (runner exit code {process.poll()}); events: {got}\n{log_of(job_dir)}"
    )


def terminate(process: subprocess.Popen[bytes]) -> int:
    process.send_signal(signal.SIGTERM)
    return process.wait(timeout=WAIT_S)


def is_event(kind: RunnerEvent, **fields: object) -> Callable[[ProgressEvent], bool]:
    return lambda event: (
        event.event is kind and all(getattr(event, name) == value for name, value in fields.items())
    )
