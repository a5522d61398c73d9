"""The mechanics of a job's runner process, apart from the service's memory and store: what a
runner is started with (``runner_job``, ``runner_environment``), ending what a job left behind
(``end_leftovers``, ``kill_and_wait``), its memory use (``resident_bytes``), and how a job goes
on once its runner is gone without a result (``ending``).

The service launches, adopts, stops and reaps runners with these
(``LocalService._launch``, ``_take_over``, ``_stop``, ``_escalate``, ``_reap_one``)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from qosched.backends.local.cgroups import JobGroup
from qosched.backends.local.faults import FAULT_ENV
from qosched.backends.local.livejob import LiveJob
from qosched.backends.local.process import RunnerProcess, tree_files
from qosched.backends.local.progress import ProgressEvent, RunnerEvent
from qosched.backends.local.store import Lifecycle
from qosched.trainingjob.jobspec import TrainingJobSpec
from qosched.trainingjob.protocol import (
    ENV_CUDA_DEVICES,
    ENV_GPUS,
    EXIT_DONE,
    EXIT_INPUT_ERROR,
    EXIT_PREEMPTED,
    RunnerJob,
)

#: A job whose runner failed this many times is marked failed with the last error.
MAX_ATTEMPTS = 3
#: Checkpoint a running job this often (iterations); also bounds the work a crash loses.
CHECKPOINT_EVERY = 50
#: After SIGKILL, how long the service waits for a job's processes to go.
KILL_WAIT_S = 10.0


def runner_job(job_id: str, spec: TrainingJobSpec) -> RunnerJob:
    """What the runner of the job is told to run (its ``job.json``)."""
    return RunnerJob(
        job_id=job_id,
        workload=spec.workload,
        command=spec.command,
        iterations=spec.iterations,
        seed=spec.seed,
        checkpoint_every=CHECKPOINT_EVERY,
        working_dir=spec.working_dir,
        env=tuple(spec.env.items()),
        launcher=spec.launcher,
    )


def runner_environment(environ: Mapping[str, str], gpus: tuple[int, ...]) -> dict[str, str]:
    """A runner's environment: the service's (less its fault injection, which is the
    service's alone), unbuffered, and seeing only the job's GPUs (none for a CPU job), as its
    command does."""
    env = dict(environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.pop(FAULT_ENV, None)
    visible = ",".join(str(gpu) for gpu in gpus)
    env.update({ENV_CUDA_DEVICES: visible, ENV_GPUS: visible, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    return env


def end_leftovers(group: JobGroup | None) -> None:
    """Kill what is left in a job's group without a runner (one killed while the service
    was down leaves its orphans there), wait for it to go, and remove the group."""
    if group is None:
        return
    if group.members():
        group.kill()
        deadline = time.monotonic() + KILL_WAIT_S
        while group.members() and time.monotonic() < deadline:
            time.sleep(0.05)
    group.remove()


def kill_and_wait(runner: RunnerProcess) -> None:
    """SIGKILL the runner's process group and wait (up to ``KILL_WAIT_S``) for it to go."""
    runner.kill_group(signal.SIGKILL)
    deadline = time.monotonic() + KILL_WAIT_S
    while not runner.gone() and time.monotonic() < deadline:
        time.sleep(0.05)


def resident_bytes(pid: int) -> int:
    """Resident memory of ``pid`` and all its descendants (0 for a process that is gone)."""
    return sum(
        int(line.split()[1]) * 1024
        for status in tree_files(pid, "status")
        for line in status.splitlines()
        if line.startswith("VmRSS:")
    )


@dataclass(frozen=True, slots=True)
class Ending:
    """How a job goes on once its runner is gone without a result: to the final ``state``
    (with ``error``), or, with ``state`` None, pre-empted (it may run again) because ``why``."""

    state: Lifecycle | None
    error: str | None = None
    why: str = ""


def ending(
    live: LiveJob,
    code: int | None,
    grace_s: float,
    attempts: Callable[[], int],
) -> Ending:
    """The ``Ending`` of a job whose runner exited with ``code`` (None: a re-adopted runner,
    whose last event says how it ended) and wrote no result: what was asked of it first
    (cancel, decline, its memory limit), then how the runner stopped. A failed runner is
    retried (``attempts()``: how many it had) up to ``MAX_ATTEMPTS``, unless its input was
    wrong."""
    if live.cancelling:
        return Ending(Lifecycle.CANCELLED)
    if live.declining is not None:
        return Ending(Lifecycle.DECLINED, live.declining)
    if live.over_memory is not None:  # killed for it: a retry would do the same
        return Ending(Lifecycle.FAILED, live.over_memory)
    last = live.last_event
    if code is None:
        code = exit_from_event(last)
    if live.killed:
        return Ending(None, why=f"did not stop within {grace_s:g} s of SIGTERM; killed")
    stopped = last is not None and last.event is RunnerEvent.PREEMPTED
    if (live.stopping and code == EXIT_PREEMPTED) or stopped:
        return Ending(None, why=live.stop_why or "pre-empted by the scheduler")
    message = (last.message if last is not None and last.message else None) or (
        f"runner exited with code {code}"
    )
    tried = attempts()
    if code == EXIT_INPUT_ERROR or tried >= MAX_ATTEMPTS:
        return Ending(Lifecycle.FAILED, message)
    return Ending(None, why=f"attempt {tried} failed: {message}")


def exit_from_event(event: ProgressEvent | None) -> int:
    """The exit code a runner's last event stands for (a re-adopted runner's is not known)."""
    if event is None:
        return 1
    if event.event is RunnerEvent.DONE:
        return EXIT_DONE
    if event.event is RunnerEvent.PREEMPTED:
        return EXIT_PREEMPTED
    return 1
