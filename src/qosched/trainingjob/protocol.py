"""The files a scheduler and a job runner share in a job directory, and their validated types.

The layout and the meaning of every field are documented in ``qosched.backends.local.runner``.
This module holds the names and the boundary checks, so the scheduler side can write exactly
what the runner accepts (``write_runner_job``, ``write_allocation``) and read what it reports
(``read_result``, ``qosched.backends.local.progress.read_progress``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from qosched.core.atomic import atomic_write_json
from qosched.core.bounds import check_count, is_whole
from qosched.core.errors import InputError

JOB_FILE = "job.json"
ALLOCATION_FILE = "allocation.json"
PROGRESS_FILE = "progress.jsonl"
CHECKPOINT_FILE = "checkpoint.pt"
RESULT_FILE = "result.json"
# Where a command job may append {"iteration": n} lines; the runner relays them.
COMMAND_PROGRESS_FILE = "command_progress.jsonl"

EXIT_DONE = 0
EXIT_FAILED = 1  # an unexpected exception (or a command job's own exit code 1)
EXIT_INPUT_ERROR = 2  # job.json, checkpoint or environment is wrong: retrying will not help
EXIT_PREEMPTED = 3  # stopped by SIGTERM/SIGINT before completion; resumable from the checkpoint

# Test hook: a built-in workload raises instead of completing this (1-based) iteration.
ENV_CRASH_AT = "QOSCHED_RUNNER_CRASH_AT"

# Environment a command job is started with.
ENV_PROGRESS_FILE = "QOSCHED_PROGRESS_FILE"
ENV_CPUS = "QOSCHED_CPUS"
ENV_ITERATIONS = "QOSCHED_ITERATIONS"
ENV_JOB_DIR = "QOSCHED_JOB_DIR"
ENV_ALLOCATION_FILE = "QOSCHED_ALLOCATION_FILE"
ENV_GPUS = "QOSCHED_GPUS"
ENV_CUDA_DEVICES = "CUDA_VISIBLE_DEVICES"

#: Highest GPU index an allocation may name (NVML numbers a machine's GPUs from 0).
MAX_GPU_INDEX = 1023
#: ``launcher`` values (``spec.launcher`` in a TrainingJob); absent = the command runs as it is.
LAUNCHERS = ("torchrun",)


def torchrun_argv(
    command: Sequence[str],
    *,
    python: str,
    processes: int,
    rendezvous: Sequence[str] = ("--standalone",),
    options: Sequence[str] = (),
) -> list[str]:
    """``command`` under torchrun (``python -m torch.distributed.run``) with ``processes``
    ranks on this machine: what ``launcher: torchrun`` means in both backends. ``command`` is
    what follows ``torchrun`` on a command line; a first word not ending in ``.py`` is run as a
    program (``--no-python``: an interpreter of the user's choice, a shell script) instead of
    torchrun's ``python SCRIPT``. ``rendezvous`` says how the machines of the job meet (one
    alone by default), ``options`` adds torchrun options."""
    argv = [python, "-m", "torch.distributed.run", *rendezvous]
    argv += ["--nproc-per-node", str(processes), *options]
    if not command[0].endswith(".py"):
        argv.append("--no-python")
    return argv + list(command)


_SEED_LIMIT = 2**63


def _load_json_object(path: Path, what: str) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read {what}: {exc.strerror}", source=path) from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON: {exc.msg}", source=path, line=exc.lineno) from exc
    if not isinstance(data, dict):
        raise InputError(f"expected a JSON object, got {type(data).__name__}", source=path)
    return data


def _check_keys(
    data: dict[str, Any],
    required: tuple[str, ...],
    optional: tuple[str, ...],
    source: str | Path | None,
) -> None:
    for name in required:
        if name not in data:
            raise InputError("missing required field", source=source, field=name)
    known = set(required) | set(optional)
    for name in data:
        if name not in known:
            # Strict on purpose: a misspelt optional field would otherwise be ignored silently.
            raise InputError(
                f"unknown field; expected only {', '.join(sorted(known))}",
                source=source,
                field=name,
            )


@dataclass(frozen=True, slots=True)
class RunnerJob:
    """``job.json``: what to run. Exactly one of ``workload`` and ``command`` is set."""

    job_id: str
    workload: str | None
    command: tuple[str, ...] | None
    iterations: int
    seed: int
    checkpoint_every: int
    batch_size: int | None = None  # built-in workloads only; None = the workload's default
    working_dir: str | None = None  # command jobs: where the command starts (absolute)
    env: tuple[tuple[str, str], ...] = ()  # command jobs: added to its environment
    launcher: str | None = None  # command jobs: "torchrun", or None to run it as it is

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "job_id": self.job_id,
            "workload": self.workload,
            "command": list(self.command) if self.command is not None else None,
            "iterations": self.iterations,
            "seed": self.seed,
            "checkpoint_every": self.checkpoint_every,
        }
        if self.batch_size is not None:
            data["batch_size"] = self.batch_size
        if self.working_dir is not None:
            data["working_dir"] = self.working_dir
        if self.env:
            data["env"] = dict(self.env)
        if self.launcher is not None:
            data["launcher"] = self.launcher
        return data


def parse_runner_job(data: object, *, source: str | Path | None = None) -> RunnerJob:
    """Validate a decoded ``job.json``; every error names the field and what was expected."""
    if not isinstance(data, dict):
        raise InputError(f"expected a JSON object, got {type(data).__name__}", source=source)
    _check_keys(
        data,
        required=("job_id", "iterations", "seed", "checkpoint_every"),
        optional=("workload", "command", "batch_size", "working_dir", "env", "launcher"),
        source=source,
    )
    job_id = data["job_id"]
    if not isinstance(job_id, str) or not job_id.strip():
        raise InputError(
            f"expected a non-empty string, got {json.dumps(job_id)}", source=source, field="job_id"
        )
    workload = data.get("workload")
    command = data.get("command")
    if (workload is None) == (command is None):
        raise InputError(
            "set exactly one of 'workload' (a built-in name) and 'command' (an argv list)",
            source=source,
            field="workload" if workload is not None else "command",
        )
    if workload is not None:
        if not isinstance(workload, str):
            raise InputError(
                f"expected a workload name, got {json.dumps(workload)}",
                source=source,
                field="workload",
            )
        # Imported here: it loads PyTorch, which a command job's runner never needs.
        from qosched.workloads import get_workload

        try:
            get_workload(workload)
        except InputError as exc:
            raise InputError(exc.reason, source=source, field="workload") from None
    argv: tuple[str, ...] | None = None
    if command is not None:
        if (
            not isinstance(command, list)
            or not command
            or not all(isinstance(arg, str) for arg in command)
            or not command[0]
        ):
            raise InputError(
                f"expected a non-empty list of strings (an argv), got {json.dumps(command)}",
                source=source,
                field="command",
            )
        argv = tuple(command)
    iterations = check_count(data["iterations"], field="iterations", minimum=1, source=source)
    seed = data["seed"]
    if not is_whole(seed) or not 0 <= seed < _SEED_LIMIT:
        raise InputError(
            f"expected a whole number in [0, 2**63), got {json.dumps(seed)}",
            source=source,
            field="seed",
        )
    checkpoint_every = check_count(
        data["checkpoint_every"], field="checkpoint_every", minimum=1, source=source
    )
    batch_size = data.get("batch_size")
    if batch_size is not None:
        if command is not None:
            raise InputError(
                "applies to built-in workloads only; a command chooses its own batch size",
                source=source,
                field="batch_size",
            )
        batch_size = check_count(batch_size, field="batch_size", minimum=1, source=source)
    working_dir, env, launcher = _command_options(data, source)
    if command is None and (working_dir is not None or env or launcher is not None):
        raise InputError(
            "working_dir, env and launcher apply to command jobs only",
            source=source,
            field="workload",
        )
    return RunnerJob(
        job_id,
        workload,
        argv,
        iterations,
        seed,
        checkpoint_every,
        batch_size,
        working_dir=working_dir,
        env=env,
        launcher=launcher,
    )


def _command_options(
    data: dict[str, Any], source: str | Path | None
) -> tuple[str | None, tuple[tuple[str, str], ...], str | None]:
    """``working_dir``, ``env`` and ``launcher`` of a ``job.json``, checked."""
    working_dir = data.get("working_dir")
    if working_dir is not None and (
        not isinstance(working_dir, str) or not os.path.isabs(working_dir) or "\x00" in working_dir
    ):
        raise InputError(
            f"expected an absolute path, got {json.dumps(working_dir)}",
            source=source,
            field="working_dir",
        )
    env = data.get("env", {})
    if not isinstance(env, dict) or not all(
        isinstance(k, str)
        and isinstance(v, str)
        and k
        and "=" not in k
        and "\x00" not in k + v
        and not k.startswith("QOSCHED_")
        and k != ENV_CUDA_DEVICES
        for k, v in env.items()
    ):
        raise InputError(
            "expected a mapping of variable names (not QOSCHED_* or CUDA_VISIBLE_DEVICES) "
            "to strings",
            source=source,
            field="env",
        )
    launcher = data.get("launcher")
    if launcher is not None and launcher not in LAUNCHERS:
        raise InputError(
            f"expected one of {', '.join(LAUNCHERS)} or null, got {json.dumps(launcher)}",
            source=source,
            field="launcher",
        )
    return working_dir, tuple(sorted(env.items())), launcher


def load_runner_job(path: str | Path) -> RunnerJob:
    path = Path(path)
    return parse_runner_job(_load_json_object(path, "job spec"), source=path)


def write_runner_job(path: str | Path, spec: RunnerJob) -> None:
    atomic_write_json(path, spec.to_json())


@dataclass(frozen=True, slots=True)
class Allocation:
    """``allocation.json``: the CPU cores a job may use now, and the GPUs it holds (fixed for
    the life of a runner: a GPU job is re-sized by a restart). ``version`` tells updates
    apart."""

    cpus: tuple[int, ...]
    version: int
    gpus: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"cpus": list(self.cpus), "version": self.version, "gpus": list(self.gpus)}


def parse_allocation(
    data: object, *, source: str | Path | None = None, cpu_count: int | None = None
) -> Allocation:
    """Validate a decoded ``allocation.json``; core ids must be below ``cpu_count``
    (default: this machine's ``os.cpu_count()``)."""
    if not isinstance(data, dict):
        raise InputError(f"expected a JSON object, got {type(data).__name__}", source=source)
    _check_keys(data, required=("cpus", "version"), optional=("gpus",), source=source)
    count = cpu_count if cpu_count is not None else (os.cpu_count() or 1)
    cpus = data["cpus"]
    if not isinstance(cpus, list) or not cpus or not all(is_whole(cpu) for cpu in cpus):
        raise InputError(
            f"expected a non-empty list of core ids, got {json.dumps(cpus)}",
            source=source,
            field="cpus",
        )
    unknown = [cpu for cpu in cpus if not 0 <= cpu < count]
    if unknown:
        raise InputError(
            f"unknown core(s) {unknown}; this machine has cores 0..{count - 1}",
            source=source,
            field="cpus",
        )
    if len(set(cpus)) != len(cpus):
        raise InputError(f"duplicate core ids in {cpus}", source=source, field="cpus")
    version = check_count(data["version"], field="version", source=source)
    gpus = data.get("gpus", [])
    if (
        not isinstance(gpus, list)
        or not all(is_whole(gpu) and 0 <= gpu <= MAX_GPU_INDEX for gpu in gpus)
        or len(set(gpus)) != len(gpus)
    ):
        raise InputError(
            f"expected a list of distinct GPU indices in [0, {MAX_GPU_INDEX}], "
            f"got {json.dumps(gpus)}",
            source=source,
            field="gpus",
        )
    return Allocation(tuple(cpus), version, tuple(int(gpu) for gpu in gpus))


def read_allocation(path: str | Path, *, cpu_count: int | None = None) -> Allocation:
    path = Path(path)
    return parse_allocation(_load_json_object(path, "allocation"), source=path, cpu_count=cpu_count)


def write_allocation(path: str | Path, allocation: Allocation) -> None:
    """Atomically, so a polling runner never reads half a file."""
    atomic_write_json(path, allocation.to_json())


def write_job_folder(job_dir: Path, job: RunnerJob, allocation: Allocation | None) -> None:
    """A new job folder holding what a runner reads at its start: ``job.json`` and, when
    given, ``allocation.json`` (without one the runner keeps the cores it inherited)."""
    job_dir.mkdir(parents=True)
    write_runner_job(job_dir / JOB_FILE, job)
    if allocation is not None:
        write_allocation(job_dir / ALLOCATION_FILE, allocation)


@dataclass(frozen=True, slots=True)
class JobResult:
    """``result.json``, written once when a job completes."""

    job_id: str
    iterations: int | None  # total done; for a command, the last iteration it reported
    iterations_run: int | None  # done by this runner process (less after a resume)
    resumed_from: int | None
    wall_s: float  # this runner process, start to completion
    final_loss: float | None
    mean_iteration_s: float | None  # None when this process ran no iteration it could time

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _RESULT_FIELDS}


_RESULT_FIELDS = tuple(field.name for field in fields(JobResult))


def finite_or_none(value: float | None) -> float | None:
    """JSON has no NaN or infinity; a diverged loss is reported as null (see the runner docs)."""
    return value if value is not None and math.isfinite(value) else None


def read_result(path: str | Path) -> JobResult:
    path = Path(path)
    data = _load_json_object(path, "result")
    _check_keys(data, required=_RESULT_FIELDS, optional=(), source=path)
    return JobResult(**{name: data[name] for name in _RESULT_FIELDS})
