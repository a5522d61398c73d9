"""The job runner: one process per job, ``python -m qosched.backends.local.runner JOB_DIR``.

A scheduler prepares ``JOB_DIR``, starts the runner, re-sizes it by rewriting one file and reads
what it reports. Every file name below is a constant of ``qosched.trainingjob.protocol``.

``job.json`` (``JOB_FILE``, written before launch, read once)::

    {"job_id": str, "workload": "cnn" | "transformer" | null, "command": [argv...] | null,
     "iterations": int >= 1, "seed": int in [0, 2**63), "checkpoint_every": int >= 1,
     "batch_size": int >= 1,                      # optional, built-in workloads only
     "working_dir": absolute path,                # optional, command jobs only
     "env": {name: str},                          # optional, command jobs only
     "launcher": "torchrun"}                      # optional, command jobs only

Exactly one of ``workload`` and ``command`` is set. Unknown fields are refused.

``allocation.json`` (``ALLOCATION_FILE``, written by the scheduler at any time, atomically: temp
file + ``os.replace``, e.g. with ``protocol.write_allocation``)::

    {"cpus": [core ids], "version": int >= 0, "gpus": [GPU indices]}   # gpus optional

The runner applies it at start and, between iterations, looks at the file's ``stat`` at most every
``POLL_INTERVAL_S``; a new ``(cpus, version)`` is applied in place, without a restart: every
thread of the runner is pinned to ``cpus`` and PyTorch's intra-op pool is set to ``len(cpus)``
threads; a ``resize`` event confirms it. A command job's child process (and its descendants) is
pinned instead; its thread count is its own. An invalid allocation (an unknown core, bad JSON)
gives a non-fatal ``error`` event and the old allocation stays. With no ``allocation.json`` at
start, the runner uses the affinity it inherited. ``gpus`` is read once, at start: a job's GPUs
never change while its runner runs (the scheduler re-sizes a GPU job by restarting it).

``progress.jsonl`` (``PROGRESS_FILE``, appended by the runner and by nothing else, one JSON
object a line, flushed each line; a restarted runner first cuts a last line its killed
predecessor left without its newline)::

    {"t": unix time, "event": str, "iteration": done so far | null, "cpus": cores applied,
     "loss": latest loss | null, ...event fields}

Events (``progress.RunnerEvent``): ``start`` (``resumed_from``, ``cpu_ids``, ``threads``,
``version``), ``progress`` (at most every ``REPORT_INTERVAL_S``), ``resize`` (``cpu_ids``,
``threads``, ``version``), ``checkpoint`` (a built-in workload's: ``save_s`` and ``save_cpu_s``,
the wall and CPU seconds the save took), ``preempted``, ``done``, ``error`` (``message``;
``fatal`` says whether the runner exits because of it), ``warning`` (``message``); a command
job's ``preempted``, ``done`` and fatal ``error`` carry the child's ``exit_code``. A loss that
is not finite is written as null. A built-in workload's every event also carries ``cpu_s``, the
runner's CPU seconds since it started (all threads, its start-up included), and ``wait_s``, the
seconds its threads have waited for a core, ready to run (absent where the kernel does not say).
``progress.read_progress`` parses the file into typed events,
with every number bounded (counts whole in [0, 2**53), times within year 9999 UTC); the
scheduler fails a job whose file holds a line that is not such an event, naming the line
(``progress.jsonl:N: ...``): the file is the runner's own report, and a line it did not write
means the job can no longer be followed.

``checkpoint.pt`` (``CHECKPOINT_FILE``): written every ``checkpoint_every`` iterations, at
completion and on SIGTERM, atomically (temp file, fsync, ``os.replace``), so a kill at any moment
leaves the old or the new one. A runner that finds one resumes from it and follows the loss
trajectory of an uninterrupted run (same seed and thread count).

``result.json`` (``RESULT_FILE``, at completion): ``protocol.JobResult``.

Exit codes: ``EXIT_DONE`` 0 (completed), ``EXIT_FAILED`` 1 (unexpected exception; ``error``
event with the traceback's last line), ``EXIT_INPUT_ERROR`` 2 (bad job.json, checkpoint or
environment; retrying will not help), ``EXIT_PREEMPTED`` 3 (SIGTERM or SIGINT before completion:
the current iteration finishes, a checkpoint is written, restart to resume).

Command jobs run ``command`` as a child process, pinned to the allocation from its first
instruction, with ``QOSCHED_PROGRESS_FILE`` (``JOB_DIR/command_progress.jsonl``: append
``{"iteration": n}`` or ``{"iteration": n, "loss": x}`` lines, flushed, ``n`` whole in
[0, 2**53); the runner relays them. A line it cannot use (not JSON, a stray ``print``, a number
out of bounds) is skipped with a line in the job's log and, for the first ``MAX_WARNINGS``
of a run, a ``warning`` event, and the job goes on: a training script should not die of one
bad line),
``QOSCHED_CPUS`` (comma-separated core ids), ``QOSCHED_GPUS`` and ``CUDA_VISIBLE_DEVICES`` (the
job's GPU indices, comma-separated; empty for a CPU job, which so sees no GPU at all), with
``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (CUDA then numbers GPUs as NVML and the scheduler do),
``OMP_NUM_THREADS``, ``QOSCHED_ITERATIONS``, ``QOSCHED_JOB_DIR`` and ``QOSCHED_ALLOCATION_FILE``
(to follow later re-sizes itself). The command starts in ``working_dir`` (default: the
runner's own) with the runner's environment plus ``env`` (the spec's), under the variables
above, which qosched sets last; ``OMP_NUM_THREADS`` is qosched's unless ``env`` sets it.

With ``launcher: torchrun`` the child is ``python -m torch.distributed.run --standalone
--nproc-per-node N --log-dir JOB_DIR/torchrun COMMAND...`` (the runner's own interpreter; torchrun's
per-run folders in the job's folder, not the system's temporary one; with ``--no-python`` when
``COMMAND[0]`` does not end in ``.py``, so each rank runs that program itself, e.g. a Python of
the user's choice), N the job's GPU count, or its core count for a CPU job, and
``OMP_NUM_THREADS`` is the cores divided among the N processes. N is fixed for the child's
life; the scheduler changes it by stopping the job (SIGTERM: torchrun passes it to every rank,
the script checkpoints) and starting a new runner. SIGTERM to
the runner is forwarded to the child; the child gets SIGTERM too if the runner dies. The
child's exit code becomes the runner's (128 + N when killed by signal N), except after a
forwarded SIGTERM: then the job is ``EXIT_PREEMPTED`` unless the child exits 0 having reported
``iterations`` iterations.

The runner sets ``OMP_WAIT_POLICY=PASSIVE`` unless it is already set (see ``run_job``). Given
``QOSCHED_RUNNER_CGROUP`` (the job's cgroup, set by the service), it joins that group before
anything else, so every process of the job is born in it, and leaves the variable out of the
job's environment; a group it cannot join is a ``warning`` event, and the job runs on.

Test hook: ``QOSCHED_RUNNER_CRASH_AT=N`` makes a built-in workload raise instead of completing
its N-th iteration (1-based, counted from the start of the job, not of this process), so a
scheduler's retry logic can be exercised; the checkpoint at N is never written, so the hook
fires again on every retry that still has it set.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import math
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from qosched.backends.local.affinity import runqueue_wait_s, set_process_affinity
from qosched.backends.local.cgroups import join_from_environment
from qosched.backends.local.files import read_regular
from qosched.backends.local.lifeline import LifeLine
from qosched.backends.local.progress import ProgressLog, RunnerEvent
from qosched.core.atomic import atomic_write, atomic_write_json, remove_stale_temps
from qosched.core.bounds import COUNT_LIMIT, check_count
from qosched.core.errors import InputError
from qosched.core.validate import parse_int
from qosched.trainingjob.protocol import (
    ALLOCATION_FILE,
    CHECKPOINT_FILE,
    COMMAND_PROGRESS_FILE,
    ENV_ALLOCATION_FILE,
    ENV_CPUS,
    ENV_CRASH_AT,
    ENV_CUDA_DEVICES,
    ENV_GPUS,
    ENV_ITERATIONS,
    ENV_JOB_DIR,
    ENV_PROGRESS_FILE,
    EXIT_DONE,
    EXIT_FAILED,
    EXIT_INPUT_ERROR,
    EXIT_PREEMPTED,
    JOB_FILE,
    PROGRESS_FILE,
    RESULT_FILE,
    Allocation,
    JobResult,
    RunnerJob,
    finite_or_none,
    load_runner_job,
    read_allocation,
    torchrun_argv,
)

__all__ = [
    "ALLOCATION_FILE",
    "CHECKPOINT_FILE",
    "COMMAND_PROGRESS_FILE",
    "ENV_CRASH_AT",
    "EXIT_DONE",
    "EXIT_FAILED",
    "EXIT_INPUT_ERROR",
    "EXIT_PREEMPTED",
    "JOB_FILE",
    "PROGRESS_FILE",
    "RESULT_FILE",
    "main",
    "run_job",
]

POLL_INTERVAL_S = 0.2  # allocation.json is looked at no more often than this
REPORT_INTERVAL_S = 0.5  # progress lines are written no more often than this
COMMAND_WAIT_S = 0.05  # how often a command job's runner wakes to relay, poll and forward
#: The most warnings of one kind (an unusable line of the command's progress file, an unusable
#: ``allocation.json``) a run reports as events, before one saying there were more: each is an
#: entry of the job's audit log, kept in the store and sent to the web page with the job's
#: detail, and a command writing junk to those files must not add them without bound.
MAX_WARNINGS = 20
COMMAND_TERM_GRACE_S = 5.0  # how long a command its runner fails gets to exit after SIGTERM
TORCHRUN_LOG_DIR = "torchrun"  # torchrun's per-run folders, in the job's folder
PR_SET_CHILD_SUBREAPER = 36  # prctl option (linux/prctl.h)
CHECKPOINT_FORMAT = 1


class StopRequest:
    """Remembers SIGTERM/SIGINT; the runner acts on it at the next iteration boundary."""

    def __init__(self) -> None:
        self.signum: int | None = None

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def install(self) -> StopRequest:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._handle)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.signum = signum

    def describe(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else "nothing"


class WarningBudget:
    """Counts the warnings of one kind in a run, to report at most ``MAX_WARNINGS``."""

    def __init__(self, more: str) -> None:
        self.more = more  # said once, in place of the first warning over the budget
        self.count = 0

    def take(self, message: str) -> str | None:
        """What to report for one more warning: ``message``, ``more`` or nothing."""
        self.count += 1
        if self.count <= MAX_WARNINGS:
            return message
        return self.more if self.count == MAX_WARNINGS + 1 else None


class AllocationWatcher:
    """Applies ``allocation.json`` when it changes; ``current`` is the allocation in force."""

    def __init__(self, path: Path, log: ProgressLog, apply: Callable[[Allocation], None]) -> None:
        self.path = path
        self.log = log
        self.apply = apply
        self.current: Allocation | None = None
        self._seen: tuple[int, int, int] | None = None
        self._next_poll = 0.0
        self._errors = WarningBudget(
            f"{path.name} could not be applied more than {MAX_WARNINGS} times; "
            "no more such errors are reported"
        )

    def poll(self, *, iteration: int | None, loss: float | None, force: bool = False) -> bool:
        """True when a new allocation was applied by this call."""
        now = time.monotonic()
        if not force and now < self._next_poll:
            return False
        self._next_poll = now + POLL_INTERVAL_S
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            return False
        # os.replace gives a new inode, so this changes even where mtime is coarse.
        key = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        if key == self._seen:
            return False
        self._seen = key
        try:
            allocation = read_allocation(self.path)
            if allocation == self.current:
                return False
            self.apply(allocation)
        except (InputError, OSError) as exc:
            message = str(exc) if isinstance(exc, InputError) else f"cannot apply {exc}"
            kept = list(self.current.cpus) if self.current else "the inherited affinity"
            reported = self._errors.take(f"{message}; keeping {kept}")
            if reported is not None:
                self.log.write(
                    RunnerEvent.ERROR, iteration=iteration, loss=loss, message=reported, fatal=False
                )
            return False
        self.current = allocation
        self.log.cpus = len(allocation.cpus)
        return True


def _initial_cpus(watcher: AllocationWatcher) -> tuple[int, ...]:
    watcher.poll(iteration=None, loss=None, force=True)
    if watcher.current is not None:
        return watcher.current.cpus
    inherited = tuple(sorted(os.sched_getaffinity(0)))
    watcher.log.cpus = len(inherited)
    return inherited


class _Between:
    """What both run loops do between two steps of a job, in one place: follow a changed
    ``allocation.json`` (confirmed by a ``resize`` event), write a ``progress`` event at most
    every ``REPORT_INTERVAL_S``, and end with a ``preempted`` event once a stop was asked for.

    ``fields`` are added to every ``resize`` event (a built-in workload's ``threads``)."""

    def __init__(
        self,
        watcher: AllocationWatcher,
        log: ProgressLog,
        stop: StopRequest,
        fields: Callable[[], dict[str, Any]] = dict,
    ) -> None:
        self.watcher = watcher
        self.log = log
        self.stop = stop
        self.fields = fields
        self.last_report = time.monotonic()

    def follow_allocation(self, *, iteration: int | None, loss: float | None) -> None:
        """Apply a changed allocation, if any, and confirm it with a ``resize`` event."""
        if self.watcher.poll(iteration=iteration, loss=loss):
            assert self.watcher.current is not None
            self.log.write(
                RunnerEvent.RESIZE,
                iteration=iteration,
                loss=loss,
                cpu_ids=list(self.watcher.current.cpus),
                **self.fields(),
                version=self.watcher.current.version,
            )

    def report_due(self) -> bool:
        return time.monotonic() - self.last_report >= REPORT_INTERVAL_S

    def reported(self) -> None:
        """A ``progress`` or ``checkpoint`` event was just written: the next is due later."""
        self.last_report = time.monotonic()

    def report(self, *, iteration: int | None, loss: float | None) -> None:
        self.log.write(RunnerEvent.PROGRESS, iteration=iteration, loss=loss)
        self.reported()

    def preempted(self, *, iteration: int | None, loss: float | None, **fields: Any) -> int:
        """The job stops before completing, on the signal ``stop`` saw: ``EXIT_PREEMPTED``."""
        self.log.write(
            RunnerEvent.PREEMPTED,
            iteration=iteration,
            loss=loss,
            message=f"stopped by {self.stop.describe()}",
            **fields,
        )
        return EXIT_PREEMPTED


def _crash_hook() -> int | None:
    text = os.environ.get(ENV_CRASH_AT)
    if text is None or not text.strip():
        return None
    return parse_int(text, field=ENV_CRASH_AT, source="environment", minimum=1)


def _save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    import torch

    atomic_write(path, lambda handle: torch.save(payload, handle))


def _load_checkpoint(path: Path, spec: RunnerJob) -> dict[str, Any]:
    import torch

    try:
        # weights_only: a checkpoint is data; unpickling arbitrary objects could run code.
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise InputError(f"cannot load checkpoint: {exc}", source=path) from exc
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise InputError(f"not a format-{CHECKPOINT_FORMAT} runner checkpoint", source=path)
    if payload.get("job_id") != spec.job_id:
        raise InputError(
            f"checkpoint belongs to job {payload.get('job_id')!r}, not {spec.job_id!r}",
            source=path,
            field="job_id",
        )
    return payload


def _run_workload(spec: RunnerJob, job_dir: Path, log: ProgressLog, stop: StopRequest) -> int:
    # Every event says what the runner has cost so far (its start-up included): the CPU time
    # of all its threads, which is all the work a built-in workload does.
    log.cpu_clock = time.process_time
    # And what it could not do: time its threads waited for a core other work held.
    log.wait_clock = lambda: runqueue_wait_s(os.getpid())
    # PyTorch is imported only here: it takes seconds, and a command job never needs it.
    import torch

    from qosched.workloads import get_workload

    assert spec.workload is not None
    crash_at = _crash_hook()
    workload = get_workload(spec.workload)

    def apply(allocation: Allocation) -> None:
        set_process_affinity(os.getpid(), allocation.cpus)
        torch.set_num_threads(len(allocation.cpus))

    watcher = AllocationWatcher(job_dir / ALLOCATION_FILE, log, apply)
    cpus = _initial_cpus(watcher)
    if watcher.current is None:
        torch.set_num_threads(len(cpus))

    state = workload.build(spec.seed, spec.batch_size)
    checkpoint = job_dir / CHECKPOINT_FILE
    remove_stale_temps(checkpoint)
    loss: float | None = None
    checkpointed_at: int | None = None
    if checkpoint.exists():
        payload = _load_checkpoint(checkpoint, spec)
        try:
            state.load_state_dict(payload["training"])
        except InputError as exc:
            raise InputError(exc.reason, source=checkpoint, field=exc.field) from None
        loss = payload.get("loss")
        checkpointed_at = state.iteration
    resumed_from = state.iteration
    log.note(state.iteration, loss)
    log.write(
        RunnerEvent.START,
        iteration=state.iteration,
        loss=loss,
        resumed_from=resumed_from,
        cpu_ids=list(cpus),
        threads=torch.get_num_threads(),
        version=watcher.current.version if watcher.current else None,
    )

    def save() -> None:
        nonlocal checkpointed_at
        if checkpointed_at == state.iteration:
            return
        payload = {
            "format": CHECKPOINT_FORMAT,
            "job_id": spec.job_id,
            "loss": loss,
            "training": state.state_dict(),
        }
        began, began_cpu = time.perf_counter(), time.process_time()
        _save_checkpoint(checkpoint, payload)
        checkpointed_at = state.iteration
        log.write(
            RunnerEvent.CHECKPOINT,
            iteration=state.iteration,
            loss=loss,
            save_s=round(time.perf_counter() - began, 6),
            save_cpu_s=round(time.process_time() - began_cpu, 6),
        )

    between = _Between(watcher, log, stop, lambda: {"threads": torch.get_num_threads()})
    life = LifeLine(spec.iterations, sys.stdout)
    life.start(state.iteration, f"{spec.workload} (seed {spec.seed})")
    started = time.perf_counter()
    step_times: list[float] = []
    while state.iteration < spec.iterations and not stop.requested:
        if crash_at is not None and state.iteration + 1 == crash_at:
            raise RuntimeError(
                f"{ENV_CRASH_AT}={crash_at}: simulated crash in iteration {crash_at}"
            )
        t0 = time.perf_counter()
        loss = workload.step(state)
        step_times.append(time.perf_counter() - t0)
        log.note(state.iteration, loss)
        life.tick(state.iteration, loss, torch.get_num_threads())
        between.follow_allocation(iteration=state.iteration, loss=loss)
        if state.iteration % spec.checkpoint_every == 0:
            save()
            between.reported()
        elif between.report_due():
            between.report(iteration=state.iteration, loss=loss)

    save()
    if state.iteration < spec.iterations:
        return between.preempted(iteration=state.iteration, loss=loss)
    result = JobResult(
        job_id=spec.job_id,
        iterations=state.iteration,
        iterations_run=state.iteration - resumed_from,
        resumed_from=resumed_from,
        wall_s=time.perf_counter() - started,
        final_loss=finite_or_none(loss),
        mean_iteration_s=sum(step_times) / len(step_times) if step_times else None,
    )
    atomic_write_json(job_dir / RESULT_FILE, result.to_json())
    log.write(RunnerEvent.DONE, iteration=state.iteration, loss=loss)
    return EXIT_DONE


#: The longest line of a command's progress file taken in: a report is one small JSON object, and
#: a longer line (a command writing something else there) is skipped without being held whole.
MAX_PROGRESS_LINE = 64 * 1024
#: The most read from a command's progress file per look: a command writing faster than that
#: is caught up with over several looks, never all at once.
PROGRESS_READ_BYTES = 1 << 20


class CommandProgress:
    """Follows the lines a command appends to its progress file; keeps the latest values.

    The file is the command's to write, and it may make anything of it: a symbolic link, a FIFO
    or a folder there is an ``InputError`` from `read` (see ``qosched.backends.local.files``),
    and a line longer than ``MAX_PROGRESS_LINE`` is skipped as it is read, a bounded piece at a
    time.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        path.touch()
        # Lines left by an earlier run of this job were relayed then; start after them.
        self.offset = 0
        self.line = 0
        while got := read_regular(path, self.offset, PROGRESS_READ_BYTES):
            chunk, _ = got
            if not chunk:
                break
            self.offset += len(chunk)
            self.line += chunk.count(b"\n")
        self.skipping = False  # in the middle of a line too long to take
        self.iteration: int | None = None
        self.loss: float | None = None
        self.unreported = False
        self.first: tuple[int, float] | None = None  # (iteration, monotonic time)
        self.last: tuple[int, float] | None = None

    def read(self) -> list[str]:
        """Take in new complete lines; returns a message for each line that was not understood.
        Raises ``InputError`` when the file is no longer a regular file."""
        got = read_regular(self.path, self.offset, PROGRESS_READ_BYTES)
        if got is None:  # removed: nothing new until the command writes it again
            return []
        chunk, size = got
        if size < self.offset:  # the command truncated it: start over
            self.offset, self.line, self.skipping = 0, 0, False
            chunk, _ = read_regular(self.path, 0, PROGRESS_READ_BYTES) or (b"", 0)
        problems = []
        if self.skipping:
            end = chunk.find(b"\n")
            if end < 0:
                self.offset += len(chunk)
                return problems
            self.offset += end + 1
            self.skipping = False
            chunk = chunk[end + 1 :]
        # A line without its newline is still being written; it is read next time, unless it is
        # already too long to be a report.
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self.offset += len(complete)
        for raw in complete.splitlines():
            self.line += 1
            problem = self._take(raw)
            if problem:
                problems.append(f"{self.path.name}:{self.line}: {problem}; line ignored")
        if len(chunk) - len(complete) > MAX_PROGRESS_LINE:
            self.line += 1
            self.offset += len(chunk) - len(complete)
            self.skipping = True
            problems.append(
                f"{self.path.name}:{self.line}: longer than {MAX_PROGRESS_LINE} bytes; line ignored"
            )
        return problems

    def _take(self, raw: bytes) -> str | None:
        if not raw.strip():
            return None
        if len(raw) > MAX_PROGRESS_LINE:
            return f"longer than {MAX_PROGRESS_LINE} bytes"
        try:
            data = json.loads(raw)
        except ValueError:  # bad JSON, bad UTF-8, or an integer of over 4300 digits
            return f"not valid JSON: {raw[:80]!r}"
        if not isinstance(data, dict):
            return "expected a JSON object"
        try:
            iteration = check_count(data.get("iteration"), field="iteration")
        except InputError as exc:
            return str(exc)
        loss = data.get("loss")
        if loss is not None and (not isinstance(loss, int | float) or isinstance(loss, bool)):
            return f"field 'loss': expected a number, got {_short(loss)}"
        if isinstance(loss, int) and not -COUNT_LIMIT < loss < COUNT_LIMIT:
            loss = math.inf  # float() would raise on a huge int; reported as null like any inf
        now = time.monotonic()
        self.iteration = iteration
        self.loss = float(loss) if loss is not None else self.loss
        self.first = self.first or (iteration, now)
        self.last = (iteration, now)
        self.unreported = True
        return None

    def mean_iteration_s(self) -> float | None:
        if self.first is None or self.last is None or self.last[0] <= self.first[0]:
            return None
        return (self.last[1] - self.first[1]) / (self.last[0] - self.first[0])


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def _die_with_parent() -> Callable[[], None]:
    """A ``preexec_fn`` making the kernel send the child SIGTERM if this runner dies, so a
    killed runner never leaves a command running on cores the scheduler has handed on."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return lambda: None
    parent = os.getpid()
    pr_set_pdeathsig = 1

    def setup() -> None:
        prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the runner died before prctl took effect
            os._exit(EXIT_PREEMPTED)

    return setup


def _become_subreaper() -> bool:
    """Make this runner the parent its command's orphans are given to (Linux's child
    subreaper), so a process that leaves the command's process group (``setsid``, a double
    fork) is still the job's, and is stopped with it; False where the kernel cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _orphans() -> list[int]:
    """The processes whose parent is now this runner: once its command has been reaped, what
    the command left behind."""
    me, found = os.getpid(), []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == me:
            found.append(int(entry.name))
    return found


def _reap_exited_orphans(command: int) -> None:
    """Reap the orphans (see ``_become_subreaper``) that have exited while the command runs: a
    command that keeps starting detached helpers would otherwise fill the process table with
    zombies until the job ends. The command itself is left for its ``Popen`` to reap."""
    while True:
        try:
            exited = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if exited is None or exited.si_pid in (0, command):
            return
        with contextlib.suppress(ChildProcessError):
            os.waitpid(exited.si_pid, 0)


def _end_orphans() -> int:
    """Stop what the command left behind (SIGTERM, SIGKILL after ``COMMAND_TERM_GRACE_S``)
    and reap it; returns how many processes there were. A stopped orphan's own children come
    to this runner in turn, so it looks again until none is left."""
    ended: set[int] = set()
    deadline = time.monotonic() + COMMAND_TERM_GRACE_S
    while pids := _orphans():
        ended.update(pids)
        hard = time.monotonic() > deadline
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL if hard else signal.SIGTERM)
        time.sleep(COMMAND_WAIT_S)
        for pid in pids:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
    return len(ended)


def _run_command(spec: RunnerJob, job_dir: Path, log: ProgressLog, stop: StopRequest) -> int:
    """Run the job's command under its allocation, following its progress file, until it exits;
    the runner's exit status (``EXIT_DONE``, ``EXIT_PREEMPTED`` or the command's failure)."""
    assert spec.command is not None
    if os.environ.get(ENV_CRASH_AT):
        log.write(
            RunnerEvent.WARNING,
            iteration=None,
            loss=None,
            message=f"{ENV_CRASH_AT} applies to built-in workloads only; ignored",
        )
    progress = CommandProgress(job_dir / COMMAND_PROGRESS_FILE)
    child: subprocess.Popen[bytes] | None = None
    _become_subreaper()

    def apply(allocation: Allocation) -> None:
        # The runner itself mostly sleeps, but it should not wander onto other jobs' cores.
        set_process_affinity(os.getpid(), allocation.cpus)
        if child is not None and child.poll() is None:
            set_process_affinity(child.pid, allocation.cpus, descendants=True)

    watcher = AllocationWatcher(job_dir / ALLOCATION_FILE, log, apply)
    cpus = _initial_cpus(watcher)
    gpus = watcher.current.gpus if watcher.current is not None else ()
    between = _Between(watcher, log, stop)
    if stop.requested:
        return between.preempted(iteration=None, loss=None)
    processes = (len(gpus) or len(cpus)) if spec.launcher == "torchrun" else 1
    argv = command_argv(spec.command, spec.launcher, processes, job_dir)
    env = command_environment(
        spec, job_dir, cpus, gpus, processes=processes, progress_file=progress.path
    )
    started = time.perf_counter()
    child = _start_command(argv, env, spec, job_dir, cpus)
    log.write(
        RunnerEvent.START,
        iteration=None,
        loss=None,
        cpu_ids=list(cpus),
        gpu_ids=list(gpus),
        processes=processes,
        version=watcher.current.version if watcher.current else None,
    )
    code, forwarded = _follow_command(child, progress, log, between, stop)
    left = _end_orphans()
    if left:
        log.write(
            RunnerEvent.WARNING,
            iteration=progress.iteration,
            loss=progress.loss,
            message=f"{left} process(es) the command left running when it exited were stopped",
        )
    # A command may well exit 0 after saving on SIGTERM; that counts as done only if it had
    # reported every iteration, otherwise the scheduler would never resume it.
    reached_end = progress.iteration is not None and progress.iteration >= spec.iterations
    if code == 0 and (not forwarded or reached_end):
        return _command_done(spec, job_dir, log, progress, time.perf_counter() - started)
    if stop.requested:
        return between.preempted(iteration=progress.iteration, loss=progress.loss, exit_code=code)
    return _command_failed(log, progress, code)


def _start_command(
    argv: list[str], env: dict[str, str], spec: RunnerJob, job_dir: Path, cpus: tuple[int, ...]
) -> subprocess.Popen[bytes]:
    """The command's process, pinned to ``cpus`` and dying with the runner; a command that
    cannot start is an ``InputError`` naming the spec's field."""
    die_with_parent = _die_with_parent()

    def child_setup() -> None:
        # Pinned before exec: the command never runs a single instruction on other cores.
        os.sched_setaffinity(0, cpus)
        die_with_parent()

    try:
        return subprocess.Popen(argv, env=env, cwd=spec.working_dir, preexec_fn=child_setup)
    except OSError as exc:
        where = f" in {spec.working_dir}" if spec.working_dir is not None else ""
        raise InputError(
            f"cannot start {argv[0]!r}{where}: {exc.strerror}",
            source=job_dir / JOB_FILE,
            field="working_dir" if exc.filename == spec.working_dir else "command",
        ) from exc


def _follow_command(
    child: subprocess.Popen[bytes],
    progress: CommandProgress,
    log: ProgressLog,
    between: _Between,
    stop: StopRequest,
) -> tuple[int, bool]:
    """Follow the command until it exits: forward a stop request as SIGTERM (once), take in
    its progress file, follow allocation changes and report progress when due. Its exit code,
    and whether a SIGTERM was forwarded."""
    forwarded = False
    bad_lines = WarningBudget(
        f"more than {MAX_WARNINGS} lines of {progress.path.name} could not be used; only the "
        "job's log names the others"
    )
    between.reported()  # the first progress event is due a report interval after the start
    while True:
        code = child.poll()
        if stop.requested and not forwarded and code is None:
            child.send_signal(signal.SIGTERM)
            forwarded = True
        _take_command_progress(child, progress, log, bad_lines)
        between.follow_allocation(iteration=progress.iteration, loss=progress.loss)
        if progress.unreported and (code is not None or between.report_due()):
            between.report(iteration=progress.iteration, loss=progress.loss)
            progress.unreported = False
        if code is not None:
            return code, forwarded
        _reap_exited_orphans(child.pid)
        time.sleep(COMMAND_WAIT_S)


def _take_command_progress(
    child: subprocess.Popen[bytes],
    progress: CommandProgress,
    log: ProgressLog,
    bad_lines: WarningBudget,
) -> None:
    """Read the command's new progress lines; the lines it could not use are warnings (in the
    job's log, and up to the budget as runner events). An unreadable file ends the command."""
    try:
        problems = progress.read()
    except InputError:
        _end_child(child)  # the job fails; its command must not run on without a runner
        _end_orphans()
        raise
    log.note(progress.iteration, progress.loss)
    for problem in problems:
        # In the job's log too, where its user looks first.
        print(f"qosched runner: warning: {problem}", file=sys.stderr, flush=True)
        reported = bad_lines.take(problem)
        if reported is not None:
            log.write(
                RunnerEvent.WARNING,
                iteration=progress.iteration,
                loss=progress.loss,
                message=reported,
            )


def _command_done(
    spec: RunnerJob, job_dir: Path, log: ProgressLog, progress: CommandProgress, wall_s: float
) -> int:
    """The command exited 0 and counts as done: its result written, ``EXIT_DONE``."""
    if progress.iteration is None or progress.iteration < spec.iterations:
        # Done by the contract (exit 0), said so where its user looks.
        reported = "none" if progress.iteration is None else str(progress.iteration)
        log.write(
            RunnerEvent.WARNING,
            iteration=progress.iteration,
            loss=progress.loss,
            message=f"the command exited 0 having reported {reported} of its "
            f"{spec.iterations} iterations; the job counts as done",
        )
    result = JobResult(
        job_id=spec.job_id,
        iterations=progress.iteration,
        iterations_run=None,
        resumed_from=None,
        wall_s=wall_s,
        final_loss=finite_or_none(progress.loss),
        mean_iteration_s=progress.mean_iteration_s(),
    )
    atomic_write_json(job_dir / RESULT_FILE, result.to_json())
    log.write(RunnerEvent.DONE, iteration=progress.iteration, loss=progress.loss, exit_code=0)
    return EXIT_DONE


def _command_failed(log: ProgressLog, progress: CommandProgress, code: int) -> int:
    """The command failed (exited non-zero or was killed): a fatal error event, and the
    runner's exit status for it (128 + N for a signal N, as a shell says)."""
    how = f"exited with code {code}" if code > 0 else f"was killed by {signal.Signals(-code).name}"
    log.write(
        RunnerEvent.ERROR,
        iteration=progress.iteration,
        loss=progress.loss,
        message=f"command {how}",
        fatal=True,
        exit_code=code,
    )
    return code if code > 0 else 128 - code


def _end_child(child: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if the command is still there after ``COMMAND_TERM_GRACE_S``."""
    if child.poll() is not None:
        return
    child.terminate()
    try:
        child.wait(timeout=COMMAND_TERM_GRACE_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def command_argv(
    command: tuple[str, ...], launcher: str | None, processes: int, job_dir: Path
) -> list[str]:
    """The child's command line: ``command`` as it is, or under torchrun with ``processes``
    ranks (see the module docstring)."""
    if launcher != "torchrun":
        return list(command)
    # torchrun keeps per-rank files of each run in a new folder under the system's temporary
    # one unless told where: with the job, they go when the job's record does.
    log_dir = ("--log-dir", str(job_dir / TORCHRUN_LOG_DIR))
    return torchrun_argv(command, python=sys.executable, processes=processes, options=log_dir)


def command_environment(
    spec: RunnerJob,
    job_dir: Path,
    cpus: tuple[int, ...],
    gpus: tuple[int, ...],
    *,
    processes: int,
    progress_file: Path,
    base: dict[str, str] | None = None,
) -> dict[str, str]:
    """The environment a command job starts with (see the module docstring): ``base`` (the
    runner's own), then the spec's ``env``, then what qosched sets, which no spec overrides."""
    env = dict(os.environ if base is None else base)
    env["OMP_NUM_THREADS"] = str(max(1, len(cpus) // max(1, processes)))
    env.update(spec.env)
    gpu_list = ",".join(str(gpu) for gpu in gpus)
    env.update(
        {
            ENV_PROGRESS_FILE: str(progress_file),
            ENV_CPUS: ",".join(str(cpu) for cpu in cpus),
            ENV_GPUS: gpu_list,
            # Empty for a CPU job: it sees no GPU, not every GPU of the machine.
            ENV_CUDA_DEVICES: gpu_list,
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            ENV_ITERATIONS: str(spec.iterations),
            ENV_JOB_DIR: str(job_dir),
            ENV_ALLOCATION_FILE: str(job_dir / ALLOCATION_FILE),
        }
    )
    env.pop(ENV_CRASH_AT, None)
    return env


def run_job(job_dir: str | Path, *, stop: StopRequest | None = None) -> int:
    """Run the job in ``job_dir`` to completion or preemption; returns the exit code."""
    stop = stop or StopRequest().install()
    # Before PyTorch loads OpenMP (validating job.json imports it). With spinning waiters, two
    # threads on cores shared with any other busy process ran the built-in workloads 10-40x
    # slower than one thread (measured on a 2-core machine); with sleeping waiters they ran at
    # one-thread speed. The price on dedicated cores is one wake-up per parallel region.
    # A value set by the user wins; command jobs inherit it.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    # First of all, so that every process the job starts is born in its group.
    not_joined = join_from_environment()
    job_dir = Path(job_dir).resolve()
    if not job_dir.is_dir():
        print(f"qosched runner: {job_dir}: not a directory", file=sys.stderr)
        return EXIT_INPUT_ERROR
    with ProgressLog(job_dir / PROGRESS_FILE) as log:
        if not_joined is not None:
            log.write(RunnerEvent.WARNING, iteration=None, loss=None, message=not_joined)
        try:
            spec = load_runner_job(job_dir / JOB_FILE)
            if spec.command is not None:
                return _run_command(spec, job_dir, log, stop)
            return _run_workload(spec, job_dir, log, stop)
        except InputError as exc:
            print(f"qosched runner: {exc}", file=sys.stderr)
            log.write(
                RunnerEvent.ERROR,
                iteration=log.iteration,
                loss=log.loss,
                message=str(exc),
                fatal=True,
            )
            return EXIT_INPUT_ERROR
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            last_line = traceback.format_exception_only(exc)[-1].strip()
            log.write(
                RunnerEvent.ERROR,
                iteration=log.iteration,
                loss=log.loss,
                message=last_line,
                fatal=True,
            )
            return EXIT_FAILED


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: python -m qosched.backends.local.runner JOB_DIR", file=sys.stderr)
        return EXIT_INPUT_ERROR
    return run_job(args[0])


def exit_now(code: int) -> None:
    """End the process with ``code`` once its output is flushed, without the interpreter's
    teardown: with PyTorch loaded that takes about a second of the job's cores (measured on
    2 cores: 0.8-1.0 s from the ``done`` event to the exit), and the runner has nothing
    left to do by then: its checkpoint, result and progress lines are written and closed."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
