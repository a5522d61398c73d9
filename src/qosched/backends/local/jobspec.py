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

import difflib
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from qosched.core.errors import InputError
from qosched.core.yaml_lines import join_path, load_with_lines, read_spec_file, show_value

API_VERSION = "qosched/v1"
KIND = "TrainingJob"
BUILTIN_WORKLOADS = ("cnn", "transformer")

# What one epoch means for each built-in workload, in iterations at its default batch size. The
# workloads stream seeded synthetic data with no natural end, so an epoch is a convention fixed
# here; keeping it out of qosched.workloads also keeps torch out of spec reading (API, CLI).
ITERATIONS_PER_EPOCH: Mapping[str, int] = {"cnn": 100, "transformer": 50}

MAX_NAME_LENGTH = 63  # a DNS-1123 label, so the name can become a Kubernetes object name as is
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DURATION = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")
_DURATION_UNITS = (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1))
_MEMORY = re.compile(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti)?")
_MEMORY_UNITS = {None: 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}

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
        if self.relative_s is not None and self.relative_s < 1:
            raise InputError(f"must be >= 1 s, got {self.relative_s}", field="deadline")
        if self.absolute_at is not None and not math.isfinite(self.absolute_at):
            raise InputError(f"must be finite, got {self.absolute_at}", field="deadline")

    def at(self, submitted_at: float) -> float:
        if self.relative_s is not None:
            return submitted_at + self.relative_s
        assert self.absolute_at is not None
        return self.absolute_at

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
        if self.min_cpus < 1:
            raise InputError(f"must be >= 1, got {self.min_cpus}", field="min_cpus")
        if self.max_cpus is not None and self.max_cpus < self.min_cpus:
            raise InputError(
                f"must be >= min_cpus ({self.min_cpus}), got {self.max_cpus}", field="max_cpus"
            )
        if self.memory_bytes is not None and self.memory_bytes < 1:
            raise InputError(f"must be >= 1, got {self.memory_bytes}", field="memory_bytes")


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
        if self.command is not None and (not self.command or not self.command[0]):
            raise InputError("must name a program to run", field="command")
        if self.iterations < 1:
            raise InputError(f"must be >= 1, got {self.iterations}", field="iterations")
        if self.seed < 0:
            raise InputError(f"must be >= 0, got {self.seed}", field="seed")
        low, high = self.resources.min_cpus, self.resources.max_cpus
        if self.requested_cpus < low or (high is not None and self.requested_cpus > high):
            raise InputError(
                f"must lie within [{low}, {high if high is not None else 'any'}], "
                f"got {self.requested_cpus}",
                field="requested_cpus",
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
        return _SpecReader(source, {}).read(
            data, now=None, iterations_per_epoch=ITERATIONS_PER_EPOCH
        )


def format_duration(seconds: int) -> str:
    """``5400 -> '1h30m'``: the shortest form ``parse_job_spec`` reads back."""
    parts = []
    rest = seconds
    for unit, size in _DURATION_UNITS:
        count, rest = divmod(rest, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


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
    return _SpecReader(source, lines).read(
        data, now=current, iterations_per_epoch=iterations_per_epoch
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


def _is_int(value: Any) -> bool:
    # YAML's true/false load as bool, a subclass of int; a count of true iterations is a typo.
    return isinstance(value, int) and not isinstance(value, bool)


class _SpecReader:
    """Walks the loaded document; every error carries the dotted path and, if known, the line."""

    def __init__(self, source: str | Path, lines: Mapping[str, int]) -> None:
        self.source = source
        self.lines = lines

    def error(self, path: str, message: str) -> InputError:
        # A missing key has no line of its own: point at the nearest enclosing one that exists.
        probe = path
        while probe and probe not in self.lines:
            probe = probe.rpartition(".")[0]
        return InputError(
            message, source=self.source, line=self.lines.get(probe), field=path or None
        )

    def mapping(self, value: Any, path: str, allowed: tuple[str, ...]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.error(path, f"expected a mapping, got {show_value(value)}")
        for key in value:
            if not isinstance(key, str):
                raise self.error(path, f"keys must be strings, got {show_value(key)}")
            if key not in allowed:
                raise self.error(join_path(path, key), _unknown_key_message(key, allowed))
        return value

    def required(self, data: dict[str, Any], path: str, key: str) -> Any:
        if data.get(key) is None:
            raise self.error(join_path(path, key), "required; it is missing or null")
        return data[key]

    def integer(self, value: Any, path: str, minimum: int) -> int:
        if not _is_int(value):
            raise self.error(path, f"expected a whole number >= {minimum}, got {show_value(value)}")
        if value < minimum:
            raise self.error(path, f"expected a whole number >= {minimum}, got {value}")
        return value

    def read(
        self, data: Any, *, now: float | None, iterations_per_epoch: Mapping[str, int]
    ) -> TrainingJobSpec:
        top = self.mapping(data, "", _TOP_KEYS)
        api_version = self.required(top, "", "apiVersion")
        if api_version != API_VERSION:
            raise self.error(
                "apiVersion", f"expected {API_VERSION!r}, got {show_value(api_version)}"
            )
        kind = self.required(top, "", "kind")
        if kind != KIND:
            raise self.error("kind", f"expected {KIND!r}, got {show_value(kind)}")
        metadata = self.mapping(self.required(top, "", "metadata"), "metadata", _METADATA_KEYS)
        name = self.name(self.required(metadata, "metadata", "name"), "metadata.name")
        spec = self.mapping(self.required(top, "", "spec"), "spec", _SPEC_KEYS)

        workload, command = self.program(spec)
        iterations = self.work(spec, workload, iterations_per_epoch)
        deadline = self.deadline(self.required(spec, "spec", "deadline"), "spec.deadline", now)
        resources = self.resources(spec.get("resources"), "spec.resources")

        best_effort = spec.get("bestEffort", False)
        if not isinstance(best_effort, bool):
            raise self.error(
                "spec.bestEffort", f"expected true or false, got {show_value(best_effort)}"
            )
        seed = self.integer(spec.get("seed", 0), "spec.seed", 0)
        requested = self.integer(
            spec.get("requestedCpus", resources.min_cpus), "spec.requestedCpus", 1
        )
        if requested < resources.min_cpus or (
            resources.max_cpus is not None and requested > resources.max_cpus
        ):
            high = resources.max_cpus if resources.max_cpus is not None else "any"
            raise self.error(
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

    def name(self, value: Any, path: str) -> str:
        if not isinstance(value, str):
            raise self.error(path, f"expected a string, got {show_value(value)}")
        if len(value) > MAX_NAME_LENGTH or not _NAME.fullmatch(value):
            raise self.error(
                path,
                f"expected at most {MAX_NAME_LENGTH} lowercase letters, digits and '-', "
                f"starting and ending with a letter or digit, got {show_value(value)}",
            )
        return value

    def program(self, spec: dict[str, Any]) -> tuple[str | None, tuple[str, ...] | None]:
        has_workload, has_command = "workload" in spec, "command" in spec
        if has_workload == has_command:
            which = "both" if has_workload else "neither"
            path = "spec.command" if has_workload else "spec.workload"
            raise self.error(
                path, f"set exactly one of spec.workload and spec.command, got {which}"
            )
        if has_workload:
            workload = spec["workload"]
            if workload not in BUILTIN_WORKLOADS:
                raise self.error(
                    "spec.workload",
                    f"unknown workload {show_value(workload)}; "
                    f"known: {', '.join(BUILTIN_WORKLOADS)}",
                )
            return workload, None
        command = spec["command"]
        if not isinstance(command, list) or not command:
            raise self.error(
                "spec.command", f"expected a non-empty list of strings, got {show_value(command)}"
            )
        for index, item in enumerate(command):
            if not isinstance(item, str):
                raise self.error(
                    f"spec.command[{index}]",
                    f"expected a string, got {show_value(item)}; quote it in the YAML",
                )
        if not command[0]:
            raise self.error("spec.command[0]", "expected the program to run, got ''")
        return None, tuple(command)

    def work(
        self, spec: dict[str, Any], workload: str | None, iterations_per_epoch: Mapping[str, int]
    ) -> int:
        work = self.mapping(self.required(spec, "spec", "work"), "spec.work", _WORK_KEYS)
        if ("iterations" in work) == ("epochs" in work):
            which = "both" if "iterations" in work else "neither"
            raise self.error(
                "spec.work.iterations",
                f"set exactly one of spec.work.iterations and spec.work.epochs, got {which}",
            )
        if "iterations" in work:
            return self.integer(work["iterations"], "spec.work.iterations", 1)
        epochs = self.integer(work["epochs"], "spec.work.epochs", 1)
        if workload is None:
            raise self.error(
                "spec.work.epochs",
                "epochs need a built-in workload (its epoch size is known); "
                "a command's job states spec.work.iterations",
            )
        if workload not in iterations_per_epoch:
            raise self.error(
                "spec.work.epochs", f"the size of an epoch of {workload!r} is not known"
            )
        return epochs * iterations_per_epoch[workload]

    def deadline(self, value: Any, path: str, now: float | None) -> Deadline:
        if isinstance(value, datetime):  # YAML reads an unquoted timestamp itself
            moment = value
        elif isinstance(value, str):
            match = _DURATION.fullmatch(value)
            if value and match:
                seconds = sum(
                    int(count) * size
                    for count, (_, size) in zip(match.groups(), _DURATION_UNITS, strict=True)
                    if count
                )
                if seconds < 1:
                    raise self.error(path, f"expected a duration of at least 1s, got {value!r}")
                return Deadline(relative_s=seconds)
            try:
                moment = datetime.fromisoformat(value)
            except ValueError:
                raise self.error(path, f"expected {_DEADLINE_FORMATS}, got {value!r}") from None
        elif isinstance(value, date) or _is_int(value) or isinstance(value, float):
            hint = "; write '600s' for seconds" if _is_int(value) else ""
            raise self.error(path, f"expected {_DEADLINE_FORMATS}, got {show_value(value)}{hint}")
        else:
            raise self.error(path, f"expected {_DEADLINE_FORMATS}, got {show_value(value)}")
        if moment.tzinfo is None:
            raise self.error(
                path,
                f"{moment.isoformat()} has no timezone; add one, e.g. 'Z' for UTC or '+01:00'",
            )
        absolute_at = moment.timestamp()
        if now is not None and absolute_at <= now:
            when = datetime.fromtimestamp(now, tz=UTC).isoformat()
            raise self.error(path, f"{moment.isoformat()} is not in the future (now is {when})")
        return Deadline(absolute_at=absolute_at)

    def resources(self, value: Any, path: str) -> Resources:
        if value is None:
            return Resources()
        data = self.mapping(value, path, _RESOURCE_KEYS)
        min_cpus = self.integer(data.get("minCpus", 1), f"{path}.minCpus", 1)
        max_cpus = None
        if data.get("maxCpus") is not None:
            max_cpus = self.integer(data["maxCpus"], f"{path}.maxCpus", 1)
            if min_cpus > max_cpus:
                raise self.error(
                    f"{path}.minCpus",
                    f"must not exceed maxCpus ({max_cpus}), got {min_cpus}",
                )
        memory = None
        if data.get("memory") is not None:
            memory = self.memory(data["memory"], f"{path}.memory")
        return Resources(min_cpus=min_cpus, max_cpus=max_cpus, memory_bytes=memory)

    def memory(self, value: Any, path: str) -> int:
        expected = "a size like '512Mi', '2Gi' (units Ki, Mi, Gi, Ti) or a whole number of bytes"
        if _is_int(value):
            if value < 1:
                raise self.error(path, f"expected {expected}, got {value}")
            return value
        match = _MEMORY.fullmatch(value) if isinstance(value, str) else None
        if match is None:
            raise self.error(path, f"expected {expected}, got {show_value(value)}")
        # Decimal, not float: '1.5Gi' must come out as exact bytes.
        size = Decimal(match.group(1)) * _MEMORY_UNITS[match.group(2)]
        if size != size.to_integral_value():
            raise self.error(path, f"{value!r} is not a whole number of bytes")
        if size < 1:
            raise self.error(path, f"expected {expected} of at least 1 byte, got {value!r}")
        return int(size)


def _unknown_key_message(key: str, allowed: tuple[str, ...]) -> str:
    # Compare lowercased so that 'mincpus' still suggests 'minCpus'.
    by_lower = {name.lower(): name for name in allowed}
    close = difflib.get_close_matches(key.lower(), list(by_lower), n=1, cutoff=0.6)
    hint = f"; did you mean {by_lower[close[0]]!r}?" if close else ""
    return f"unknown key {key!r}{hint} (valid keys: {', '.join(allowed)})"
