"""The user's training-job spec: a Kubernetes-shaped YAML document, validated once, here.

A spec looks like::

    apiVersion: qosched/v1
    kind: TrainingJob
    metadata:
      name: cnn-small
    spec:
      workload: cnn                 # or command: ["python", "train.py"]
      work: {iterations: 400}       # or epochs: N (built-in workloads only)
      deadline: 10m                 # or an ISO-8601 time with a timezone
      resources: {minCpus: 1, maxCpus: 2, memory: 2Gi}   # or {minGpus: 1, maxGpus: 2}
      bestEffort: false
      seed: 0
      requestedCpus: 1
      workingDir: runs/       # command jobs: where the command runs (see below)
      env: {WANDB_MODE: offline}
      launcher: torchrun      # command jobs: one process per core or GPU (see below)
      logLimit: 64Mi          # the job's output is rotated past this size (local joblog)
      speedKey: my-model      # what its speed is remembered under (see speed_memory)

A job is a **GPU job** when its resources state ``minGpus`` or ``maxGpus`` (``minGpus``
defaults to 1 then); every other job, one with no ``resources`` at all included, is a CPU job
sized in cores. GPUs are for command jobs (the built-in workloads run on CPU cores), and a GPU
job is sized in GPUs only: ``minCpus``, ``maxCpus`` and ``requestedCpus`` are refused with them.

``workingDir`` is where a command job's process starts. The service needs an absolute path that
exists when the job is submitted; ``parse_job_spec(..., base_dir=...)`` (what ``qosched submit``
does, with the folder it runs in, as ``sbatch`` does) first resolves a relative one against
``base_dir``. Without it, the command runs in the folder the spec was submitted from
(``qosched submit`` sends that folder), or, through the API, the folder the service was started
from. A command's Python script (``python train.py``, ``train.py``, torchrun's script) must
exist there when the job is submitted, and is stored as an absolute path. ``env`` adds
variables to the command's environment (names like ``[A-Za-z_][A-Za-z0-9_]*``, string values);
the names qosched sets itself (``QOSCHED_*``, ``CUDA_VISIBLE_DEVICES``) are refused.
``launcher: torchrun`` runs the command as ``python -m torch.distributed.run --standalone
--nproc-per-node N COMMAND...`` (with ``--log-dir`` in the job's folder, see the runner):
``COMMAND`` is what follows ``torchrun`` on a command line (a script and its arguments; a first
word not ending in ``.py``, such as ``python`` itself, is run as a program, torchrun's
``--no-python``), and ``N`` is the job's GPU count for a GPU job, else its core count.

Every error names the file, the YAML line where it can be found and the field as a dotted path
(``spec.resources.minCpus``).
"""

from __future__ import annotations

import os
import posixpath
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

from qosched.core.bounds import COUNT_LIMIT, LATEST_TIME_S, check_count, check_time, show_value
from qosched.core.errors import InputError
from qosched.core.spec_reader import (
    MAX_DURATION_S,
    SpecReader,
    format_duration,
    is_duration,
    text_problem,
)
from qosched.core.yaml_lines import load_with_lines, read_spec_file
from qosched.trainingjob.protocol import ENV_CUDA_DEVICES, LAUNCHERS

API_VERSION = "qosched/v1"
KIND = "TrainingJob"
BUILTIN_WORKLOADS = ("cnn", "transformer")
#: What a job's output may grow to before the local backend rotates it (``spec.logLimit``, see
#: ``qosched.backends.local.joblog``), unless its spec says otherwise; Kubernetes refuses others.
DEFAULT_LOG_LIMIT = 64 << 20
#: The smallest and largest limits a spec may state.
MIN_LOG_LIMIT = 64 << 10
MAX_LOG_LIMIT = 64 << 30

# What one epoch means for each built-in workload, in iterations at its default batch size. The
# workloads stream seeded synthetic data with no natural end, so an epoch is a convention fixed
# here; keeping it out of qosched.workloads also keeps torch out of spec reading (API, CLI).
ITERATIONS_PER_EPOCH: Mapping[str, int] = {"cnn": 100, "transformer": 50}

MAX_NAME_LENGTH = 63  # a DNS-1123 label, so the name can become a Kubernetes object name as is
#: A DNS-1123 label (at most ``MAX_NAME_LENGTH`` characters): a job's name, a namespace.
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")

_TOP_KEYS = ("apiVersion", "kind", "metadata", "spec")
_METADATA_KEYS = ("name",)
_SPEC_KEYS = (
    "workload",
    "command",
    "work",
    "deadline",
    "resources",
    "bestEffort",
    "seed",
    "requestedCpus",
    "workingDir",
    "env",
    "launcher",
    "logLimit",
    "speedKey",
)
_WORK_KEYS = ("iterations", "epochs")
_RESOURCE_KEYS = ("minCpus", "maxCpus", "memory", "minGpus", "maxGpus")
_CPU_KEYS = ("minCpus", "maxCpus")
#: Most GPUs one job may ask for (more than any one machine holds).
MAX_GPUS = 1024
#: Bounds on ``spec.env``: how many variables, and how long one value may be.
MAX_ENV_VARS = 256
MAX_ENV_VALUE = 32_768
MAX_PATH_LENGTH = 4096
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,255}")
#: Variables qosched sets for a command itself; a spec may not set them.
RESERVED_ENV_PREFIX = "QOSCHED_"
RESERVED_ENV = (ENV_CUDA_DEVICES,)
_DEADLINE_FORMATS = (
    "a duration like '90s', '10m' or '1h30m', "
    "or an ISO-8601 time with a timezone like '2026-11-30T12:00:00Z'"
)


@dataclass(frozen=True, slots=True)
class Deadline:
    """Either ``relative_s`` seconds after submission or at ``absolute_at`` (Unix seconds)."""

    relative_s: int | None = None
    absolute_at: float | None = None

    def __post_init__(self) -> None:
        if (self.relative_s is None) == (self.absolute_at is None):
            raise InputError("set exactly one of relative_s and absolute_at", field="deadline")
        if self.relative_s is not None:
            seconds = check_count(
                self.relative_s, field="deadline", minimum=1, maximum=MAX_DURATION_S
            )
            object.__setattr__(self, "relative_s", seconds)  # 12.0 -> 12: written back as "12s"
        if self.absolute_at is not None:
            check_time(self.absolute_at, field="deadline")

    def at(self, submitted_at: float) -> float:
        """Unix seconds; InputError when a relative deadline ends after year 9999 UTC."""
        if self.relative_s is None:
            assert self.absolute_at is not None
            return self.absolute_at
        at = submitted_at + self.relative_s
        if not at <= LATEST_TIME_S:
            raise InputError(
                f"{format_duration(self.relative_s)} after {submitted_at:.0f} lies after year "
                "9999 UTC",
                field="deadline",
            )
        return at

    def to_text(self) -> str:
        """The form a spec file uses; absolute times are written in UTC."""
        if self.relative_s is not None:
            return format_duration(self.relative_s)
        assert self.absolute_at is not None
        return datetime.fromtimestamp(self.absolute_at, tz=UTC).isoformat()


@dataclass(frozen=True, slots=True)
class Resources:
    """Bounds the scheduler may choose within; ``None`` means no limit was stated.

    ``min_gpus > 0`` makes a GPU job: sized in GPUs between ``min_gpus`` and ``max_gpus``, its
    CPU bounds unused. ``min_gpus == 0`` (the default) is a CPU job, sized in cores.
    """

    min_cpus: int = 1
    max_cpus: int | None = None
    memory_bytes: int | None = None
    min_gpus: int = 0
    max_gpus: int | None = None

    def __post_init__(self) -> None:
        _set_count(self, "min_cpus", minimum=1)
        if self.max_cpus is not None:
            _set_count(self, "max_cpus", minimum=self.min_cpus)
        if self.memory_bytes is not None:
            _set_count(self, "memory_bytes", minimum=1)
        _set_count(self, "min_gpus", maximum=MAX_GPUS)
        if self.max_gpus is not None:
            if self.min_gpus == 0:
                raise InputError("needs min_gpus >= 1", field="max_gpus")
            _set_count(self, "max_gpus", minimum=self.min_gpus, maximum=MAX_GPUS)

    @property
    def gpu(self) -> bool:
        """A GPU job: its workers are GPUs, not cores."""
        return self.min_gpus > 0

    def bounds(self) -> tuple[int, int | None]:
        """(least, most) workers, in GPUs for a GPU job and cores otherwise."""
        if self.gpu:
            return self.min_gpus, self.max_gpus
        return self.min_cpus, self.max_cpus


@dataclass(frozen=True, slots=True)
class TrainingJobSpec:
    """One training job as the user stated it; exactly one of ``workload`` and ``command``.

    ``iterations`` is the whole work (epochs are converted when the spec is read).
    ``requested_cpus`` is what a user of a request-based scheduler would have asked for; only
    request-honouring baselines read it.
    """

    name: str
    iterations: int
    deadline: Deadline
    workload: str | None = None
    command: tuple[str, ...] | None = None
    resources: Resources = field(default_factory=Resources)
    best_effort: bool = False
    seed: int = 0
    requested_cpus: int = 1
    working_dir: str | None = None  # absolute; None = the service's own folder
    env: Mapping[str, str] = field(default_factory=dict)
    launcher: str | None = None
    log_limit_bytes: int = DEFAULT_LOG_LIMIT  # its output is rotated past this size
    speed_key: str | None = None  # what its speed is remembered under; None: derived

    def __post_init__(self) -> None:
        if (self.workload is None) == (self.command is None):
            raise InputError("set exactly one of workload and command", field="workload")
        if self.workload is not None and self.workload not in BUILTIN_WORKLOADS:
            raise InputError(
                f"unknown workload {self.workload!r}; known: {', '.join(BUILTIN_WORKLOADS)}",
                field="workload",
            )
        if self.command is not None:
            if not self.command or not self.command[0]:
                raise InputError("must name a program to run", field="command")
            for index, arg in enumerate(self.command):
                problem = "not a string" if not isinstance(arg, str) else text_problem(arg)
                if problem is not None:
                    raise InputError(problem, field=f"command[{index}]")
        _set_count(self, "iterations", minimum=1)
        _set_count(self, "seed")
        _set_count(self, "log_limit_bytes", minimum=MIN_LOG_LIMIT, maximum=MAX_LOG_LIMIT)
        if self.speed_key is not None and (problem := speed_key_problem(self.speed_key)):
            raise InputError(problem, field="speed_key")
        low, high = self.resources.min_cpus, self.resources.max_cpus
        _set_count(
            self,
            "requested_cpus",
            minimum=low,
            maximum=high if high is not None else COUNT_LIMIT - 1,
        )
        if self.workload is not None:
            for name, value in (
                ("working_dir", self.working_dir),
                ("env", self.env or None),
                ("launcher", self.launcher),
                ("resources.min_gpus", self.resources.min_gpus or None),
            ):
                if value is not None:
                    raise InputError(_COMMAND_ONLY, field=name)
        if self.working_dir is not None:
            problem = working_dir_problem(self.working_dir)
            if problem is not None:
                raise InputError(problem, field="working_dir")
        for name, value in dict(self.env).items():
            problem = env_problem(name, value)
            if problem is not None:
                raise InputError(problem, field=f"env.{name}")
        if len(self.env) > MAX_ENV_VARS:
            raise InputError(f"at most {MAX_ENV_VARS} variables, got {len(self.env)}", field="env")
        # Read-only and hashable like the rest of the frozen spec.
        object.__setattr__(self, "env", MappingProxyType(dict(sorted(dict(self.env).items()))))
        if self.launcher is not None and self.launcher not in LAUNCHERS:
            raise InputError(
                f"unknown launcher {self.launcher!r}; known: {', '.join(LAUNCHERS)}",
                field="launcher",
            )

    @property
    def gpu(self) -> bool:
        """A GPU job (see ``Resources``)."""
        return self.resources.gpu

    @property
    def restarts_on_resize(self) -> bool:
        """A new worker count needs a new process: a GPU job's devices are fixed when CUDA
        starts, and torchrun's process count when it starts."""
        return self.gpu or self.launcher is not None

    def deadline_at(self, submitted_at: float) -> float:
        """The absolute deadline (Unix seconds) of a job submitted at ``submitted_at``."""
        return self.deadline.at(submitted_at)

    def to_dict(self) -> dict[str, Any]:
        """The spec as a JSON- and YAML-ready document that ``from_dict`` reads back."""
        spec: dict[str, Any] = {}
        if self.workload is not None:
            spec["workload"] = self.workload
        else:
            assert self.command is not None
            spec["command"] = list(self.command)
        spec["work"] = {"iterations": self.iterations}
        spec["deadline"] = self.deadline.to_text()
        resources: dict[str, Any] = {}
        if self.resources.gpu:
            resources["minGpus"] = self.resources.min_gpus
            if self.resources.max_gpus is not None:
                resources["maxGpus"] = self.resources.max_gpus
        else:
            resources["minCpus"] = self.resources.min_cpus
            if self.resources.max_cpus is not None:
                resources["maxCpus"] = self.resources.max_cpus
        if self.resources.memory_bytes is not None:
            resources["memory"] = self.resources.memory_bytes
        spec["resources"] = resources
        spec["bestEffort"] = self.best_effort
        spec["seed"] = self.seed
        if not self.resources.gpu:
            spec["requestedCpus"] = self.requested_cpus
        if self.working_dir is not None:
            spec["workingDir"] = self.working_dir
        if self.env:
            spec["env"] = dict(self.env)
        if self.launcher is not None:
            spec["launcher"] = self.launcher
        if self.log_limit_bytes != DEFAULT_LOG_LIMIT:
            spec["logLimit"] = self.log_limit_bytes
        if self.speed_key is not None:
            spec["speedKey"] = self.speed_key
        return {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": self.name},
            "spec": spec,
        }

    @classmethod
    def from_dict(cls, data: Any, *, source: str | Path = "<dict>") -> TrainingJobSpec:
        """Read back ``to_dict``'s document, with the same checks as a file.

        An absolute deadline already in the past is accepted, and a ``workingDir`` that no
        longer exists too: a stored job keeps its spec (its command then fails to start).
        """
        return _read(SpecReader(source), data, now=None, iterations_per_epoch=ITERATIONS_PER_EPOCH)


_COMMAND_ONLY = "applies to command jobs only (spec.command); a built-in workload runs on cores"


def working_dir_problem(path: str) -> str | None:
    """Why ``path`` cannot be a job's working folder as stored (absolute, bounded), or None."""
    problem = text_problem(path)
    if problem is not None:
        return problem
    if len(path) > MAX_PATH_LENGTH:
        return f"expected a path of at most {MAX_PATH_LENGTH} characters, got {len(path)}"
    if not Path(path).is_absolute():
        return (
            f"expected an absolute path, got {show_value(path)} (qosched submit resolves a "
            "relative one against the folder it runs in)"
        )
    return None


def speed_key_problem(key: str) -> str | None:
    """Why ``key`` cannot name what a job's speed is remembered under, or None."""
    if not isinstance(key, str) or not _SPEED_KEY.fullmatch(key):
        return (
            "expected 1 to 128 letters, digits and . _ - : / (what this job's speed is "
            f"remembered under), got {show_value(key)}"
        )
    return None


_SPEED_KEY = re.compile(r"[A-Za-z0-9._:/-]{1,128}")


def env_problem(name: str, value: object) -> str | None:
    """Why ``name=value`` cannot go into a command's environment, or None."""
    if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
        return (
            f"expected a variable name of letters, digits and '_' (not starting with a digit, "
            f"at most 256 characters), got {show_value(name)}"
        )
    if name.startswith(RESERVED_ENV_PREFIX) or name in RESERVED_ENV:
        return f"{name} is set by qosched itself (QOSCHED_*, CUDA_VISIBLE_DEVICES); remove it"
    if not isinstance(value, str):
        return f"expected a string value, got {show_value(value)}; quote it in the YAML"
    if len(value) > MAX_ENV_VALUE:
        return f"expected at most {MAX_ENV_VALUE} characters, got {len(value)}"
    return text_problem(value)


def _set_count(
    spec: object, name: str, *, minimum: int = 0, maximum: int = COUNT_LIMIT - 1
) -> None:
    """Check a frozen dataclass's count field, storing it as an int (a whole float such as
    12.0 is accepted, and must be written back as 12)."""
    value = check_count(getattr(spec, name), field=name, minimum=minimum, maximum=maximum)
    object.__setattr__(spec, name, value)


def parse_job_spec(
    text: str,
    source: str | Path,
    *,
    now: float | None = None,
    iterations_per_epoch: Mapping[str, int] = ITERATIONS_PER_EPOCH,
    base_dir: str | Path | None = None,
    scripts_in: str | Path | None = None,
) -> TrainingJobSpec:
    """Validate a YAML spec at submission; ``now`` (Unix seconds, default the clock) rejects
    past deadlines. A relative ``workingDir`` is resolved against ``base_dir`` (refused without
    one), and the folder must exist now. With ``scripts_in`` (the folder a command job without
    ``workingDir`` will run in), a command job's Python script (see ``script_index``) must
    exist, found from ``workingDir`` or else ``scripts_in``, and is stored as an absolute
    path."""
    data, lines = load_with_lines(text, source)
    if data is None:
        raise InputError(f"empty spec; expected a {KIND} document", source=source, line=1)
    current = time.time() if now is None else now
    return _read(
        SpecReader(source, lines),
        data,
        now=current,
        iterations_per_epoch=iterations_per_epoch,
        base_dir=Path(base_dir) if base_dir is not None else None,
        submitting=True,
        scripts_in=Path(scripts_in) if scripts_in is not None else None,
    )


@dataclass(frozen=True, slots=True)
class ContainerJobSpec:
    """A spec read for a container (``qosched k8s job``): ``working_dir`` is a folder of the
    container's image as written, absolute or relative to the image's working directory."""

    spec: TrainingJobSpec
    working_dir: str | None = None


def parse_container_job_spec(
    text: str,
    source: str | Path,
    *,
    now: float | None = None,
    refused: Mapping[str, str] = MappingProxyType({}),
    iterations_per_epoch: Mapping[str, int] = ITERATIONS_PER_EPOCH,
) -> ContainerJobSpec:
    """Validate a YAML spec whose command runs in a container image, not on this machine:
    as ``parse_job_spec``, except that ``workingDir`` is the image's (kept as written, not
    looked for here) and no script is looked for. A key of ``spec`` in ``refused`` is refused
    with its message (a field the container cannot honour)."""
    data, lines = load_with_lines(text, source)
    if data is None:
        raise InputError(f"empty spec; expected a {KIND} document", source=source, line=1)
    r = SpecReader(source, lines)
    working_dir = None
    body = data.get("spec") if isinstance(data, dict) else None
    if isinstance(body, dict):
        for key, why in refused.items():
            if body.get(key) is not None:
                raise r.error(f"spec.{key}", why)
        # A workload job's workingDir is left to _read, which refuses it.
        if body.get("workingDir") is not None and "workload" not in body:
            working_dir = _image_working_dir(r, body["workingDir"])
            data = {**data, "spec": {k: v for k, v in body.items() if k != "workingDir"}}
    spec = _read(
        r,
        data,
        now=time.time() if now is None else now,
        iterations_per_epoch=iterations_per_epoch,
        submitting=True,
    )
    return ContainerJobSpec(spec, working_dir)


def _image_working_dir(r: SpecReader, value: Any) -> str:
    path = "spec.workingDir"
    # POSIX: the image's file system, whatever this machine's is. Without "." and "..".
    folder = posixpath.normpath(r.text(value, path))
    if len(folder) > MAX_PATH_LENGTH:
        raise r.error(
            path, f"expected a path of at most {MAX_PATH_LENGTH} characters, got {len(folder)}"
        )
    return folder


def load_job_spec(
    path: str | Path,
    *,
    now: float | None = None,
    iterations_per_epoch: Mapping[str, int] = ITERATIONS_PER_EPOCH,
    base_dir: str | Path | None = None,
) -> TrainingJobSpec:
    """Read and validate a YAML spec file; a relative ``workingDir`` is ``base_dir``'s (default:
    the current folder, as ``qosched submit`` has it)."""
    path = Path(path)
    text = read_spec_text(path)
    return parse_job_spec(
        text,
        path,
        now=now,
        iterations_per_epoch=iterations_per_epoch,
        base_dir=Path.cwd() if base_dir is None else base_dir,
    )


def read_spec_text(path: str | Path) -> str:
    """A job spec file's text; InputError naming the file when it cannot be read as UTF-8."""
    return read_spec_file(path, "job spec")


def _read(
    r: SpecReader,
    data: Any,
    *,
    now: float | None,
    iterations_per_epoch: Mapping[str, int],
    base_dir: Path | None = None,
    submitting: bool = False,
    scripts_in: Path | None = None,
) -> TrainingJobSpec:
    top = r.mapping(data, "", _TOP_KEYS)
    api_version = r.required(top, "", "apiVersion")
    if api_version != API_VERSION:
        raise r.error("apiVersion", f"expected {API_VERSION!r}, got {show_value(api_version)}")
    kind = r.required(top, "", "kind")
    if kind != KIND:
        raise r.error("kind", f"expected {KIND!r}, got {show_value(kind)}")
    metadata = r.mapping(r.required(top, "", "metadata"), "metadata", _METADATA_KEYS)
    name = _name(r, r.required(metadata, "metadata", "name"), "metadata.name")
    spec = r.mapping(r.required(top, "", "spec"), "spec", _SPEC_KEYS)

    workload, command = _program(r, spec)
    iterations = _work(r, spec, workload, iterations_per_epoch)
    deadline = _deadline(r, r.required(spec, "spec", "deadline"), "spec.deadline", now)
    resources = _resources(r, spec.get("resources"), "spec.resources")
    best_effort = r.boolean(spec.get("bestEffort", False), "spec.bestEffort")
    seed = r.whole(spec.get("seed", 0), "spec.seed", 0)
    if resources.gpu and "requestedCpus" in spec:
        raise r.error("spec.requestedCpus", _GPU_NOT_CPU)
    if workload is not None:
        for key in ("workingDir", "env", "launcher"):
            if key in spec:
                raise r.error(f"spec.{key}", _COMMAND_ONLY)
        if resources.gpu:
            raise r.error("spec.resources.minGpus", _COMMAND_ONLY)
    working_dir = None
    if spec.get("workingDir") is not None:
        working_dir = _working_dir(r, spec["workingDir"], base_dir, submitting)
    env = _env(r, spec["env"]) if spec.get("env") is not None else {}
    launcher = None
    if spec.get("launcher") is not None:
        launcher = r.one_of(spec["launcher"], "spec.launcher", LAUNCHERS, what="launcher")
    if command is not None and scripts_in is not None:
        command = _resolve_script(r, command, launcher, working_dir, scripts_in)
    log_limit = DEFAULT_LOG_LIMIT
    if spec.get("logLimit") is not None:
        log_limit = r.memory(spec["logLimit"], "spec.logLimit")
        if not MIN_LOG_LIMIT <= log_limit <= MAX_LOG_LIMIT:
            raise r.error(
                "spec.logLimit",
                f"expected a size from 64Ki to 64Gi, got {show_value(spec['logLimit'])}",
            )
    speed_key = None
    if spec.get("speedKey") is not None:
        speed_key = r.text(spec["speedKey"], "spec.speedKey")
        if problem := speed_key_problem(speed_key):
            raise r.error("spec.speedKey", problem)
    requested = r.whole(spec.get("requestedCpus", resources.min_cpus), "spec.requestedCpus", 1)
    if requested < resources.min_cpus or (
        resources.max_cpus is not None and requested > resources.max_cpus
    ):
        high = resources.max_cpus if resources.max_cpus is not None else "any"
        raise r.error(
            "spec.requestedCpus",
            f"expected a value within minCpus..maxCpus ({resources.min_cpus}..{high}), "
            f"got {requested}",
        )
    return TrainingJobSpec(
        name=name,
        iterations=iterations,
        deadline=deadline,
        workload=workload,
        command=command,
        resources=resources,
        best_effort=best_effort,
        seed=seed,
        requested_cpus=requested,
        working_dir=working_dir,
        env=env,
        launcher=launcher,
        log_limit_bytes=log_limit,
        speed_key=speed_key,
    )


_GPU_NOT_CPU = (
    "a GPU job (minGpus/maxGpus) is sized in GPUs; its processes share the service's cores, "
    "so CPU bounds do not apply"
)


def _working_dir(r: SpecReader, value: Any, base_dir: Path | None, submitting: bool) -> str:
    path = "spec.workingDir"
    text = r.text(value, path)
    folder = Path(text).expanduser()
    if not folder.is_absolute() and base_dir is not None:
        folder = base_dir / folder
    # Normalised without following links: the user's path, without "." and "..".
    resolved = str(Path(os.path.normpath(folder))) if folder.is_absolute() else text
    problem = working_dir_problem(resolved)
    if problem is not None:
        raise r.error(path, problem)
    if submitting and not Path(resolved).is_dir():
        raise r.error(path, f"{resolved} is not an existing folder")
    return resolved


_PYTHON = re.compile(r"python[0-9.]*")
# Interpreter options that take the next word as their value.
_PYTHON_VALUE_OPTIONS = frozenset({"-X", "-W", "--check-hash-based-pycs"})


def script_index(command: tuple[str, ...], launcher: str | None) -> int | None:
    """Which word of ``command`` names a Python script file, if one does: under torchrun the
    first word when it ends in ``.py``; otherwise a first word ending in ``.py``, or, after an
    interpreter (``python``, ``python3.11``, a path to one), its first word that is not an
    option when that ends in ``.py``. None for ``-m module``, ``-c code`` and anything else."""
    if launcher is not None or command[0].endswith(".py"):
        return 0 if command[0].endswith(".py") else None
    if not _PYTHON.fullmatch(os.path.basename(command[0])):
        return None
    index = 1
    while index < len(command):
        word = command[index]
        if word in ("-m", "-c", "-"):
            return None
        if not word.startswith("-"):
            return index if word.endswith(".py") else None
        index += 2 if word in _PYTHON_VALUE_OPTIONS else 1
    return None


def _resolve_script(
    r: SpecReader,
    command: tuple[str, ...],
    launcher: str | None,
    working_dir: str | None,
    scripts_in: Path,
) -> tuple[str, ...]:
    index = script_index(command, launcher)
    if index is None:
        return command
    given = command[index]
    folder = Path(working_dir) if working_dir is not None else scripts_in
    script = Path(os.path.normpath(folder / Path(given).expanduser()))
    if not script.is_file():
        raise r.error(
            f"spec.command[{index}]",
            f"no such script: {script} (a relative path is found from {folder}, the job's "
            "working folder)",
        )
    return (*command[:index], str(script), *command[index + 1 :])


def _env(r: SpecReader, value: Any) -> dict[str, str]:
    path = "spec.env"
    if not isinstance(value, dict):
        raise r.error(path, f"expected a mapping of names to strings, got {show_value(value)}")
    if len(value) > MAX_ENV_VARS:
        raise r.error(path, f"expected at most {MAX_ENV_VARS} variables, got {len(value)}")
    env: dict[str, str] = {}
    for name, item in value.items():
        where = f"{path}.{name}" if isinstance(name, str) else path
        problem = env_problem(name, item)
        if problem is not None:
            raise r.error(where, problem)
        env[name] = item
    return env


def _name(r: SpecReader, value: Any, path: str) -> str:
    value = r.text(value, path)
    if len(value) > MAX_NAME_LENGTH or not DNS_LABEL.fullmatch(value):
        raise r.error(
            path,
            f"expected at most {MAX_NAME_LENGTH} lowercase letters, digits and '-', "
            f"starting and ending with a letter or digit, got {show_value(value)}",
        )
    return value


def _program(r: SpecReader, spec: dict[str, Any]) -> tuple[str | None, tuple[str, ...] | None]:
    has_workload, has_command = "workload" in spec, "command" in spec
    if has_workload == has_command:
        which = "both" if has_workload else "neither"
        path = "spec.command" if has_workload else "spec.workload"
        raise r.error(path, f"set exactly one of spec.workload and spec.command, got {which}")
    if has_workload:
        return r.one_of(spec["workload"], "spec.workload", BUILTIN_WORKLOADS, what="workload"), None
    return None, r.strings(spec["command"], "spec.command")


def _work(
    r: SpecReader,
    spec: dict[str, Any],
    workload: str | None,
    iterations_per_epoch: Mapping[str, int],
) -> int:
    work = r.mapping(r.required(spec, "spec", "work"), "spec.work", _WORK_KEYS)
    if ("iterations" in work) == ("epochs" in work):
        which = "both" if "iterations" in work else "neither"
        raise r.error(
            "spec.work.iterations",
            f"set exactly one of spec.work.iterations and spec.work.epochs, got {which}",
        )
    if "iterations" in work:
        return r.whole(work["iterations"], "spec.work.iterations", 1)
    epochs = r.whole(work["epochs"], "spec.work.epochs", 1)
    if workload is None:
        raise r.error(
            "spec.work.epochs",
            "epochs need a built-in workload (its epoch size is known); "
            "a command's job states spec.work.iterations",
        )
    if workload not in iterations_per_epoch:
        raise r.error("spec.work.epochs", f"the size of an epoch of {workload!r} is not known")
    size = iterations_per_epoch[workload]
    if epochs * size >= COUNT_LIMIT:
        raise r.error(
            "spec.work.epochs",
            f"{epochs} epochs of {size} iterations are {epochs * size} iterations; "
            "expected fewer than 2**53",
        )
    return epochs * size


def _deadline(r: SpecReader, value: Any, path: str, now: float | None) -> Deadline:
    if is_duration(value):
        # Bounded so that the deadline, submission time included, falls within year 9999 UTC.
        latest = MAX_DURATION_S if now is None else max(0, int(LATEST_TIME_S - now))
        seconds = r.duration(
            value, path, maximum=latest, why="the deadline must fall by the end of year 9999 UTC"
        )
        return Deadline(relative_s=seconds)
    return Deadline(absolute_at=r.moment(value, path, after=now, expected=_DEADLINE_FORMATS))


def _resources(r: SpecReader, value: Any, path: str) -> Resources:
    if value is None:
        return Resources()
    data = r.mapping(value, path, _RESOURCE_KEYS)
    if data.get("minGpus") is not None or data.get("maxGpus") is not None:
        for key in _CPU_KEYS:
            if key in data:
                raise r.error(f"{path}.{key}", _GPU_NOT_CPU)
        min_gpus = r.whole(data.get("minGpus", 1), f"{path}.minGpus", 1, MAX_GPUS)
        max_gpus = None
        if data.get("maxGpus") is not None:
            max_gpus = r.whole(data["maxGpus"], f"{path}.maxGpus", 1, MAX_GPUS)
            if min_gpus > max_gpus:
                raise r.error(
                    f"{path}.minGpus", f"must not exceed maxGpus ({max_gpus}), got {min_gpus}"
                )
        memory = None
        if data.get("memory") is not None:
            memory = r.memory(data["memory"], f"{path}.memory")
        return Resources(memory_bytes=memory, min_gpus=min_gpus, max_gpus=max_gpus)
    min_cpus = r.whole(data.get("minCpus", 1), f"{path}.minCpus", 1)
    max_cpus = None
    if data.get("maxCpus") is not None:
        max_cpus = r.whole(data["maxCpus"], f"{path}.maxCpus", 1)
        if min_cpus > max_cpus:
            raise r.error(
                f"{path}.minCpus", f"must not exceed maxCpus ({max_cpus}), got {min_cpus}"
            )
    memory = None
    if data.get("memory") is not None:
        memory = r.memory(data["memory"], f"{path}.memory")
    return Resources(min_cpus=min_cpus, max_cpus=max_cpus, memory_bytes=memory)
