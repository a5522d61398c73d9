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
      resources: {minCpus: 1, maxCpus: 2, memory: 2Gi}
      bestEffort: false
      seed: 0
      requestedCpus: 1

Every error names the file, the YAML line where it can be found and the field as a dotted path
(``spec.resources.minCpus``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
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

API_VERSION = "qosched/v1"
KIND = "TrainingJob"
BUILTIN_WORKLOADS = ("cnn", "transformer")

# What one epoch means for each built-in workload, in iterations at its default batch size. The
# workloads stream seeded synthetic data with no natural end, so an epoch is a convention fixed
# here; keeping it out of qosched.workloads also keeps torch out of spec reading (API, CLI).
ITERATIONS_PER_EPOCH: Mapping[str, int] = {"cnn": 100, "transformer": 50}

MAX_NAME_LENGTH = 63  # a DNS-1123 label, so the name can become a Kubernetes object name as is
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")

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
)
_WORK_KEYS = ("iterations", "epochs")
_RESOURCE_KEYS = ("minCpus", "maxCpus", "memory")
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
    """CPU bounds the scheduler may choose within; ``None`` means no limit was stated."""

    min_cpus: int = 1
    max_cpus: int | None = None
    memory_bytes: int | None = None

    def __post_init__(self) -> None:
        _set_count(self, "min_cpus", minimum=1)
        if self.max_cpus is not None:
            _set_count(self, "max_cpus", minimum=self.min_cpus)
        if self.memory_bytes is not None:
            _set_count(self, "memory_bytes", minimum=1)


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
        low, high = self.resources.min_cpus, self.resources.max_cpus
        _set_count(
            self,
            "requested_cpus",
            minimum=low,
            maximum=high if high is not None else COUNT_LIMIT - 1,
        )

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
        resources: dict[str, Any] = {"minCpus": self.resources.min_cpus}
        if self.resources.max_cpus is not None:
            resources["maxCpus"] = self.resources.max_cpus
        if self.resources.memory_bytes is not None:
            resources["memory"] = self.resources.memory_bytes
        spec["resources"] = resources
        spec["bestEffort"] = self.best_effort
        spec["seed"] = self.seed
        spec["requestedCpus"] = self.requested_cpus
        return {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": self.name},
            "spec": spec,
        }

    @classmethod
    def from_dict(cls, data: Any, *, source: str | Path = "<dict>") -> TrainingJobSpec:
        """Read back ``to_dict``'s document, with the same checks as a file.

        An absolute deadline already in the past is accepted: a stored job keeps its deadline.
        """
        return _read(SpecReader(source), data, now=None, iterations_per_epoch=ITERATIONS_PER_EPOCH)


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
) -> TrainingJobSpec:
    """Validate a YAML spec; ``now`` (Unix seconds, default the clock) rejects past deadlines."""
    data, lines = load_with_lines(text, source)
    if data is None:
        raise InputError(f"empty spec; expected a {KIND} document", source=source, line=1)
    current = time.time() if now is None else now
    return _read(
        SpecReader(source, lines), data, now=current, iterations_per_epoch=iterations_per_epoch
    )


def load_job_spec(
    path: str | Path,
    *,
    now: float | None = None,
    iterations_per_epoch: Mapping[str, int] = ITERATIONS_PER_EPOCH,
) -> TrainingJobSpec:
    """Read and validate a YAML spec file."""
    path = Path(path)
    text = read_spec_text(path)
    return parse_job_spec(text, path, now=now, iterations_per_epoch=iterations_per_epoch)


def read_spec_text(path: str | Path) -> str:
    """A job spec file's text; InputError naming the file when it cannot be read as UTF-8."""
    return read_spec_file(path, "job spec")


def _read(
    r: SpecReader, data: Any, *, now: float | None, iterations_per_epoch: Mapping[str, int]
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
    )


def _name(r: SpecReader, value: Any, path: str) -> str:
    value = r.text(value, path)
    if len(value) > MAX_NAME_LENGTH or not _NAME.fullmatch(value):
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
